#!/usr/bin/env bash
# The runs behind docs/report-h200.md, on one GPU: a store of benchmarks/report-h200.yaml,
# then `dlbench report --with-references --format md`. Writes into $OUT (default ./out):
# h200.db (the store), h200.jsonl (its export) and report-h200.md.
# SKIP_SYSTEM=1 leaves out `dlbench system` (the measured ceilings, about 40 s).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE/src" DLBENCH_DB="${DLBENCH_DB:-$OUT/h200.db}"
export DLBENCH_TRAIN_VOLUME=${DLBENCH_TRAIN_VOLUME:-/tmp/dlbench-train.h5}
D="python3 -m dlbench"
date -u
nvidia-smi -L 2>/dev/null
[ "${SKIP_SYSTEM:-0}" = 1 ] || timeout 90 $D system
[ -e "$DLBENCH_TRAIN_VOLUME" ] || $D data volume "$DLBENCH_TRAIN_VOLUME" --shape 48x768x768 --workers 16
timeout "${SUITE_SECONDS:-600}" $D suite "$HERE/benchmarks/report-h200.yaml" --tag "${TAG:-lent-h200}"
$D export -o "$OUT/h200.jsonl"
$D report --with-references --format md -o "$OUT/report-h200.md"
date -u
