#!/usr/bin/env bash
# Runs the orb-rs benchmarks side by side on this machine and reports them together:
#   - criterion benches of the pure hot paths (orb-k8s hot_paths, pdb-operator budget_math) and
#     of the machine-list read from SQLite (orb-store store_reads);
#   - CLI cold start and HostFactory status of finished 50/500-machine returns and of a
#     completed acquire of 50 running pods, direct and through a running `orb serve`, next to
#     `--version` (orb startup; BENCH_STARTUP_RUNS, default 60; BENCH_STARTUP_LIVE);
#   - acquire of 100/500/1,000 machines per handler vs a bare kube-rs loop, and release of 500
#     pods, on the local control plane (orb-k8s acquire_pods; BENCH_ACQUIRE_HANDLERS,
#     BENCH_ACQUIRE_COUNTS, BENCH_ACQUIRE_ROUNDS, BENCH_RELEASE_COUNT, BENCH_POLL_MS);
#   - a paginated LIST of 5,000 pods with each next page asked for while the current one
#     arrives (the watch cache's way) vs one page after the other, straight and through a
#     proxy with added delay (orb-k8s list_pages; BENCH_LIST_PODS, BENCH_LIST_DELAYS_MS);
#   - the real pdb-operator at 1,000 Deployments: create->PDB p50/p99 next to a bare PDB loop on
#     the same burst (BENCH_OPERATOR_ROUNDS rounds, default 3), full resync, resident memory
#     (pdb-operator operator_scale; skipped when no control plane answers);
#   - the web console's overview with 10,000 machines in headless Chromium (orb
#     console_overview; BENCH_CONSOLE_MACHINES; left out without /usr/bin/chromium).
# Prints one table and writes bench/results/<UTC date>.json.
#
#   bench/run.sh                  everything
#   BENCH_SKIP_ACQUIRE=1 bench/run.sh   no control plane needed (acquire left out)
#   BENCH_SKIP_OPERATOR=1 bench/run.sh  pdb-operator at 1,000 Deployments left out
#   BENCH_SKIP_CONSOLE=1 bench/run.sh   the web console in Chromium left out
#   BENCH_SMOKE=1 bench/run.sh          every part at a tiny size in the test profile: checks that
#                                       the benches and collect.py still run, measures nothing
#
# The control plane: $KUBECONFIG if set, else <repo>/.state/control-plane/admin.kubeconfig. If
# its apiserver is not running, the script starts it with tools/control-plane/cp up and stops
# it again at exit (only then: a control plane someone else started is never stopped).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source bench/lib.sh
stamp="$(date -u +%Y-%m-%d)"
out_dir="$repo/bench/results"
raw="$(mktemp -d)"
# Criterion's flags: a full measurement, or when smoke a few samples of each bench (its sample
# size cannot go below 10), so that collect.py still finds their estimates.
crit=(--bench)
if [[ "$smoke" == 1 ]]; then
  out_dir="$raw/results"
  crit=(--bench --warm-up-time 0.01 --measurement-time 0.01 --sample-size 10)
  # Tiny sizes; a knob the caller set still wins.
  export BENCH_STARTUP_RUNS="${BENCH_STARTUP_RUNS:-2}" BENCH_STARTUP_SIZES="${BENCH_STARTUP_SIZES:-5}" \
    BENCH_STARTUP_LIVE="${BENCH_STARTUP_LIVE:-5}" \
    BENCH_ACQUIRE_COUNTS="${BENCH_ACQUIRE_COUNTS:-5}" BENCH_ACQUIRE_ROUNDS="${BENCH_ACQUIRE_ROUNDS:-1}" \
    BENCH_RELEASE_COUNT="${BENCH_RELEASE_COUNT:-3}" BENCH_RELEASE_OF="${BENCH_RELEASE_OF:-5}" \
    BENCH_PODS="${BENCH_PODS:-100}" BENCH_PODS_PER_REQUEST="${BENCH_PODS_PER_REQUEST:-50}" \
    BENCH_READS="${BENCH_READS:-20}" BENCH_LIST_READS="${BENCH_LIST_READS:-5}" \
    BENCH_RESTARTS="${BENCH_RESTARTS:-1}" BENCH_CHANGED="${BENCH_CHANGED:-2}" \
    BENCH_DEPLOYMENTS="${BENCH_DEPLOYMENTS:-20}" BENCH_OPERATOR_ROUNDS="${BENCH_OPERATOR_ROUNDS:-1}" \
    BENCH_BARE_CONCURRENCY="${BENCH_BARE_CONCURRENCY-0}" \
    BENCH_CONSOLE_MACHINES="${BENCH_CONSOLE_MACHINES:-50}" BENCH_CONSOLE_LOADS="${BENCH_CONSOLE_LOADS:-1}" \
    BENCH_LIST_PODS="${BENCH_LIST_PODS:-30}" BENCH_LIST_PAGE="${BENCH_LIST_PAGE:-10}" \
    BENCH_LIST_ROUNDS="${BENCH_LIST_ROUNDS:-1}" BENCH_LIST_DELAYS_MS="${BENCH_LIST_DELAYS_MS:-2}"
fi
# The parts that ran: collect.py fails when one of them printed no figures it could read.
expect=()

cleanup() {
  stop_started_control_plane bench
  rm -rf "$raw"
}
trap cleanup EXIT

echo "bench: building the benches ($([[ "$smoke" == 1 ]] && echo "test profile, smoke" || echo release))" >&2
build_benches
export CRITERION_HOME="$raw/criterion"
run_start="$(date +%s)"

echo "bench: criterion hot paths (orb-k8s, pdb-operator, orb-store)" >&2
"${exe[hot_paths]}" "${crit[@]}" 2>&1 | tee "$raw/hot_paths.txt" >&2
"${exe[budget_math]}" "${crit[@]}" 2>&1 | tee "$raw/budget_math.txt" >&2
"${exe[store_reads]}" "${crit[@]}" 2>&1 | tee "$raw/store_reads.txt" >&2

echo "bench: CLI start-up and HostFactory status" >&2
"${exe[startup]}" --bench 2>&1 | tee "$raw/startup.txt" >&2

if [[ "${BENCH_SKIP_ACQUIRE:-0}" == 1 ]]; then
  echo "bench: BENCH_SKIP_ACQUIRE=1, acquire left out" >&2
  : >"$raw/acquire.txt"
else
  ensure_control_plane bench
  echo "bench: acquire per handler and release vs a bare kube-rs loop ($KUBECONFIG)" >&2
  "${exe[acquire_pods]}" --bench 2>&1 | tee "$raw/acquire.txt" >&2
  expect+=(--expect acquire)
  echo "bench: a paginated LIST, pages one after the other vs overlapped ($KUBECONFIG)" >&2
  "${exe[list_pages]}" --bench 2>&1 | tee "$raw/list_pages.txt" >&2
  expect+=(--expect list-pages)
fi

settle() { settle_bench_namespaces 600; }

# orb serve at 10,000 pods: status reads from the watch cache vs a LIST per read, memory.
if [[ "${BENCH_SKIP_ACQUIRE:-0}" == 1 || "${BENCH_SKIP_DAEMON:-0}" == 1 ]]; then
  echo "bench: orb serve at 10,000 pods left out" >&2
  : >"$raw/daemon.txt"
else
  settle
  echo "bench: orb serve status reads at 10,000 pods ($KUBECONFIG)" >&2
  "${exe[daemon_status]}" --bench 2>&1 | tee "$raw/daemon.txt" >&2
  expect+=(--expect daemon)
fi

# After the others: 1,000 Deployments and 2,000 pods load the apiserver for a few minutes.
if [[ "${BENCH_SKIP_OPERATOR:-0}" == 1 ]]; then
  echo "bench: BENCH_SKIP_OPERATOR=1, pdb-operator at 1,000 Deployments left out" >&2
  : >"$raw/operator.txt"; : >"$raw/operator-steady.txt"
elif ! "${exe[operator_scale]}" --probe; then
  echo "bench: no control plane answers with $KUBECONFIG; pdb-operator bench left out" >&2
  : >"$raw/operator.txt"; : >"$raw/operator-steady.txt"
else
  # Twice: 1,000 Deployments in one burst (the apiserver's throughput decides), then 1,000
  # arriving at a steady ${BENCH_OPERATOR_RATE:-20} a second (the operator's latency decides).
  settle
  echo "bench: pdb-operator at 1,000 Deployments in one burst, next to the bare PDB loop ($KUBECONFIG)" >&2
  BENCH_ROUNDS="${BENCH_OPERATOR_ROUNDS:-3}" "${exe[operator_scale]}" --bench 2>&1 |
    tee "$raw/operator.txt" >&2
  settle
  echo "bench: pdb-operator at 1,000 Deployments, ${BENCH_OPERATOR_RATE:-20} a second" >&2
  BENCH_CREATE_RATE="${BENCH_OPERATOR_RATE:-20}" "${exe[operator_scale]}" --bench 2>&1 |
    tee "$raw/operator-steady.txt" >&2
  expect+=(--expect operator --expect operator-steady)
fi

# The console needs no cluster: a seeded store, orb serve's router and Chromium.
if [[ "${BENCH_SKIP_CONSOLE:-0}" == 1 ]] || ! command -v chromium >/dev/null; then
  echo "bench: the web console overview left out (BENCH_SKIP_CONSOLE=1 or no chromium)" >&2
  : >"$raw/console.txt"
else
  echo "bench: the web console overview in headless Chromium" >&2
  "${exe[console_overview]}" --bench 2>&1 | tee "$raw/console.txt" >&2
  expect+=(--expect console)
fi

mkdir -p "$out_dir"
python3 "$repo/bench/collect.py" \
  --criterion-dir "$CRITERION_HOME" --since "$run_start" \
  --startup "$raw/startup.txt" --acquire "$raw/acquire.txt" --operator "$raw/operator.txt" \
  --operator-steady "$raw/operator-steady.txt" \
  --daemon "$raw/daemon.txt" --console "$raw/console.txt" --list-pages "$raw/list_pages.txt" \
  --commit "$(git rev-parse --short HEAD)" --json "$out_dir/$stamp.json" "${expect[@]}"
if [[ "$smoke" == 1 ]]; then
  echo "bench: smoke run passed (every bench ran and collect.py read its figures; nothing kept)" >&2
else
  echo "bench: wrote bench/results/$stamp.json" >&2
fi
