#!/usr/bin/env bash
# Builds Helm (used by the pdb-operator chart tests: lint, template, install) from the Go module
# proxy. Cached outside the repo, keyed by version.
# Prints the path of the helm binary on the last line of stdout; tests read it from ORB_HELM:
#   export ORB_HELM="$(tools/control-plane/build-helm.sh | tail -n1)"
set -euo pipefail
HELM_VERSION=v3.22.0
cache_root="${ORB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orb-rs}"
dir="$cache_root/helm-$HELM_VERSION"
if [[ -x "$dir/helm" ]]; then
  echo "$dir/helm"
  exit 0
fi
command -v go >/dev/null || { echo "error: 'go' is not on PATH; install Go 1.26" >&2; exit 1; }
echo "building Helm $HELM_VERSION into $dir (a few minutes, once)..." >&2
start=$(date +%s)
rm -rf "$dir.partial"; mkdir -p "$dir.partial"
GOFLAGS= CGO_ENABLED=0 GOBIN="$dir.partial" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
chmod -R u+w "$dir.partial"
rm -rf "$dir"; mv "$dir.partial" "$dir"
echo "Helm built in $(( $(date +%s) - start )) s" >&2
echo "$dir/helm"
