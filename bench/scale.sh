#!/usr/bin/env bash
# Issue #22's figures: the benches of bench/run.sh again at 1x, 2x and 5x today's sizes, one
# after another on the local control plane, so a reader sees how each cost grows with the work.
#
# At factor F:
#   startup   HostFactory status of a completed acquire of 1,000 x F running pods, direct (a
#             LIST per call) and through `orb serve` (its watch cache), each next to
#             `--version`, and of a finished return of as many machines (store only); once,
#             the same for 50 machines
#   daemon    `orb serve` with 10,000 x F pending pods in requests of 50: status p50/p99 from
#             the watch cache, VmRSS, restart -> serving cache next to a bare paginated LIST,
#             the start-up reconciliation, store rows written by status reads
#   acquire   one request of 1,000 x F machines per handler next to the bare loop (1 round),
#             and a return of 500 x F machines of a 1,000 x F Pod request next to bare deletes
#   operator  pdb-operator with 1,000 x F Deployments in one burst (next to the unlimited bare
#             PDB loop) and arriving at 20 a second: p99, resync, VmRSS
# While each part runs, the VmRSS of kube-apiserver and etcd is sampled every 2 s; the largest
# is reported with the part.
#
#   bench/scale.sh
#   BENCH_SCALE_FACTORS=5 BENCH_SCALE_PARTS=daemon bench/scale.sh
#   BENCH_SMOKE=1 bench/scale.sh   factors 1,2 of a unit of 10 in the test profile: checks that
#                                  the parts and collect_scale.py still run, measures nothing
#
# Knobs: BENCH_SCALE_FACTORS (1,2,5), BENCH_SCALE_PARTS (startup,daemon,acquire,operator),
# BENCH_SCALE_HANDLERS (pod,deployment,statefulset,job), BENCH_STARTUP_RUNS (20 here),
# BENCH_SCALE_UNIT (1000: the "1,000" above; the sizes are multiples of it).
# Writes bench/results/<UTC date>-scale.json and prints one table per part. The control plane
# is handled as in bench/run.sh: started (and stopped at exit) only when none is running.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source bench/lib.sh
factors="${BENCH_SCALE_FACTORS:-1,2,5}"
parts="${BENCH_SCALE_PARTS:-startup,daemon,acquire,operator}"
handlers="${BENCH_SCALE_HANDLERS:-pod,deployment,statefulset,job}"
raw="$(mktemp -d)"
sampler=""
unit="${BENCH_SCALE_UNIT:-1000}"
results="bench/results"
if [[ "$smoke" == 1 ]]; then
  factors="${BENCH_SCALE_FACTORS:-1,2}" unit="${BENCH_SCALE_UNIT:-10}" results="$raw/results"
  export BENCH_STARTUP_RUNS="${BENCH_STARTUP_RUNS:-2}" BENCH_READS="${BENCH_READS:-20}"
fi

cleanup() {
  [[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null || true
  stop_started_control_plane scale
  rm -rf "$raw"
}
trap cleanup EXIT

want() { [[ ",$parts," == *",$1,"* ]]; }

echo "scale: building the benches ($([[ "$smoke" == 1 ]] && echo "test profile, smoke" || echo release))" >&2
build_benches

if want daemon || want acquire || want operator; then
  ensure_control_plane scale
fi

# The control plane's memory while one part runs: the largest VmRSS (MiB) of kube-apiserver
# and etcd seen every 2 s, written to $1 when the sampler is stopped.
start_sampler() {
  local out=$1
  (
    api=0 etcd=0
    trap 'echo "{\"apiserver_rss_mib\": $api, \"etcd_rss_mib\": $etcd}" > "$out"; exit 0' TERM
    while :; do
      a=$(ps -C kube-apiserver -o rss= | sort -n | tail -n 1); a=$(( ${a:-0} / 1024 ))
      e=$(ps -C etcd -o rss= | sort -n | tail -n 1); e=$(( ${e:-0} / 1024 ))
      (( a > api )) && api=$a
      (( e > etcd )) && etcd=$e
      sleep 2 & wait $!
    done
  ) &
  sampler=$!
}
stop_sampler() { kill -TERM "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; sampler=""; }

settle() { settle_bench_namespaces 900; }

run_part() { # part factor -- command...
  local part=$1 f=$2; shift 3
  settle
  echo "scale: $part at ${f}x" >&2
  start_sampler "$raw/$part-$f.mem.json"
  "$@" 2>&1 | tee "$raw/$part-$f.txt" >&2
  stop_sampler
}

IFS=, read -ra fs <<<"$factors"
for f in "${fs[@]}"; do
  if want startup; then
    sizes="$((unit * f))"; [[ "$f" == "${fs[0]}" ]] && sizes="50,$sizes"
    run_part startup "$f" -- env BENCH_STARTUP_SIZES="$sizes" BENCH_STARTUP_LIVE="$sizes" \
      BENCH_STARTUP_RUNS="${BENCH_STARTUP_RUNS:-20}" "${exe[startup]}" --bench
  fi
  if want daemon; then
    run_part daemon "$f" -- env BENCH_PODS="$((10 * unit * f))" BENCH_PODS_PER_REQUEST=50 \
      BENCH_READS="${BENCH_READS:-2000}" BENCH_LIST_READS=50 "${exe[daemon_status]}" --bench
  fi
  if want acquire; then
    run_part acquire "$f" -- env BENCH_ACQUIRE_HANDLERS="$handlers" BENCH_ACQUIRE_COUNTS="$((unit * f))" \
      BENCH_ACQUIRE_ROUNDS=1 BENCH_RELEASE_COUNT="$((unit / 2 * f))" BENCH_RELEASE_OF="$((unit * f))" \
      "${exe[acquire_pods]}" --bench
  fi
  if want operator; then
    run_part operator "$f" -- env BENCH_DEPLOYMENTS="$((unit * f))" BENCH_BARE_CONCURRENCY=0 \
      "${exe[operator_scale]}" --bench
    run_part operator-steady "$f" -- env BENCH_DEPLOYMENTS="$((unit * f))" BENCH_CREATE_RATE=20 \
      "${exe[operator_scale]}" --bench
  fi
done

expect=()
for part in startup daemon acquire operator; do
  want "$part" && expect+=(--expect "$part")
done
want operator && expect+=(--expect operator-steady)
mkdir -p "$results"
out="$results/$(date -u +%Y-%m-%d)-scale.json"
python3 bench/collect_scale.py --raw "$raw" --factors "$factors" \
  --commit "$(git rev-parse --short HEAD)" --json "$out" "${expect[@]}"
if [[ "$smoke" == 1 ]]; then
  echo "scale: smoke run passed (every part ran at each factor; nothing kept)" >&2
else
  echo "scale: wrote $out" >&2
fi
