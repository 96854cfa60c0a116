#!/usr/bin/env bash
# Time from Enter to prompt of the plain commands a user types first, beside the measured time the
# run line gives: first the plain `dlbench` (the quick suite) in a fresh folder, then the volume
# command on the reports' 1.9 Gvox HDF5 volume on 1, 2, 4 and 8 GPUs (as many as the host has), each
# first on a fresh store (it tunes: --block auto and --precision auto measure) and then again (it
# reuses the tuning record). Every output is compared file by file with the 1-GPU output. Last, the
# run on the most GPUs is killed with SIGKILL while it writes and completed with --resume, and its
# output compared again.
#
#   bash benchmarks/time_to_result.sh [WORKDIR]     # on a machine with one GPU or more
#   QUICK=0 SHAPE=200x6144x6144 bash benchmarks/time_to_result.sh /tmp/w   # no quick suite, 7.5 Gvox
#   AGAIN=2 KILL=0 ...      # two second runs on each GPU count; no kill and resume
#
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/dlbench-ttr}
shape=${SHAPE:-200x3072x3072}
mkdir -p "$work"
export PYTHONPATH="$here/src"
dl() { python3 -m dlbench "$@"; }
. "$here/benchmarks/timing.sh"
timed() {  # label, command...: seconds from Enter to prompt and the command's last line
  local label=$1; shift
  local t0; t0=$(date +%s.%N)
  local line; line=$("$@" 2>&1 | tail -1)
  local rate; rate=$(grep -o '[0-9.]* Mvox in [0-9.]* s = [0-9.]* Mvox/s' <<< "$line")
  [ -n "$rate" ] && line="$rate | $(grep -o '[0-9.]* s from start to result' <<< "$line")"
  printf '%-34s %6s s from Enter to prompt | %s\n' "$label" "$(since "$t0")" "${line:0:300}"
}
if [ "${QUICK:-1}" = 1 ]; then
  quick=$(mktemp -d)
  (cd "$quick" && env -u DLBENCH_DB bash -c "$(declare -f since timed); timed 'dlbench (quick suite), fresh store' python3 -m dlbench")
fi
input=$work/vol-$shape.h5
[ -e "$input" ] || dl data volume "$input" --shape "$shape" --format hdf5 --workers "$(nproc)" > /dev/null 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
volume() {  # gpus, output, extra flags...
  local n=$1 output=$2; shift 2
  dl run volume --model unet3d --input "$input" --output "$output" --gpus "$n" --db "$work/ttr-$n.db" "$@"
}
most=1
for n in 1 2 4 8; do
  [ "$n" -le "$gpus" ] || continue
  most=$n
  rm -f "$work/ttr-$n.db"
  for run in first $(yes second | head -n "${AGAIN:-1}"); do
    timed "$shape, $n GPU(s), $run run" volume "$n" "$work/pred-$n.zarr" --overwrite --tag "ttr-$run"
  done
  [ "$n" = 1 ] || { same "$work/pred-1.zarr" "$work/pred-$n.zarr" && echo "$n-GPU output: the 1-GPU output's files" \
    || echo "$n-GPU output: DIFFERS from the 1-GPU output"; }
done
[ "${KILL:-1}" = 1 ] || exit 0
# Killed while it writes (a tenth of the blocks' chunks are on disk), then completed.
out=$work/killed-$most.zarr
rm -rf "$out"
setsid bash -c "$(declare -f dl volume); input=$input work=$work; volume $most $out --tag ttr-killed" > /dev/null 2>&1 &
leader=$!
want=$(find "$work/pred-1.zarr" -type f | wc -l)
while kill -0 "$leader" 2>/dev/null && [ "$(find "$out" -type f 2>/dev/null | wc -l)" -lt $((want / 10 + 1)) ]; do sleep 0.05; done
kill -KILL -- "-$leader" 2>/dev/null
wait "$leader" 2>/dev/null
echo "killed with SIGKILL at $(find "$out" -type f 2>/dev/null | wc -l) of $want files"
timed "$shape, $most GPU(s), --resume" volume "$most" "$out" --resume --tag ttr-resumed
same "$work/pred-1.zarr" "$out" && echo "killed and resumed on $most GPU(s): the 1-GPU output's files" \
  || echo "killed and resumed on $most GPU(s): DIFFERS from the 1-GPU output"
