#!/usr/bin/env bash
# Runs every fuzz target for a set time with the stable runner (crates/ctxkeeper-fuzz), one
# after another, and prints the table of bench/RESULTS.md's "Fuzzing" section.
#
#   bench/fuzz.sh                          every target, 600 s each (an hour in all)
#   FUZZ_SECONDS=60 bench/fuzz.sh          a minute each
#   bench/fuzz.sh capsule wire_anthropic   only these targets
#
# Not a `bench/run` stage: it takes an hour at the default time. Environment:
#   FUZZ_SECONDS    seconds per target (default 600)
#   FUZZ_SEED       the mutations' seed (default 1): the same seed and corpus give the same inputs
#   FUZZ_PROFILE    cargo profile of the runner (default dev, the test profile; release for
#                   an optimized build)
#   FUZZ_CORPUS     corpus root, one directory per target (default target/fuzz-corpus, cut
#                   from the shared traces by fuzz/make-corpus.sh when missing; the
#                   hand-written seeds of fuzz/corpus are always read too)
#   BENCH_RESULTS   when set, writes fuzz.json there and the runner's logs to logs/fuzz/
#
# A target that panics stops its run; the input is written to fuzz/artifacts/<target>/ and
# `ctxkeeper-fuzz repro <target> <file>` replays it. The script then goes on with the next
# target and exits 1 after the table. An input running past 20 s is reported the same way
# (timeout-<hash>).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECONDS_EACH=${FUZZ_SECONDS:-600}
SEED=${FUZZ_SEED:-1}
PROFILE=${FUZZ_PROFILE:-dev}
CORPUS=${FUZZ_CORPUS:-target/fuzz-corpus}
source "$ROOT/bench/lib.sh"

cargo build --quiet --profile "$PROFILE" -p ctxkeeper-fuzz --bin ctxkeeper-fuzz
# The seeds cut from the shared traces are built here, never kept in the project.
if [ ! -d "$CORPUS" ]; then
  fuzz/make-corpus.sh "$CORPUS" >&2 || { echo "bench/fuzz.sh: no trace seeds; the hand-written ones only" >&2; CORPUS=fuzz/corpus; }
fi
PROFILE_DIR=$PROFILE
[ "$PROFILE" = dev ] && PROFILE_DIR=debug
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE_DIR/ctxkeeper-fuzz"

if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  mapfile -t TARGETS < <("$BIN" list | awk '{print $1}')
fi
LOGS="$WORK/logs"
if [ -n "${BENCH_RESULTS:-}" ]; then LOGS="$BENCH_RESULTS/logs/fuzz"; fi
mkdir -p "$LOGS"

ROWS=()
JSON=()
FAILED=0
for target in "${TARGETS[@]}"; do
  echo "   fuzz: $target for ${SECONDS_EACH} s" >&2
  status=0
  "$BIN" run "$target" --seconds "$SECONDS_EACH" --seed "$SEED" \
    --corpus "$CORPUS/$target" --corpus "fuzz/corpus/$target" --artifacts fuzz/artifacts --json --table-row \
    >"$LOGS/$target.out" 2>"$LOGS/$target.log" || status=$?
  if [ "$status" -ne 0 ]; then
    FAILED=1
    echo "bench/fuzz.sh: $target failed (exit $status):" >&2
    tail -n 20 "$LOGS/$target.log" >&2
  fi
  JSON+=("$(grep '^{' "$LOGS/$target.out" || echo "{\"target\":\"$target\",\"exit\":$status}")")
  ROWS+=("$(grep '^|' "$LOGS/$target.out" || echo "| \`$target\` | – | – | – | exit $status |")")
done

if [ -n "${BENCH_RESULTS:-}" ]; then
  (IFS=,; echo "[${JSON[*]}]") >"$BENCH_RESULTS/fuzz.json"
fi
echo "Stable runner (\`ctxkeeper-fuzz\`, $PROFILE profile, seed $SEED), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), at $(git rev-parse --short HEAD):"
echo
echo "| target | seconds | execs | execs/s | crashes |"
echo "| --- | ---: | ---: | ---: | ---: |"
printf '%s\n' "${ROWS[@]}"
exit "$FAILED"
