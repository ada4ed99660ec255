#!/usr/bin/env bash
# Builds KWOK (the simulated kubelet for our fake nodes) from the Go module proxy and copies the
# stage files we run it with next to the binary. Cached outside the repo, keyed by version.
# Prints the path of the kwok binary on the last line of stdout.
set -euo pipefail
KWOK_VERSION=v0.8.0
cache_root="${ORB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orb-rs}"
dir="$cache_root/kwok-$KWOK_VERSION"
if [[ -x "$dir/kwok" && -f "$dir/stages/pod-ready.yaml" ]]; then
  echo "$dir/kwok"
  exit 0
fi
command -v go >/dev/null || { echo "error: 'go' is not on PATH; install Go 1.26" >&2; exit 1; }
echo "building KWOK $KWOK_VERSION into $dir (a few minutes, once)..." >&2
start=$(date +%s)
rm -rf "$dir.partial"; mkdir -p "$dir.partial/stages"
GOFLAGS= CGO_ENABLED=0 GOBIN="$dir.partial" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
cp "$src/node/fast/node-initialize.yaml" \
   "$src/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
   "$src/pod/fast/pod-ready.yaml" \
   "$src/pod/fast/pod-delete.yaml" \
   "$src/pod/chaos/pod-container-running-failed.yaml" \
   "$dir.partial/stages/"
# Job pods complete after a delay (default 1 s + up to 1 s jitter; a pod may set its own with the
# annotation pod-complete.stage.kwok.x-k8s.io/delay), not instantly, so tests can watch them run.
sed -e 's/jitterDurationMilliseconds: 5000/jitterDurationMilliseconds: 1000/' \
  "$src/pod/general/pod-complete.yaml" > "$dir.partial/stages/pod-complete.yaml"
chmod -R u+w "$dir.partial"
rm -rf "$dir"; mv "$dir.partial" "$dir"
echo "KWOK built in $(( $(date +%s) - start )) s" >&2
echo "$dir/kwok"
