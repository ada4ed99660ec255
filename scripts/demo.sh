#!/usr/bin/env bash
# The main job on the local default: builds what is missing, starts the local Kubernetes v1.37.2
# control plane (simulated nodes), and shows the Ready nodes. Leave it running for `orb`;
# stop it with `tools/control-plane/cp down`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source scripts/lib/prereqs.sh
ensure_prereqs
kubeconfig="$(tools/control-plane/cp up)"
export KUBECONFIG="$kubeconfig"
tools/control-plane/cp status
echo
echo "The control plane keeps running. Use it with:  export KUBECONFIG=$kubeconfig"
echo "Stop it with:                                   tools/control-plane/cp down"
