#!/usr/bin/env bash
# The main job on the local default: builds what is missing, starts the local Kubernetes v1.37.2
# control plane (simulated nodes), writes an orb config that uses it with SQLite, then acquires
# machines with each handler and returns exactly the ones it names.
# The control plane keeps running afterwards; stop it with `tools/control-plane/cp down`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source scripts/lib/prereqs.sh
ensure_prereqs

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "local control plane"
export KUBECONFIG="$(tools/control-plane/cp up)"
tools/control-plane/cp status

step "building orb"
cargo build -p orb --quiet
orb="$repo/target/debug/orb"

# All of orb's files (config, templates, SQLite database, logs) for the demo live here.
export ORB_ROOT_DIR="$repo/.state/demo"
rm -rf "$ORB_ROOT_DIR"
step "orb init (config for the local control plane, SQLite in $ORB_ROOT_DIR)"
"$orb" init --local-control-plane --force -o table
"$orb" templates list -o table

demo_handler() { # template, machine to return (jq index into the request's machines)
  local template=$1 pick=$2 req victim
  step "$template: request 3 machines and wait"
  req=$("$orb" machines request "$template" 3 --wait -o json | jq -r '.request.request_id')
  "$orb" requests status "$req" -o table
  victim=$("$orb" machines list -o json | jq -r --arg r "$req" "[.[] | select(.request_id == \$r) | .machine_id] | sort | $pick")
  step "$template: return $victim"
  wait_return "$("$orb" machines return "$victim" -o json | jq -r '.request.request_id')"
  "$orb" requests status "$req" -o table
}

wait_return() { # return request id: poll its status (as HostFactory would) until it completes
  local ret=$1
  for _ in $(seq 1 120); do
    [[ "$("$orb" requests status "$ret" -o json | jq -r '.[0].request.status')" == complete ]] && break
    sleep 1
  done
  "$orb" requests status "$ret" -o table
}

demo_handler pod-worker '.[0]'
demo_handler deployment-worker '.[1]'
demo_handler statefulset-worker '.[-1]'   # a StatefulSet gives back its highest ordinal

step "machines still held"
"$orb" machines list -o table
requests=$("$orb" machines list -o json | jq -r '[.[].request_id] | unique | .[]')
step "returning the rest"
for r in $requests; do
  wait_return "$("$orb" machines return --request-id "$r" -o json | jq -r '.request.request_id')"
done
cat <<EOF

Done. The control plane keeps running; to use orb against it yourself:
  export KUBECONFIG=$KUBECONFIG ORB_ROOT_DIR=$ORB_ROOT_DIR
  $orb --help
Stop it with: tools/control-plane/cp down
EOF
