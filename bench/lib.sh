# Shared by bench/run.sh and bench/scale.sh (sourced, not run, after `repo` is set).

# The control plane the cluster benches use: $KUBECONFIG if set, else the local one's.
cp_tool="$repo/tools/control-plane/cp"
export KUBECONFIG="${KUBECONFIG:-$repo/.state/control-plane/admin.kubeconfig}"
started_cp=0

# Starts the local control plane unless its apiserver runs already; $1 names the script in
# messages. Only a control plane started here is stopped by stop_started_control_plane.
ensure_control_plane() {
  # Status into a variable first: `cp status | grep -q` under pipefail fails on SIGPIPE and
  # would make a running control plane look stopped (and then be stopped at exit).
  local state
  state="$("$cp_tool" status 2>/dev/null || true)"
  if ! grep -Eq '^kube-apiserver +running' <<<"$state"; then
    echo "$1: local control plane not running; starting it (stopped again at exit)" >&2
    started_cp=1
    "$cp_tool" up >&2
  fi
}

# For the scripts' exit traps: stops the control plane if ensure_control_plane started it.
stop_started_control_plane() {
  if (( started_cp )); then
    echo "$1: stopping the control plane this script started" >&2
    "$cp_tool" down || echo "$1: warning: 'cp down' failed; run tools/control-plane/cp down" >&2
  fi
}

# BENCH_SMOKE=1 checks that the benches, these scripts and their collectors still run end to
# end; it measures nothing. The benches are built in the test profile (what `cargo test`
# builds: no release build), run at tiny sizes (each script sets them), and the results go
# to a temporary directory, never bench/results. scripts/test.sh runs it after the tests.
smoke="${BENCH_SMOKE:-0}"

# Builds every bench in one `cargo bench --no-run` (`cargo test --no-run` when smoke) with one
# feature set (separate `cargo bench -p` calls unify features differently: pdb-operator's
# dev-dependencies add kube features, and kube would be rebuilt in release each time), and
# fills the associative array `exe` with each bench's executable. Exits when one did not build.
build_benches() {
  local name path
  declare -gA exe
  local -a build=(cargo bench)
  [[ "$smoke" == 1 ]] && build=(cargo test)
  while read -r name path; do exe[$name]=$path; done < <(
    "${build[@]}" --locked -p orb-k8s -p pdb-operator -p orb -p orb-store \
      --bench hot_paths --bench budget_math --bench store_reads --bench startup --bench acquire_pods --bench list_pages --bench operator_scale \
      --bench daemon_status --bench console_overview \
      --no-run --message-format=json |
      jq -r 'select(.reason == "compiler-artifact" and .target.kind == ["bench"]) | "\(.target.name) \(.executable)"'
  )
  for name in hot_paths budget_math store_reads startup acquire_pods list_pages operator_scale daemon_status console_overview; do
    [[ -x "${exe[$name]:-}" ]] || { echo "bench: error: bench '$name' did not build" >&2; exit 1; }
  done
}

# Waits (at most $1 seconds) until the namespaces the cluster benches made (bench-*) are
# deleted: a bench that starts while the apiserver is still deleting the previous one's
# thousands of pods measures that deletion.
settle_bench_namespaces() {
  command -v kubectl >/dev/null || { echo "bench: no kubectl; not waiting for cleanup" >&2; return 0; }
  local deadline=$((SECONDS + $1)) left
  while :; do
    left="$(kubectl get namespaces -o name 2>/dev/null | grep -c '^namespace/bench-' || true)"
    (( left == 0 )) && return 0
    if (( SECONDS > deadline )); then
      echo "bench: warning: $left bench namespaces still deleting; going on" >&2
      return 0
    fi
    sleep 2
  done
}
