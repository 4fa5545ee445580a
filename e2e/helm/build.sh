#!/usr/bin/env bash
# Builds Helm (helm.sh/helm/v4/cmd/helm, pinned by this module's go.mod `tool` line) into its own cache folder
# beside the control plane's, and prints that folder as its last line. A separate module, so that a Helm bump
# never rebuilds kube-apiserver (e2e/controlplane) and the reverse. A folder with a built helm is reused as it is.
#
#   HAMI_E2E_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/hami-e2e)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

helm="$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
# The inputs' digest, so that a changed go.mod or go.sum builds into a new folder.
digest="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-10)"
root="${HAMI_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-e2e}"
out="$root/helm-$helm-$digest"

if [[ ! -x "$out/helm" ]]; then
    if ! command -v go >/dev/null 2>&1; then
        echo "make e2e-bin: building helm $helm from its Go module needs Go 1.26 or newer on PATH and the Go" \
             "module proxy (GOPROXY); no go command found, and $out is not built" >&2
        exit 2
    fi
    echo "building helm $helm into $out (cold: a few minutes on 2 cores)" >&2
    mkdir -p "$root"
    tmp="$(mktemp -d "$root/.build-helm.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    # The version stamps `helm version` reports (upstream's Makefile sets them the same way for a tag).
    ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm"
    ldflags+=" -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
    (cd "$here" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$tmp/helm" helm.sh/helm/v4/cmd/helm)
    rm -rf "$out"
    mv "$tmp" "$out"
    trap - EXIT
    echo "built in $((SECONDS - start)) s; $(du -sh "$out" | cut -f1) in $out" >&2
fi
echo "$out"
