# Shared by bench/run.sh and bench/scale.sh (sourced, not run).

# Builds every bench in one `cargo bench --no-run` with one feature set (separate
# `cargo bench -p` calls unify features differently: pdb-operator's dev-dependencies add kube
# features, and kube would be rebuilt in release each time), and fills the associative array
# `exe` with each bench's executable. Exits when one did not build.
build_benches() {
  local name path
  declare -gA exe
  while read -r name path; do exe[$name]=$path; done < <(
    cargo bench -p orb-k8s -p pdb-operator -p orb -p orb-store \
      --bench hot_paths --bench budget_math --bench store_reads --bench startup --bench acquire_pods --bench operator_scale \
      --bench daemon_status --bench console_overview \
      --no-run --message-format=json |
      jq -r 'select(.reason == "compiler-artifact" and .target.kind == ["bench"]) | "\(.target.name) \(.executable)"'
  )
  for name in hot_paths budget_math store_reads startup acquire_pods operator_scale daemon_status console_overview; do
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
