#!/usr/bin/env bash
# The plain volume command a user types, on 1 and 2 GPUs: a first run on a fresh store (it tunes),
# then second runs (the tuning reused) of two versions of dlbench side by side, alternating: OLD (a
# src folder, e.g. from `git archive`) and this checkout's. Prints the seconds from Enter to prompt,
# the measured window and the run's own "from start to result"; every output is compared with the
# first 1-GPU one.
#
#   OLD=/tmp/old/src bash benchmarks/second_run_ab.sh [WORKDIR]      # ROUNDS=2, SHAPE=200x3072x3072
#   SHAPE=200x6144x6144 ROUNDS=1 bash benchmarks/second_run_ab.sh     # no OLD: this checkout only
#   GPUS=1 ...                                                          # one GPU only (default: 1 and 2)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/dlbench-ab}
shape=${SHAPE:-200x3072x3072}
rounds=${ROUNDS:-2}
mkdir -p "$work"
input=$work/vol-$shape.h5
[ -e "$input" ] || PYTHONPATH="$here/src" python3 -m dlbench data volume "$input" --shape "$shape" --format hdf5 \
  --workers 16 > /dev/null 2>&1
. "$here/benchmarks/timing.sh"
volume() {  # label, src folder, GPUs
  local t0 line out=$work/pred-$3.zarr
  t0=$(date +%s.%N)
  line=$(PYTHONPATH=$2 python3 -m dlbench run volume --model unet3d --input "$input" --output "$out" --overwrite \
    --gpus "$3" --db "$work/ab-$shape-$3.db" 2>&1 | grep -m1 '^ok ' || echo "failed")
  printf '%-6s %s, %d GPU(s): %5s s from Enter to prompt | %s | %s\n' "$1" "$shape" "$3" "$(since "$t0")" \
    "$(grep -o '[0-9.]* Mvox in [0-9.]* s = [0-9.]* Mvox/s' <<< "$line")" "$(grep -o '[0-9.]* s from start to result' <<< "$line")"
  [ "$line" = "${line#ok }" ] && echo "  ${line:0:300}"
  if [ -e "$work/first-1.zarr" ]; then same "$work/first-1.zarr" "$out" || echo "  output DIFFERS from the first 1-GPU output"
  else cp -r "$out" "$work/first-1.zarr"; fi
}
rm -rf "$work"/ab-"$shape"-*.db "$work/first-1.zarr"
for n in ${GPUS:-1 2}; do
  volume first "$here/src" "$n"
  for _ in $(seq "$rounds"); do
    [ -n "${OLD:-}" ] && volume old "$OLD" "$n"
    volume new "$here/src" "$n"
  done
done
