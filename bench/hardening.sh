#!/usr/bin/env bash
# The gateway under abuse: memory before and after heavy load and event-subscription churn,
# and the cost of parsing a large resent history.
#
# Run by `bench/run hardening` (or by hand). Environment:
#   BENCH_RESULTS   results directory; writes hardening.json there, raw outputs in logs/hardening/
#   BENCH_QUICK     1 for shorter runs (10 s of load, 5,000 subscriptions)
#   HARDENING_IDLE_ONLY  1 to stop after the idle phase: prints the RSS before the load,
#                   after it and after the idle time against the bar, writes no results
#   CTXKEEPER_BIN   the release `ctxkeeper` binary; its target directory receives the mock
#                   upstream and the load generator (built here if missing or stale)
#
# Method (one `ctxkeeper serve` in front of the zero-delay mock upstream, SQLite store):
#   - RSS before: after start-up and 200 warm-up requests of 8 growing conversations;
#   - load: 64 connections for 30 s, growing conversations (each request adds an exchange; a
#     conversation restarts under a new session id after 50), closed loop;
#   - idle: nothing for 60 s after the load; `serve` runs with `--session-idle 20`, so every
#     warm session (and the resent history kept for it) idles out and is swept meanwhile;
#     RSS then, against the RSS before the load;
#   - churn: 25,000 distinct session ids' event streams (`/v1/sessions/{id}/events`) opened and
#     closed, 64 at a time;
#   - RSS after each, and the gateway's own gauges (warm sessions, event channels) after both;
#   - large histories: 10 requests of a conversation padded to 1, 4 and 16 MB, straight to the
#     mock and through the gateway (the same session each time, so it is recognised as seen);
#     the difference of the medians per MB is what parsing, fingerprinting and re-emitting a
#     resent history costs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
: "${BENCH_RESULTS:?BENCH_RESULTS must name the results directory}"
: "${CTXKEEPER_BIN:?CTXKEEPER_BIN must name the release ctxkeeper binary}"
QUICK=${BENCH_QUICK:-0}
BIN_DIR=$(cd "$(dirname "$CTXKEEPER_BIN")" && pwd)
MOCK_BIN="$BIN_DIR/ctxkeeper-mock-upstream"
LOAD_BIN="$BIN_DIR/ctxkeeper-bench-load"
CARGO_TARGET_DIR=$(dirname "$BIN_DIR") cargo build --release --quiet \
  -p ctxkeeper-mock-upstream --bin ctxkeeper-mock-upstream \
  -p ctxkeeper-bench --bin ctxkeeper-bench-load

if [ "$QUICK" = 1 ]; then LOAD_SECONDS=10; CHURN=5000; else LOAD_SECONDS=30; CHURN=25000; fi
# Sessions idle out after this; the RSS is read again IDLE_WAIT seconds after the load.
SESSION_IDLE=20
IDLE_WAIT=60
# The bounded caches that stay filled once every session idled out (SECURITY.md, "What stays
# resident"): two generations of 65,536 message fingerprints (about 9 MB) and the SQLite
# store's 4 connections' page caches (2 MB each). The bar: RSS 1.5× before the load, plus these.
RESIDENT_CACHES_KB=$(( (9 + 8) * 1024 ))

LOGS="$BENCH_RESULTS/logs/hardening"
mkdir -p "$LOGS"
rm -f "$LOGS"/*.json "$LOGS"/*.log
source "$ROOT/bench/lib.sh"

start_listening() {
  local name=$1
  shift
  "$@" >"$LOGS/$name.stdout" 2>"$LOGS/$name.log" &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
  local i
  for i in $(seq 1 300); do
    STARTED_ADDR=$(sed -n 's|^listening on http://||p' "$LOGS/$name.stdout" | head -n1)
    [ -n "$STARTED_ADDR" ] && return 0
    if ! kill -0 "$STARTED_PID" 2>/dev/null; then
      echo "bench/hardening.sh: $name exited before listening:" >&2
      tail -n 20 "$LOGS/$name.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "bench/hardening.sh: $name did not print its address within 30 s" >&2
  exit 1
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
load() {
  local out=$1
  shift
  if ! "$LOAD_BIN" "$@" >"$LOGS/$out.json" 2>"$LOGS/$out.log"; then
    echo "bench/hardening.sh: ctxkeeper-bench-load $* failed:" >&2
    cat "$LOGS/$out.log" >&2
    exit 1
  fi
}
gauge() { curl -sf "$GATEWAY/metrics" | awk -v name="$1" '$1 == name {print $2}'; }

echo "   hardening: starting the mock upstream and ctxkeeper serve" >&2
start_listening mock "$MOCK_BIN" --listen 127.0.0.1:0 --window 10000000 --no-record
MOCK="http://$STARTED_ADDR"
start_listening serve "$CTXKEEPER_BIN" serve --listen 127.0.0.1:0 --upstream "$MOCK/v1" \
  --store "sqlite://$WORK/sessions.db" --workspace "$WORK/workspace" --no-mcp \
  --session-idle "$SESSION_IDLE"
SERVE_PID=$STARTED_PID
GATEWAY="http://$STARTED_ADDR"

load warmup --url "$GATEWAY/v1" --connections 8 --requests 200 --sessions 8 --grow \
  --session-prefix warm
sleep 1
RSS_BEFORE=$(rss_kb "$SERVE_PID")

echo "   hardening: 64 connections for $LOAD_SECONDS s" >&2
load load --url "$GATEWAY/v1" --connections 64 --duration "$LOAD_SECONDS" --sessions 64 \
  --grow --exchanges-per-conversation 50 --session-prefix stress
sleep 1
RSS_AFTER_LOAD=$(rss_kb "$SERVE_PID")
WARM_AFTER_LOAD=$(gauge ctxkeeper_warm_sessions)

echo "   hardening: idle for $IDLE_WAIT s (sessions idle out after $SESSION_IDLE s)" >&2
sleep $((IDLE_WAIT - 1))
RSS_AFTER_IDLE=$(rss_kb "$SERVE_PID")
WARM_AFTER_IDLE=$(gauge ctxkeeper_warm_sessions)
if [ "${HARDENING_IDLE_ONLY:-0}" = 1 ]; then
  awk -v b="$RSS_BEFORE" -v l="$RSS_AFTER_LOAD" -v i="$RSS_AFTER_IDLE" -v c="$RESIDENT_CACHES_KB" \
    -v w="$WARM_AFTER_IDLE" 'BEGIN { printf "before %.1f MB, after the load %.1f MB, after the idle time %.1f MB (%.2fx, %d warm); bar %.1f MB\n", b/1024, l/1024, i/1024, i/b, w, (1.5*b+c)/1024 }'
  exit 0
fi

echo "   hardening: $CHURN event subscriptions opened and closed" >&2
load churn --url "$GATEWAY/v1" --sse-churn "$CHURN" --connections 64
sleep 2
RSS_AFTER_CHURN=$(rss_kb "$SERVE_PID")
CHANNELS=$(gauge ctxkeeper_event_channels)
SUBSCRIPTIONS=$(gauge ctxkeeper_event_subscriptions)
WARM=$(gauge ctxkeeper_warm_sessions)

echo "   hardening: large resent histories" >&2
for mb in 1 4 16; do
  bytes=$((mb * 1000 * 1000))
  load "direct-$mb" --url "$MOCK/v1" --connections 1 --requests 10 --sessions 1 --pad-bytes "$bytes"
  load "proxied-$mb" --url "$GATEWAY/v1" --connections 1 --requests 10 --sessions 1 \
    --pad-bytes "$bytes" --session-prefix "large-$mb"
done
RSS_AFTER_LARGE=$(rss_kb "$SERVE_PID")

python3 - "$LOGS" "$BENCH_RESULTS/hardening.json" <<EOF
import json, sys, pathlib
logs, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
read = lambda name: json.loads((logs / f"{name}.json").read_text())
before, after_load, after_churn, after_large = $RSS_BEFORE, $RSS_AFTER_LOAD, $RSS_AFTER_CHURN, $RSS_AFTER_LARGE
after_idle = $RSS_AFTER_IDLE
warm_load, warm_idle = int(float('$WARM_AFTER_LOAD' or 0)), int(float('$WARM_AFTER_IDLE' or 0))
idle_ratio = after_idle / before
idle_bar = 1.5 * before + $RESIDENT_CACHES_KB
load, churn = read("load"), read("churn")
mb = lambda kb: f"{kb / 1024:.1f} MB"
# The churn is measured against the memory just before it (after the load and the idle
# time): opening and closing subscriptions must not grow it.
ratio = after_churn / after_idle
rows = [
    ["after start-up and warm-up", mb(before), "–"],
    [f"after {load['wall_s']:.0f} s of 64 connections ({load['ok']:,} requests, {load['errors']} errors, {load['achieved_rate']:.0f} req/s)", mb(after_load), f"{after_load / before:.2f}×"],
    [f"$IDLE_WAIT s after the load, its sessions idle past --session-idle $SESSION_IDLE s ({warm_load} warm after the load, {warm_idle} now)", mb(after_idle), f"{idle_ratio:.2f}×"],
    [f"after {churn['ok']:,} event subscriptions opened and closed ({churn['errors']} errors)", mb(after_churn), f"{after_churn / before:.2f}× ({ratio:.2f}× of before the churn)"],
    ["after the large-history runs below", mb(after_large), f"{after_large / before:.2f}×"],
]
large = []
for size in (1, 4, 16):
    direct, proxied = read(f"direct-{size}"), read(f"proxied-{size}")
    extra = proxied["p50_ms"] - direct["p50_ms"]
    large.append([f"{size} MB", f"{direct['p50_ms']:.1f} ms", f"{proxied['p50_ms']:.1f} ms",
                  f"{extra:.1f} ms", f"{extra / size:.1f} ms/MB"])
result = {
    "tables": [
        {"caption": "Resident memory of \`ctxkeeper serve\` (SQLite store) under load and event-subscription churn:",
         "columns": ["moment", "RSS", "vs. before"], "rows": rows},
        {"caption": "A large resent history, 10 requests of one conversation each, p50 straight to the mock and through the gateway:",
         "columns": ["body", "direct", "through ctxkeeper", "added", "added per MB"], "rows": large},
    ],
    "targets": [
        {"name": "RSS $IDLE_WAIT s after a 64-connection load, once its sessions idled out, within 1.5× of the RSS before it plus the bounded caches still filled (17 MB: fingerprints, SQLite page caches)",
         "target": f"≤ {mb(idle_bar)}", "measured": f"{mb(after_idle)} ({idle_ratio:.2f}× before)", "met": after_idle <= idle_bar},
        {"name": "RSS after 25,000 event subscriptions within 1.5× of the RSS before them", "target": "≤ 1.5×",
         "measured": f"{ratio:.2f}×", "met": ratio <= 1.5},
    ],
    "notes": [
        f"after the churn the gateway held {int(float('$CHANNELS' or 0))} event channels and {int(float('$SUBSCRIPTIONS' or 0))} subscriptions; {int(float('$WARM' or 0))} sessions warm",
        "reproduce: BENCH_RESULTS=bench/results CTXKEEPER_BIN=target/release/ctxkeeper bash bench/hardening.sh",
    ],
}
out.write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result["targets"]))
EOF
