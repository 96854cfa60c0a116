#!/usr/bin/env bash
# The runs behind docs/report-h200.md on one GPU, then `dlbench report --with-references`.
#
#   OUT=out bash benchmarks/report_h200.sh            # budget: benchmarks/report-h200.yaml, ~9 min
#   OUT=out bash benchmarks/report_h200.sh --full     # the publications' suites in full: hours
#
# Budget runs every published table at the publications' settings with fewer steps (the suite
# file lists them); its 3D fp32 training is extrapolated and marked so. --full runs the suites
# cnn-benchmarks, jade, gpu-benchmarks-3d and unet-medical (seed-003 convergence alone can take
# an hour). A call stopped by a time limit resumes with RESUME=1: only the missing benchmarks run.
# Writes into $OUT (default ./out): h200.db (the store), h200.jsonl (its export), report-h200.md.
# SKIP_SYSTEM=1 leaves out `dlbench system` (the measured ceilings, about 40 s).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE/src" DLBENCH_DB="${DLBENCH_DB:-$OUT/h200.db}"
export DLBENCH_TRAIN_VOLUME=${DLBENCH_TRAIN_VOLUME:-/tmp/dlbench-train.h5}
D="python3 -m dlbench"
SUITES=("$HERE/benchmarks/report-h200.yaml")
[ "${1:-}" = --full ] && SUITES=(cnn-benchmarks jade gpu-benchmarks-3d unet-medical)
RESUME_FLAG=()
[ "${RESUME:-0}" = 1 ] && RESUME_FLAG=(--resume)
date -u
nvidia-smi -L 2>/dev/null
[ "${SKIP_SYSTEM:-0}" = 1 ] || [ "${RESUME:-0}" = 1 ] || timeout 90 $D system
[ -e "$DLBENCH_TRAIN_VOLUME" ] || $D data volume "$DLBENCH_TRAIN_VOLUME" --shape 48x768x768 --workers 16
for suite in "${SUITES[@]}"; do
  timeout "${SUITE_SECONDS:-3600}" $D suite "$suite" "${RESUME_FLAG[@]}" --tag "${TAG:-lent-h200}"
done
$D export -o "$OUT/h200.jsonl"
$D report --with-references --format md -o "$OUT/report-h200.md"
date -u
