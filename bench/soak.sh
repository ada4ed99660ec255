#!/usr/bin/env bash
# The disruption soak of issue #51 for a long time: the `soak::disruption_soak` cluster test
# (crates/orb/tests/cluster/soak) run for ORB_SOAK_SECONDS (default 1800) with ORB_SOAK_SEED
# (default: random, printed). It prints the events applied per kind, the invariant checks, the
# violations, orb serve's RSS curve (every 10 s) and the HostFactory getRequestStatus p50/p99
# under the churn; the whole output goes to .state/soak/<UTC date>.log. Exits non-zero
# on a violation, after printing the seed and the event log to replay it.
#
#   bench/soak.sh                                    30 minutes, random seed
#   ORB_SOAK_SECONDS=300 ORB_SOAK_SEED=7 bench/soak.sh
#
# The control plane: $KUBECONFIG if set, else <repo>/.state/control-plane/admin.kubeconfig,
# started (and stopped at exit) when not running, as bench/run.sh does.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
source bench/lib.sh
trap 'stop_started_control_plane soak.sh' EXIT
ensure_control_plane soak.sh

export ORB_SOAK_SECONDS="${ORB_SOAK_SECONDS:-1800}"
export ORB_SOAK_SEED="${ORB_SOAK_SEED:-random}"
mkdir -p .state/soak
log=".state/soak/$(date -u +%Y-%m-%dT%H%M%SZ).log"
echo "soak.sh: ${ORB_SOAK_SECONDS} s, seed ${ORB_SOAK_SEED}; full output in $log" >&2
status=0
cargo test -p orb --test cluster --locked -- --include-ignored --exact soak::disruption_soak \
  --nocapture >"$log" 2>&1 || status=$?
grep -E '^soak: ' "$log" | grep -v 'VIOLATION' || true
if (( status != 0 )); then
  echo "soak.sh: the soak failed (exit $status); its violations and event log:" >&2
  sed -n '/violation(s):/,$p' "$log" >&2
fi
exit "$status"
