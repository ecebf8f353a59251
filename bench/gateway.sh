#!/usr/bin/env bash
# The gateway overhead benchmark: `ctxkeeper serve` (and LiteLLM's proxy, when installed) in
# front of the zero-delay mock upstream, under load from a separate process.
#
# Run by `bench/run gateway` (contract: bench/README.md, "The gateway hook"). Environment:
#   BENCH_RESULTS   results directory; writes gateway.json there, raw outputs in logs/gateway/
#   BENCH_QUICK     1 for shorter runs
#   CTXKEEPER_BIN   the release `ctxkeeper` binary; its target directory receives the mock
#                   upstream and the load generator (built here if missing or stale)
#   LITELLM_BIN     optional: the `litellm` executable; LITELLM_PYTHON its python (version)
#
# Method:
#   - latency: `ctxkeeper-bench-load` sends a 20-message (~4 KB) chat request at a fixed rate
#     (open loop) with one of 300 `x-ctxkeeper-session` ids, directly to the mock and through
#     each proxy, at 25, 50 and 500 req/s, in ROUNDS interleaved rounds (direct, then proxied,
#     back to back). Overhead = proxied percentile - direct percentile of the same round; the
#     median over rounds is reported. The gateway's own view (its overhead histogram, total
#     minus upstream time, read from /metrics around each run) is reported beside it.
#   - two workloads through ctxkeeper: "repeat" resends the same history (nothing new to
#     store: the gateway recognises it and forwards), "grow" adds two messages per request (an
#     agent's turn: the gateway commits them to the session log with the state before
#     forwarding; concurrent sessions share SQLite commits through its group commit).
#   - throughput: closed loop, 32 connections, direct and through the gateway (both workloads;
#     grow conversations restart after 50 exchanges, so direct and proxied runs send the same
#     bodies whatever their speed).
#   - memory: VmRSS of `serve` after start; VmRSS and peak (VmHWM) after one request for each
#     of 1,000 sessions.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
: "${BENCH_RESULTS:?BENCH_RESULTS must name the results directory}"
: "${CTXKEEPER_BIN:?CTXKEEPER_BIN must name the release ctxkeeper binary}"
QUICK=${BENCH_QUICK:-0}
LITELLM_BIN=${LITELLM_BIN:-}

if [ ! -x "$CTXKEEPER_BIN" ]; then
  echo "bench/gateway.sh: CTXKEEPER_BIN=$CTXKEEPER_BIN is not an executable" >&2
  exit 1
fi
BIN_DIR=$(cd "$(dirname "$CTXKEEPER_BIN")" && pwd)
MOCK_BIN="$BIN_DIR/ctxkeeper-mock-upstream"
LOAD_BIN="$BIN_DIR/ctxkeeper-bench-load"
# The binaries sit in TARGET/release/: build the two helpers into the same target directory.
CARGO_TARGET_DIR=$(dirname "$BIN_DIR") cargo build --release --quiet \
  -p ctxkeeper-mock-upstream --bin ctxkeeper-mock-upstream \
  -p ctxkeeper-bench --bin ctxkeeper-bench-load

if [ "$QUICK" = 1 ]; then
  declare -A SECONDS_AT=([25]=6 [50]=5 [500]=4)
  MAX_SECONDS=5
  ROUNDS=1
else
  declare -A SECONDS_AT=([25]=10 [50]=8 [500]=6)
  MAX_SECONDS=8
  ROUNDS=3
fi
RATES=(25 50 500)
GROW_EXCHANGES=50
LITELLM_RATES=(25 50)
WARMUP=1

LOGS="$BENCH_RESULTS/logs/gateway"
mkdir -p "$LOGS"
rm -f "$LOGS"/*.json "$LOGS"/*.log
source "$ROOT/bench/lib.sh"

NOTES="$LOGS/notes.txt"
: >"$NOTES"
note() { printf '%s\n' "$*" >>"$NOTES"; }

# Starts a server that prints `listening on http://ADDR`; sets STARTED_PID and STARTED_ADDR.
start_listening() {
  local name=$1
  shift
  "$@" >"$LOGS/$name.stdout" 2>"$LOGS/$name.log" &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
  local i
  for i in $(seq 1 300); do
    STARTED_ADDR=$(sed -n 's|^listening on http://||p' "$LOGS/$name.stdout" | head -n1)
    if [ -n "$STARTED_ADDR" ]; then
      return 0
    fi
    if ! kill -0 "$STARTED_PID" 2>/dev/null; then
      echo "bench/gateway.sh: $name exited before listening; its log:" >&2
      tail -n 20 "$LOGS/$name.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "bench/gateway.sh: $name did not print its address within 30 s" >&2
  exit 1
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

load() {
  local out=$1
  shift
  if ! "$LOAD_BIN" "$@" >"$LOGS/$out.json" 2>"$LOGS/$out.log"; then
    echo "bench/gateway.sh: ctxkeeper-bench-load $* failed:" >&2
    cat "$LOGS/$out.log" >&2
    exit 1
  fi
}

note "load average at start (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

echo "   gateway: starting the mock upstream and ctxkeeper serve" >&2
start_listening mock "$MOCK_BIN" --listen 127.0.0.1:0 --window 128000 --no-record
MOCK="http://$STARTED_ADDR"
start_listening serve "$CTXKEEPER_BIN" serve --listen 127.0.0.1:0 --upstream "$MOCK/v1" \
  --store "sqlite://$WORK/sessions.db" --workspace "$WORK/workspace"
SERVE_PID=$STARTED_PID
GATEWAY="http://$STARTED_ADDR"

# LiteLLM starts in the background (it takes a while); it is checked before its first run.
LITELLM=""
LITELLM_PID=""
if [ -n "$LITELLM_BIN" ] && [ -x "$LITELLM_BIN" ]; then
  LITELLM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$WORK/litellm.yaml" <<EOF
model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: $MOCK/v1
      api_key: sk-bench
litellm_settings:
  telemetry: false
EOF
  # LiteLLM refuses to start without a master key; clients then present it as their API key.
  LITELLM_KEY="sk-$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
  # The bundled model cost map, not a download; logging kept to errors.
  LITELLM_MASTER_KEY="$LITELLM_KEY" LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR \
    "$LITELLM_BIN" --config "$WORK/litellm.yaml" --host 127.0.0.1 --port "$LITELLM_PORT" \
    >"$LOGS/litellm.log" 2>&1 &
  LITELLM_PID=$!
  PIDS+=("$LITELLM_PID")
  LITELLM_STARTED=$(date +%s)
else
  note "LiteLLM not measured: LITELLM_BIN is unset or not executable (bench/run setup installs it)"
fi

sleep 2
IDLE_RSS=$(rss_kb "$SERVE_PID")

echo "   gateway: 1,000 sessions" >&2
load sessions-1000 --url "$GATEWAY/v1" --connections 16 --requests 1000 --sessions 1000 \
  --session-prefix hold
SESSIONS_RSS=$(rss_kb "$SERVE_PID")
SESSIONS_HWM=$(hwm_kb "$SERVE_PID")
# The rate runs measure steady state: their 300 sessions exist before timing starts (a new
# session's first request is the 1,000-session run above).
load sessions-prewarm --url "$GATEWAY/v1" --connections 16 --requests 300 --sessions 300

litellm_ready() {
  [ -n "$LITELLM_PID" ] || return 1
  if [ -n "$LITELLM" ]; then return 0; fi
  while true; do
    if ! kill -0 "$LITELLM_PID" 2>/dev/null; then
      note "LiteLLM not measured: the proxy exited during start-up (log: results/logs/gateway/litellm.log): $(tail -n 1 "$LOGS/litellm.log" | cut -c1-200)"
      LITELLM_PID=""
      return 1
    fi
    if curl -sf -o /dev/null "http://127.0.0.1:$LITELLM_PORT/health/liveliness"; then
      LITELLM="http://127.0.0.1:$LITELLM_PORT"
      note "LiteLLM $("${LITELLM_PYTHON:-python3}" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null || true) proxy ready $(($(date +%s) - LITELLM_STARTED)) s after launch"
      return 0
    fi
    if [ $(($(date +%s) - LITELLM_STARTED)) -ge 60 ]; then
      note "LiteLLM not measured: the proxy did not answer /health/liveliness within 60 s"
      kill "$LITELLM_PID" 2>/dev/null || true
      LITELLM_PID=""
      return 1
    fi
    sleep 1
  done
}

scrape() { curl -sf "$GATEWAY/metrics" >"$LOGS/$1.metrics"; }

for round in $(seq 1 "$ROUNDS"); do
  for rate in "${RATES[@]}"; do
    secs=${SECONDS_AT[$rate]}
    echo "   gateway: round $round/$ROUNDS, $rate req/s for $secs s (direct, ctxkeeper repeat and grow$([[ " ${LITELLM_RATES[*]} " == *" $rate "* ]] && [ "$round" = 1 ] && echo ", litellm"))" >&2
    load "direct-$rate-r$round" --url "$MOCK/v1" --rate "$rate" --duration "$secs" --warmup "$WARMUP"
    scrape "repeat-$rate-r$round.before"
    load "repeat-$rate-r$round" --url "$GATEWAY/v1" --rate "$rate" --duration "$secs" --warmup "$WARMUP"
    scrape "repeat-$rate-r$round.after"
    # A fresh prefix: the growing conversations start at their first exchange.
    scrape "grow-$rate-r$round.before"
    # As many conversations as requests per second: the 1 s warm-up opens each of them, and
    # every recorded request extends one by an exchange.
    load "grow-$rate-r$round" --url "$GATEWAY/v1" --rate "$rate" --duration "$secs" --warmup "$WARMUP" \
      --grow --sessions "$rate" --session-prefix "grow-$rate-$round"
    scrape "grow-$rate-r$round.after"
    # LiteLLM saturates near 60 req/s per worker: one round at its rates is all it gets.
    if [ "$round" = 1 ] && [[ " ${LITELLM_RATES[*]} " == *" $rate "* ]] && litellm_ready; then
      if ! "$LOAD_BIN" --url "$LITELLM/v1" --api-key "$LITELLM_KEY" --rate "$rate" --duration "$secs" --warmup "$WARMUP" \
        >"$LOGS/litellm-$rate.json" 2>"$LOGS/litellm-$rate.err"; then
        note "LiteLLM at $rate req/s failed: $(tail -n 1 "$LOGS/litellm-$rate.err" | cut -c1-200)"
        rm -f "$LOGS/litellm-$rate.json"
      fi
      # Its direct baseline, taken right after it.
      load "direct-$rate-litellm" --url "$MOCK/v1" --rate "$rate" --duration "$secs" --warmup "$WARMUP"
    fi
  done
done

# LiteLLM's CPU would be taken from the throughput runs: stop it first.
if [ -n "$LITELLM_PID" ]; then
  kill "$LITELLM_PID" 2>/dev/null || true
fi

echo "   gateway: max throughput, 32 connections, $MAX_SECONDS s each" >&2
load max-direct --url "$MOCK/v1" --connections 32 --duration "$MAX_SECONDS" --warmup "$WARMUP"
load max-repeat --url "$GATEWAY/v1" --connections 32 --duration "$MAX_SECONDS" --warmup "$WARMUP"
# Growing conversations restart after GROW_EXCHANGES exchanges, so request sizes (20 to 120
# messages) do not depend on how fast the server is; the mock alone gets the same sequence.
load max-direct-grow --url "$MOCK/v1" --connections 32 --duration "$MAX_SECONDS" --warmup "$WARMUP" \
  --grow --sessions 64 --exchanges-per-conversation "$GROW_EXCHANGES" --session-prefix grow-max
load max-grow --url "$GATEWAY/v1" --connections 32 --duration "$MAX_SECONDS" --warmup "$WARMUP" \
  --grow --sessions 64 --exchanges-per-conversation "$GROW_EXCHANGES" --session-prefix grow-max
FINAL_RSS=$(rss_kb "$SERVE_PID")
FINAL_HWM=$(hwm_kb "$SERVE_PID")
note "load average at end (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg)"

python3 "$ROOT/bench/tools/gateway_report.py" "$LOGS" "$BENCH_RESULTS/gateway.json" \
  --rss "$IDLE_RSS" "$SESSIONS_RSS" "$SESSIONS_HWM" "$FINAL_RSS" "$FINAL_HWM" \
  --quick "$QUICK" --rounds "$ROUNDS" --rates "${RATES[*]}" --litellm-rates "${LITELLM_RATES[*]}"
echo "   gateway: wrote $BENCH_RESULTS/gateway.json" >&2
