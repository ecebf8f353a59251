#!/usr/bin/env bash
# Session state: overhead vs conversation size, and growing-conversation throughput.
#
#   BENCH_RESULTS=bench/results BENCH_BIN_DIR=target/release bench/overhead.sh
#
# 1. ctxkeeper-bench-overhead grows one conversation to 1,000 messages (~800k tokens) through
#    an in-process gateway and a zero-delay mock (1M-window model), on SQLite and, when
#    CTXKEEPER_BENCH_POSTGRES_URL is set, PostgreSQL: the gateway's added latency and the bytes
#    its store is handed per step, at 50 ... 1,000 messages; once as the default policy runs
#    and once with --fixed-trigger (nothing compacts: the worst case).
# 2. The growing-conversation load of bench/gateway.sh: 32 connections, 64 sessions
#    restarting after 50 exchanges, against the mock alone and through the gateway (SQLite),
#    on the same bodies, both served in one process by ctxkeeper-bench-overhead.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
: "${BENCH_RESULTS:?BENCH_RESULTS must name the results directory}"
: "${BENCH_BIN_DIR:?BENCH_BIN_DIR must name the release binaries directory (target/release)}"
BIN_DIR=$(cd "$BENCH_BIN_DIR" && pwd)
OVERHEAD_BIN="$BIN_DIR/ctxkeeper-bench-overhead"
LOAD_BIN="$BIN_DIR/ctxkeeper-bench-load"
SECONDS_PER_RUN=${BENCH_GROW_SECONDS:-8}
mkdir -p "$BENCH_RESULTS"
source "$ROOT/bench/lib.sh"

# Each store twice: as the default policy runs (its cost rule may compact), and with only the
# fixed trigger (nothing compacts on the 1M window: every step carries the whole history).
for mode in default fixed; do
  flag=()
  suffix=""
  if [ "$mode" = fixed ]; then flag=(--fixed-trigger); suffix="-fixed"; fi
  echo "   overhead: sqlite ($mode trigger)" >&2
  rm -f "$WORK"/overhead.db*
  "$OVERHEAD_BIN" --store "sqlite://$WORK/overhead.db" "${flag[@]}" \
    >"$BENCH_RESULTS/overhead-sqlite$suffix.json"
  if [ -n "${CTXKEEPER_BENCH_POSTGRES_URL:-}" ]; then
    echo "   overhead: postgres ($mode trigger)" >&2
    "$OVERHEAD_BIN" --store "$CTXKEEPER_BENCH_POSTGRES_URL" "${flag[@]}" \
      >"$BENCH_RESULTS/overhead-postgres$suffix.json"
  fi
done

# The mock and a gateway (SQLite store) in one process, so neither has a core of its own:
# the same conditions for the mock alone and for the gateway in front of it.
"$OVERHEAD_BIN" --store "sqlite://$WORK/grow.db" --model gpt-4o-mini \
  --serve-for $((2 * SECONDS_PER_RUN + 30)) >"$WORK/serve.stdout" 2>"$WORK/serve.log" &
PIDS+=("$!")
for i in $(seq 1 300); do
  grep -q '^gateway ' "$WORK/serve.stdout" 2>/dev/null && break
  sleep 0.1
done
MOCK=$(sed -n 's/^mock //p' "$WORK/serve.stdout")
GATEWAY=$(sed -n 's/^gateway //p' "$WORK/serve.stdout")
[ -n "$GATEWAY" ] || { echo "bench/overhead.sh: the servers did not start" >&2; cat "$WORK/serve.log" >&2; exit 1; }
echo "   grow throughput: mock alone, then through ctxkeeper" >&2
"$LOAD_BIN" --url "$MOCK/v1" --connections 32 --duration "$SECONDS_PER_RUN" --warmup 1 \
  --grow --sessions 64 --exchanges-per-conversation 50 --session-prefix grow-max \
  >"$BENCH_RESULTS/overhead-grow-direct.json"
"$LOAD_BIN" --url "$GATEWAY/v1" --connections 32 --duration "$SECONDS_PER_RUN" --warmup 1 \
  --grow --sessions 64 --exchanges-per-conversation 50 --session-prefix grow-max \
  >"$BENCH_RESULTS/overhead-grow-ctxkeeper.json"
python3 - "$BENCH_RESULTS" >&2 <<'PY'
import json, sys
direct, gateway = (json.load(open(f"{sys.argv[1]}/overhead-grow-{name}.json")) for name in ("direct", "ctxkeeper"))
share = 100 * gateway["achieved_rate"] / direct["achieved_rate"]
print(f"   grow throughput: {gateway['achieved_rate']:.0f} / {direct['achieved_rate']:.0f} req/s = {share:.1f} % of the mock alone")
if direct.get("machine_cpu_us_per_request") and gateway.get("machine_cpu_us_per_request"):
    print(f"   machine CPU per request: {direct['machine_cpu_us_per_request']:.0f} us mock alone, "
          f"{gateway['machine_cpu_us_per_request']:.0f} us through ctxkeeper "
          f"({direct['machine_busy_cores']:.2f} and {gateway['machine_busy_cores']:.2f} cores busy)")
PY
echo "   load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
