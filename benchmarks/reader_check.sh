#!/usr/bin/env bash
# On one GPU: the plain `dlbench` on a fresh store, timed from start to prompt; a clean ResNet-50
# training run and one beside a GPU neighbour; then that store read by the doctor, report and results
# of this tree and of an older one, diffed (a change to how records are read must change no line).
#
#   git archive REV src | tar -x -C /tmp/old        # here, then carry it with the call
#   bash benchmarks/reader_check.sh /tmp/old/src    # on the GPU machine; OUT=folder for the outputs
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
old=${1:?give the src folder of the older tree}
out=${OUT:-/tmp/reader-check}
mkdir -p "$out"
export PYTHONPATH=$repo/src
work=$(mktemp -d); cd "$work"
export DLBENCH_DB=$work/dlbench.db  # a fresh store, not the machine's shared one
start=$(date +%s.%N); python3 -m dlbench > "$out/quick.txt" 2>&1; rc=$?
echo "plain dlbench: rc $rc, $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s from start to prompt"
R50="--model resnet50 --batch 64 --precision bf16 --channels-last --steps 100 --min-seconds 3"
python3 -m dlbench run train $R50 --tag clean > "$out/clean.txt" 2>&1; echo "clean: rc $?"
python3 "$repo/benchmarks/neighbour.py" gpu 0 & sleep 8
python3 -m dlbench run train $R50 --tag gpu-neighbour > "$out/neighbour.txt" 2>&1; echo "gpu-neighbour: rc $?"
pkill -f "benchmarks/neighbour.py gpu"; sleep 1
for side in new old; do
  [ "$side" = old ] && export PYTHONPATH=$old
  python3 -m dlbench doctor > "$out/doctor-$side.txt" 2>&1
  python3 -m dlbench doctor --format json clean gpu-neighbour > "$out/doctor-$side.json" 2>&1
  python3 -m dlbench report > "$out/report-$side.txt" 2>&1
  python3 -m dlbench results > "$out/results-$side.txt" 2>&1
done
for name in doctor.txt doctor.json report.txt results.txt; do
  stem=${name%.*}; ext=${name##*.}
  echo "diff $name: $(diff "$out/$stem-old.$ext" "$out/$stem-new.$ext" | wc -l) lines"
done
cp dlbench.db "$out/"
