# Shared by the bench scripts: a scratch directory ($WORK) and the background processes a
# script starts (append their pids to PIDS), all stopped and removed when the script exits.
# A script with more to undo defines `bench_undo` before it exits; it runs after the
# processes are stopped.
#
#   source "$ROOT/bench/lib.sh"
#   some-server & PIDS+=($!)
WORK=$(mktemp -d)
PIDS=()
bench_cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if declare -F bench_undo >/dev/null; then bench_undo; fi
  rm -rf "$WORK"
}
trap bench_cleanup EXIT
