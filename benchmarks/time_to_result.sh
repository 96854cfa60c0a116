#!/usr/bin/env bash
# Time from Enter to prompt of the plain volume command on the reports' 1.9 Gvox volume, first on a
# fresh store (it tunes: --block auto and --precision auto measure) and then again (it reuses the
# tuning record), beside the measured prediction time each run line gives.
#
#   bash benchmarks/time_to_result.sh [WORKDIR]     # on one GPU
set -uo pipefail
work=${1:-/tmp/dlbench-ttr}
db=$work/ttr.db
mkdir -p "$work"; rm -f "$db"
dl() { python3 -m dlbench "$@"; }
[ -e "$work/vol.h5" ] || dl data volume "$work/vol.h5" --shape 200x3072x3072 --format hdf5 >&2
for run in first second; do
  start=$(date +%s%N)
  line=$(dl run volume --model unet3d --input "$work/vol.h5" --output "$work/pred.zarr" --overwrite --db "$db" 2>/dev/null | tail -1)
  end=$(date +%s%N)
  echo "$run run: $(( (end - start) / 1000000 )) ms from Enter to prompt"
  echo "  $line"
done
