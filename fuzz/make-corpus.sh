#!/usr/bin/env bash
# Cuts the fuzz seed corpus out of the shared agent traces (crates/ctxkeeper-fuzz, `corpus`):
# request bodies of every wire format, small trace files of every importer's format, and
# sessions in the capsule targets' encoding, plus a few hand-written seeds.
#
#   fuzz/make-corpus.sh                 writes target/fuzz-corpus/ (what bench/fuzz.sh reads)
#   fuzz/make-corpus.sh DIR             writes elsewhere (then: bench/fuzz.sh with FUZZ_CORPUS=DIR)
#
# The traces stay outside the project: only the hand-written seeds (`hand-*`) are committed,
# in fuzz/corpus/; the seeds cut from the traces are rebuilt wherever they are needed.
#
# Environment:
#   CTXKEEPER_TRACES     the traces (default ../shared/data/traces)
#   FUZZ_CORPUS_BYTES    bytes the trace cuts of one target may take (default 286720); raise
#                        it for a bigger corpus outside the repository
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${1:-target/fuzz-corpus}
TRACES=${CTXKEEPER_TRACES:-$(cd .. && pwd)/shared/data/traces}
BYTES=${FUZZ_CORPUS_BYTES:-286720}

if [ ! -d "$TRACES" ]; then
  echo "fuzz/make-corpus.sh: no traces at $TRACES (set CTXKEEPER_TRACES)" >&2
  exit 1
fi
cargo build --quiet -p ctxkeeper-fuzz --bin ctxkeeper-fuzz
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/ctxkeeper-fuzz"
# Each target's seeds are rebuilt whole, so a seed the builder no longer writes goes away.
for target in $("$BIN" list | awk '{print $1}'); do
  rm -rf "${OUT:?}/$target"
done
rm -rf "${OUT:?}/licenses"
"$BIN" corpus --traces "$TRACES" --out "$OUT" --max-bytes "$BYTES"
du -sh "$OUT"
