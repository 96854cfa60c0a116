#!/usr/bin/env bash
# The runs behind a published dlbench report (docs/report-NAME.md), then
# `dlbench report --with-references`. NAME picks the suite benchmarks/report-NAME.yaml:
#
#   OUT=out bash benchmarks/report.sh h200          # one GPU, about 9 minutes
#   OUT=out bash benchmarks/report.sh 2gpu          # two GPUs, about 15 minutes: two calls
#   OUT=out bash benchmarks/report.sh 4gpu          # four GPUs: the x4 rows beside their 1-GPU bases
#   OUT=out bash benchmarks/report.sh full          # the publications' suites in full: hours
#   OUT=out SUITE_SECONDS=400 bash benchmarks/report.sh 2gpu-more   # docs/report-2gpu.md's missing rows
#   OUT=out SUITE_FILE=benchmarks/report-2gpu-b4.yaml DLBENCH_TRAIN_VOLUME=/dev/null \
#       bash benchmarks/report.sh 2gpu-more                          # one row more, no volume made
#
# NAME-more imports the published store docs/data/report-NAME.jsonl into $OUT/NAME.db (unless that
# store exists: a resumed call), runs benchmarks/report-NAME-more.yaml on top of it with NAME's tag
# and writes NAME.jsonl and report-NAME.md from the whole store; it leaves out `dlbench system`
# (the store has the ceilings) unless SKIP_SYSTEM=0.
# The budget suites run every published table at the publications' settings with fewer steps
# (each suite file says which rows are extrapolated, and the report marks them). A call stopped
# by its time limit (SUITE_SECONDS) resumes with RESUME=1 on the same store: only the missing
# benchmarks run. Writes into $OUT (default ./out): NAME.db (the store, unless DLBENCH_DB names
# one), NAME.jsonl (its export), report-NAME.md. SKIP_SYSTEM=1 leaves out `dlbench system`.
# A published page (docs/report-NAME.md and .html) keeps its store as docs/data/report-NAME.jsonl and is
# regenerated from it by `bash benchmarks/pages.sh NAME`.
# Generated inputs go to /tmp: a training volume, and for suites that read a JPEG folder, images.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
NAME=${1:-h200}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BASE=$NAME  # the store and the pages: NAME-more adds to NAME's
case "$NAME" in *-more) BASE=${NAME%-more}; SKIP_SYSTEM=${SKIP_SYSTEM:-1} ;; esac
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE/src" DLBENCH_DB="${DLBENCH_DB:-$OUT/$BASE.db}"
export DLBENCH_TRAIN_VOLUME=${DLBENCH_TRAIN_VOLUME:-/tmp/dlbench-train.h5}
export DLBENCH_IMAGES=${DLBENCH_IMAGES:-/tmp/dlbench-images}
D="python3 -m dlbench"
SUITES=("${SUITE_FILE:-$HERE/benchmarks/report-$NAME.yaml}")  # SUITE_FILE: another suite for NAME's store
[ "$NAME" = full ] && SUITES=(cnn-benchmarks jade gpu-benchmarks-3d unet-medical)
RESUME_FLAG=()
[ "${RESUME:-0}" = 1 ] && RESUME_FLAG=(--resume)
date -u
nvidia-smi -L 2>/dev/null
if [ "$BASE" != "$NAME" ] && [ ! -e "$DLBENCH_DB" ]; then
  $D import "$HERE/docs/data/report-$BASE.jsonl" || exit 2
fi
[ "${SKIP_SYSTEM:-0}" = 1 ] || timeout 90 $D system
[ -e "$DLBENCH_TRAIN_VOLUME" ] || $D data volume "$DLBENCH_TRAIN_VOLUME" --shape 48x768x768 --workers 16
if [ "$NAME" = full ] || grep -q DLBENCH_IMAGES "${SUITES[0]}"; then
  [ -e "$DLBENCH_IMAGES" ] || $D data images "$DLBENCH_IMAGES" --n "${IMAGES:-2000}" --workers 16
fi
for suite in "${SUITES[@]}"; do
  timeout "${SUITE_SECONDS:-3600}" $D suite "$suite" "${RESUME_FLAG[@]}" --tag "${TAG:-lent-$BASE}"
done
$D export -o "$OUT/$BASE.jsonl"
$D report --with-references --format md -o "$OUT/report-$BASE.md"
date -u
