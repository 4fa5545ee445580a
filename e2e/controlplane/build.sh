#!/usr/bin/env bash
# Builds the upstream control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) from the Go modules that
# go.mod pins, into a cache folder outside the repository, and prints that folder as its last line. A folder
# that already holds a complete build of the same inputs is reused as it is.
#
#   HAMI_E2E_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/hami-e2e)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

modver() { awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod"; }
k8s="$(modver k8s.io/kubernetes)"
etcd="$(modver go.etcd.io/etcd/server/v3)"
# The inputs' digest, so that a changed go.mod, go.sum or main.go builds into a new folder.
digest="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-10)"
root="${HAMI_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-e2e}"
out="$root/k8s-$k8s-etcd-$etcd-$digest"
names=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

complete() {
    local n
    for n in controlplane "${names[@]}"; do [[ -x "$out/$n" ]] || return 1; done
}

if ! complete; then
    if ! command -v go >/dev/null 2>&1; then
        echo "make e2e-bin: building kube-apiserver, kube-scheduler and etcd from their Go modules needs Go 1.26" \
             "or newer on PATH and the Go module proxy (GOPROXY); no go command found, and $out is not built" >&2
        exit 2
    fi
    echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $k8s and etcd $etcd into $out" \
         "(cold: about 15-25 minutes on 2 cores)" >&2
    mkdir -p "$root"
    tmp="$(mktemp -d "$root/.build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    minor="${k8s#v1.}"; minor="${minor%%.*}"
    # The version stamps kube-apiserver reports at /version (upstream's build sets them the same way).
    ldflags="-s -w"
    ldflags+=" -X k8s.io/component-base/version.gitVersion=$k8s"
    ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
    ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
    (cd "$here" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$tmp/controlplane" .)
    for n in "${names[@]}"; do ln -s controlplane "$tmp/$n"; done
    rm -rf "$out"
    mv "$tmp" "$out"
    trap - EXIT
    echo "built in $((SECONDS - start)) s; $(du -sh "$out" | cut -f1) in $out" >&2
fi
echo "$out"
