#!/usr/bin/env bash
# Installs the system tools that some tests drive for real, from Debian's packages, when they are missing:
#   prometheus        the e2e tier evaluates every dashboard query against a real Prometheus
#   chromium          the simulator's HTML report is rendered and checked in headless Chromium
# Usage: e2e/sysdeps.sh TOOL...   (TOOL: prometheus | chromium). A tool already on PATH is left alone. Without
# root or apt-get it only says what is missing: the tests that need the tool then skip with that message (or
# fail, under HAMI_E2E_REQUIRE=1). It never fails the build by itself.
set -uo pipefail

declare -A package=([prometheus]=prometheus [chromium]=chromium)
declare -A command=([prometheus]=prometheus [chromium]=chromium)
updated=0

for tool in "$@"; do
    pkg="${package[$tool]:-}"
    if [[ -z "$pkg" ]]; then
        echo "sysdeps: unknown tool '$tool' (known: ${!package[*]})" >&2
        exit 2
    fi
    command -v "${command[$tool]}" >/dev/null 2>&1 && continue
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "sysdeps: $tool is not installed and this is not a root Debian shell; install Debian's '$pkg'" \
             "package to run the tests that need it" >&2
        continue
    fi
    echo "sysdeps: installing Debian's $pkg" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1; then
        if [[ $updated == 0 ]]; then
            apt-get update -qq >/dev/null 2>&1 || true
            updated=1
        fi
        apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1 \
            || echo "sysdeps: apt-get could not install $pkg; the tests that need $tool will skip" >&2
    fi
done
exit 0
