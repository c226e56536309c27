#!/usr/bin/env bash
# Try a 2-node job on one machine: two `fabricx run` commands, one per "node", meeting on loopback.
# On real machines run the node-rank 0 line on the first machine and the node-rank 1 line on the second,
# with --main-address set to the first machine's address (reachable from the second) and a free port.
#
#   bash examples/multinode/run_two_nodes_locally.sh [DEVICES_PER_NODE] [extra train.py arguments]
set -euo pipefail
cd "$(dirname "$0")"
DEVICES="${1:-1}"
shift || true
PORT="${MAIN_PORT:-29531}"
FABRICX="${FABRICX:-fabricx}"   # e.g. FABRICX="python -m fabricx" when the console script is not on PATH

common=(run --accelerator cpu --num-nodes 2 --devices "$DEVICES" --main-address 127.0.0.1 --main-port "$PORT")
$FABRICX "${common[@]}" --node-rank 0 train.py "$@" &
node0=$!
$FABRICX "${common[@]}" --node-rank 1 train.py "$@" &
node1=$!
# Stop the other node if one fails, so that nothing is left waiting for its peer.
status=0
wait -n "$node0" "$node1" || status=$?
if [ "$status" -ne 0 ]; then kill "$node0" "$node1" 2>/dev/null || true; fi
wait "$node0" 2>/dev/null || status=$?
wait "$node1" 2>/dev/null || status=$?
exit "$status"
