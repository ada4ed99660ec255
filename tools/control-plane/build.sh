#!/usr/bin/env bash
# Builds the upstream Kubernetes v1.37.2 control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler) and etcd from the Go module proxy, through the wrapper module in k8sbins/.
# Binaries are cached outside the repository, keyed by a hash of go.mod + go.sum + RECIPE,
# so a second run only prints the cached directory.
# Prints the bin directory on the last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/k8sbins"
K8S_VERSION=v1.37.2
cache_root="${ORB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orb-rs}"
# Bump RECIPE when the build flags below change, so cached binaries are rebuilt.
RECIPE=1
key="$( (cat "$mod/go.mod" "$mod/go.sum"; echo "recipe=$RECIPE") | sha256sum | cut -c1-16)"
bin="$cache_root/k8s-$K8S_VERSION-$key/bin"

if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" && -x "$bin/kube-scheduler" && -x "$bin/etcd" ]]; then
  echo "control plane binaries cached in $bin" >&2
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "error: 'go' is not on PATH; install Go 1.26 (the Debian/rustup image ships it)" >&2; exit 1; }

stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-01-01T00:00:00Z"
done

tmp="$bin.partial"
rm -rf "$tmp"; mkdir -p "$tmp"
start=$(date +%s)
echo "building Kubernetes $K8S_VERSION control plane into $bin (first build takes 15-30 minutes on 2 cores)..." >&2
cd "$mod"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
go build -trimpath -ldflags "-s -w$stamp" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3 >&2
mv "$tmp" "$bin.done" && rm -rf "$bin" && mv "$bin.done" "$bin"
echo "built in $(( $(date +%s) - start )) s; $(du -sh "$bin" | cut -f1) of binaries" >&2
echo "$bin"
