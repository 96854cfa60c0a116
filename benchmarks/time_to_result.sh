#!/usr/bin/env bash
# Time from Enter to prompt of the plain commands a user types first, beside the measured time the
# run line gives: the volume command on the reports' 1.9 Gvox HDF5 volume on one GPU and on two,
# each first on a fresh store (it tunes: --block auto and --precision auto measure) and then again
# (it reuses the tuning record); first the plain `dlbench` (the quick suite) in a fresh folder.
#
#   bash benchmarks/time_to_result.sh [WORKDIR]     # on a machine with one GPU or more
#
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/dlbench-ttr}
mkdir -p "$work"
export PYTHONPATH="$here/src"
dl() { python3 -m dlbench "$@"; }
since() { awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $1 }"; }
timed() {  # label, command...: seconds from Enter to prompt and the command's last line
  local label=$1; shift
  local t0; t0=$(date +%s.%N)
  local line; line=$("$@" 2>/dev/null | tail -1)
  printf '%-34s %6s s from Enter to prompt | %s\n' "$label" "$(since "$t0")" "${line:0:300}"
}
quick=$(mktemp -d)
(cd "$quick" && env -u DLBENCH_DB bash -c "$(declare -f since timed); timed 'dlbench (quick suite), fresh store' python3 -m dlbench")
[ -e "$work/vol.h5" ] || dl data volume "$work/vol.h5" --shape 200x3072x3072 --format hdf5 > /dev/null 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
for n in 1 2; do
  [ "$n" -le "$gpus" ] || continue
  db=$work/ttr-$n.db; rm -f "$db"
  for run in first second; do
    timed "volume, $n GPU(s), $run run" dl run volume --model unet3d --input "$work/vol.h5" \
      --output "$work/pred-$n.zarr" --overwrite --gpus "$n" --db "$db" --tag "ttr-$run"
  done
done
[ "$gpus" -ge 2 ] && cmp -s <(cd "$work/pred-1.zarr" && find . -type f -exec md5sum {} + | sort) \
  <(cd "$work/pred-2.zarr" && find . -type f -exec md5sum {} + | sort) && echo "1- and 2-GPU outputs: identical files"
