#!/usr/bin/env bash
# The runs behind a published dlbench report (docs/report-NAME.md), then
# `dlbench report --with-references`. NAME picks the suite benchmarks/report-NAME.yaml:
#
#   OUT=out bash benchmarks/report.sh h200          # one GPU, about 9 minutes
#   OUT=out bash benchmarks/report.sh 2gpu          # two GPUs, about 15 minutes: two calls
#   OUT=out bash benchmarks/report.sh 4gpu          # four GPUs: the x4 rows beside their 1-GPU bases
#   OUT=out bash benchmarks/report.sh full          # the publications' suites in full: hours
#
# The budget suites run every published table at the publications' settings with fewer steps
# (each suite file says which rows are extrapolated, and the report marks them). A call stopped
# by its time limit (SUITE_SECONDS) resumes with RESUME=1 on the same store: only the missing
# benchmarks run. Writes into $OUT (default ./out): NAME.db (the store, unless DLBENCH_DB names
# one), NAME.jsonl (its export), report-NAME.md. SKIP_SYSTEM=1 leaves out `dlbench system`.
# Generated inputs go to /tmp: a training volume, and for suites that read a JPEG folder, images.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
NAME=${1:-h200}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE/src" DLBENCH_DB="${DLBENCH_DB:-$OUT/$NAME.db}"
export DLBENCH_TRAIN_VOLUME=${DLBENCH_TRAIN_VOLUME:-/tmp/dlbench-train.h5}
export DLBENCH_IMAGES=${DLBENCH_IMAGES:-/tmp/dlbench-images}
D="python3 -m dlbench"
SUITES=("$HERE/benchmarks/report-$NAME.yaml")
[ "$NAME" = full ] && SUITES=(cnn-benchmarks jade gpu-benchmarks-3d unet-medical)
RESUME_FLAG=()
[ "${RESUME:-0}" = 1 ] && RESUME_FLAG=(--resume)
date -u
nvidia-smi -L 2>/dev/null
[ "${SKIP_SYSTEM:-0}" = 1 ] || timeout 90 $D system
[ -e "$DLBENCH_TRAIN_VOLUME" ] || $D data volume "$DLBENCH_TRAIN_VOLUME" --shape 48x768x768 --workers 16
if [ "$NAME" = full ] || grep -q DLBENCH_IMAGES "${SUITES[0]}"; then
  [ -e "$DLBENCH_IMAGES" ] || $D data images "$DLBENCH_IMAGES" --n "${IMAGES:-2000}" --workers 16
fi
for suite in "${SUITES[@]}"; do
  timeout "${SUITE_SECONDS:-3600}" $D suite "$suite" "${RESUME_FLAG[@]}" --tag "${TAG:-lent-$NAME}"
done
$D export -o "$OUT/$NAME.jsonl"
$D report --with-references --format md -o "$OUT/report-$NAME.md"
date -u
