#!/usr/bin/env bash
# Added latency over real links: the gateway between a client and an upstream that each sit
# behind a link of their own, shaped to LINK_RATE (default 1gbit), as a gateway on a team
# server sits between its agents and the provider. Needs root (a network namespace, a veth
# pair, tc's tbf on lo and on the veth).
#
#   BENCH_RESULTS=bench/results BENCH_BIN_DIR=target/release bench/linked.sh
#
# The mock upstream runs in the namespace `ctxkeeper-up` (10.77.0.2), reached over the veth;
# the client (bench/tools/added_latency.py) reaches the gateway over lo. One conversation
# grows to 1,000 messages (~2.2 MB bodies, nothing compacts), on SQLite and the memory store,
# with large bodies forwarded while they arrive (`forward_early_from_bytes`, the default) and
# read whole first (0). Writes linked-STORE-early.json and linked-STORE-whole.json.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
: "${BENCH_RESULTS:?BENCH_RESULTS must name the results directory}"
: "${BENCH_BIN_DIR:?BENCH_BIN_DIR must name the release binaries directory (target/release)}"
BIN_DIR=$(cd "$BENCH_BIN_DIR" && pwd)
RATE=${LINK_RATE:-1gbit}
MESSAGES=${BENCH_LINKED_MESSAGES:-1000}
NS=ctxkeeper-up
if [ "$(id -u)" != 0 ]; then
  echo "linked.sh: SKIPPED, needs root for a network namespace and tc" >&2
  exit 0
fi
mkdir -p "$BENCH_RESULTS"
source "$ROOT/bench/lib.sh"
bench_undo() {
  tc qdisc del dev lo root 2>/dev/null || true
  ip link del ctxk-veth0 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
}

ip netns add "$NS"
ip link add ctxk-veth0 type veth peer name ctxk-veth1
ip link set ctxk-veth1 netns "$NS"
ip addr add 10.77.0.1/24 dev ctxk-veth0
ip link set ctxk-veth0 up
ip netns exec "$NS" ip addr add 10.77.0.2/24 dev ctxk-veth1
ip netns exec "$NS" ip link set ctxk-veth1 up
ip netns exec "$NS" ip link set lo up
tc qdisc add dev lo root tbf rate "$RATE" burst 256kb latency 50ms
tc qdisc add dev ctxk-veth0 root tbf rate "$RATE" burst 256kb latency 50ms

ip netns exec "$NS" "$BIN_DIR/ctxkeeper-mock-upstream" --listen 10.77.0.2:9100 \
  --window 1000000 --no-record >/dev/null 2>"$WORK/mock.log" &
PIDS+=($!)

for store in sqlite memory; do
  for mode in early whole; do
    early_from=262144
    if [ "$mode" = whole ]; then early_from=0; fi
    url="memory://"
    if [ "$store" = sqlite ]; then url="sqlite://$WORK/$mode.db"; fi
    printf '[gateway]\nforward_early_from_bytes = %s\n[policy.cost]\nenabled = false\n' \
      "$early_from" >"$WORK/$mode.toml"
    "$BIN_DIR/ctxkeeper" serve --listen 127.0.0.1:9200 --upstream http://10.77.0.2:9100/v1 \
      --store "$url" --workspace "$WORK/ws-$store-$mode" --config "$WORK/$mode.toml" \
      >/dev/null 2>"$WORK/gateway.log" &
    gateway=$!
    for _ in $(seq 50); do
      curl -fsS http://127.0.0.1:9200/healthz >/dev/null 2>&1 && break
      sleep 0.2
    done
    python3 bench/tools/added_latency.py --mock http://10.77.0.2:9100 \
      --gateway http://127.0.0.1:9200 --messages "$MESSAGES" \
      >"$BENCH_RESULTS/linked-$store-$mode.json"
    echo "linked $store $mode: $(cat "$BENCH_RESULTS/linked-$store-$mode.json")"
    kill "$gateway"
    wait "$gateway" 2>/dev/null || true
  done
done
