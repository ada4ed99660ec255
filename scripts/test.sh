#!/usr/bin/env bash
# Runs the whole orb-rs test suite: builds what is missing (the Kubernetes v1.37.2 control plane
# and the container images are cached outside the repo), starts the local control plane and a
# PostgreSQL server, runs formatting, lint, unit and integration tests (the images' binaries
# and the in-cluster runs included) and a short fuzz run of each fuzz target, and stops every
# service again, pass or fail.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source scripts/lib/prereqs.sh
source scripts/lib/postgres.sh
t0=$(date +%s)
state="$repo/.state"
# Its own control plane (state dir and ports), so a developer's `cp up` cluster keeps running.
export ORB_CP_STATE_DIR="$state/test-control-plane"
export ORB_CP_PORT_OFFSET="${ORB_CP_PORT_OFFSET:-100}"
pg_dir="${TMPDIR:-/tmp}/orb-rs-postgres-$$"

cleanup() {
  local rc=$?
  echo "--- stopping services" >&2
  tools/control-plane/cp down || true
  pg_stop "$pg_dir"; rm -rf "$pg_dir"
  if (( rc != 0 )); then
    echo "test suite FAILED (exit $rc); component logs are in $ORB_CP_STATE_DIR/logs" >&2
  fi
  exit $rc
}
trap cleanup EXIT INT TERM

echo "--- prerequisites" >&2
ensure_prereqs
echo "--- control plane binaries (and helm, for the chart tests)" >&2
tools/control-plane/cp build >/dev/null
export ORB_HELM="$(tools/control-plane/build-helm.sh | tail -n 1)"
echo "--- container images of orb and pdb-operator (cached by a hash of their sources)" >&2
t_images=$(date +%s)
export ORB_IMAGES_DIR="$(scripts/build-images.sh | tail -n 1)"
echo "images ready in $(( $(date +%s) - t_images )) s: $ORB_IMAGES_DIR" >&2
echo "--- starting PostgreSQL" >&2
export ORB_TEST_POSTGRES_URL="$(pg_start "$pg_dir" 55432)"
export ORB_REQUIRE_POSTGRES=1
echo "--- starting the local control plane" >&2
export KUBECONFIG="$(tools/control-plane/cp up)"
echo "--- formatting and lint" >&2
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "--- building tests" >&2
cargo test --workspace --locked --no-run 2>&1 | tail -n 3 >&2
echo "time from start to first test: $(( $(date +%s) - t0 )) s" >&2
echo "--- tests" >&2
# Cluster tests share one small control plane: keep parallelism low (one namespace per test).
# They (and the helm chart tests) are #[ignore]d so plain `cargo test` passes without a cluster;
# here every service is up, so --include-ignored runs them with the rest.
cargo test --workspace --locked --no-fail-fast -- --include-ignored --test-threads="${ORB_TEST_THREADS:-4}"
echo "--- fuzz smoke (each target ${ORB_FUZZ_SECONDS:-30} s, from the committed corpus)" >&2
scripts/fuzz-smoke.sh
