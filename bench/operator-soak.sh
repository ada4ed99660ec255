#!/usr/bin/env bash
# The pdb-operator drain soak of issue #52: the `soak::drain_soak` cluster test
# (crates/pdb-operator/tests/cluster/soak) run for ORB_OPSOAK_SECONDS (default 1800) with
# ORB_OPSOAK_SEED (default: random, printed). Two replicas of the real operator binary as the
# shipped ServiceAccount while nodes are drained over and over; it prints the seed, the drains,
# the evictions by answer (200/429/500), the invariant checks, the violations and the operator's
# RSS curve; the whole output goes to .state/operator-soak/<UTC date>.log. Exits non-zero on a
# violation, after printing the seed and the event log to replay it.
#
#   bench/operator-soak.sh                                    30 minutes, random seed
#   ORB_OPSOAK_SECONDS=300 ORB_OPSOAK_SEED=7 bench/operator-soak.sh
#
# The control plane: $KUBECONFIG if set, else <repo>/.state/control-plane/admin.kubeconfig,
# started (and stopped at exit) when not running, as bench/run.sh does.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
source bench/lib.sh
trap 'stop_started_control_plane operator-soak.sh' EXIT
ensure_control_plane operator-soak.sh

export ORB_OPSOAK_SECONDS="${ORB_OPSOAK_SECONDS:-1800}"
export ORB_OPSOAK_SEED="${ORB_OPSOAK_SEED:-random}"
mkdir -p .state/operator-soak
log=".state/operator-soak/$(date -u +%Y-%m-%dT%H%M%SZ).log"
echo "operator-soak.sh: ${ORB_OPSOAK_SECONDS} s, seed ${ORB_OPSOAK_SEED}; full output in $log" >&2
status=0
cargo test -p pdb-operator --test cluster --locked -- --include-ignored --exact soak::drain_soak \
  --nocapture >"$log" 2>&1 || status=$?
grep -E '^opsoak: ' "$log" | grep -v 'VIOLATION' || true
if (( status != 0 )); then
  echo "operator-soak.sh: the soak failed (exit $status); its violations and event log:" >&2
  sed -n '/violation(s):/,$p' "$log" >&2
fi
exit "$status"
