#!/usr/bin/env bash
# The volume command a user types, against the best flags, on one GPU: the plain command
# (no --block, --precision or layout flags: auto) must reach >= 0.95x the best flags' rate,
# and an explicit fp32 run with --block auto must not be slower than the default block.
#
#   bash benchmarks/volume_defaults.sh [WORKDIR]     # about 6 minutes on one H200
#   FP32=0 bash benchmarks/volume_defaults.sh        # without the fp32 runs: about 2.5 minutes
#
# Prints each run's one-line result (what was asked, what ran and why) and a table of Mvox/s.
set -euo pipefail
work=${1:-/tmp/dlbench-volume-defaults}
db=$work/volume.db
mkdir -p "$work"
export PYTHONUNBUFFERED=1
dlbench() { python3 -m dlbench "$@"; }  # installed, or src/ on PYTHONPATH
run() { echo "+ dlbench run volume $*" >&2; dlbench --db "$db" run volume --overwrite "$@" | tee -a "$work/lines.txt"; }

[ -e "$work/vol.h5" ] || dlbench data volume "$work/vol.h5" --shape 200x3072x3072 --format hdf5
[ "${FP32:-1}" = 0 ] || [ -e "$work/small.h5" ] || dlbench data volume "$work/small.h5" --shape 200x1536x1536 --format hdf5
: > "$work/lines.txt"
run --model unet3d --input "$work/vol.h5:volumes/raw" --output "$work/pred.zarr"                      # plain
run --model unet3d --input "$work/vol.h5:volumes/raw" --output "$work/best.zarr" --block auto --precision fp16 --channels-last
run --model unet3d --input "$work/vol.h5:volumes/raw" --output "$work/pred.zarr"                      # plain, again
if [ "${FP32:-1}" != 0 ]; then
  run --model unet3d --input "$work/small.h5:volumes/raw" --output "$work/fp32-auto.zarr" --precision fp32
  run --model unet3d --input "$work/small.h5:volumes/raw" --output "$work/fp32-default.zarr" --precision fp32 --block 32x384x384
fi
python3 - "$work/lines.txt" <<'EOF'
import re, sys
names = ["plain", "best flags", "plain again", "fp32 --block auto (0.94 Gvox)", "fp32 --block 32x384x384 (0.94 Gvox)"]
rates = [float(m.group(1)) for m in re.finditer(r"= ([0-9.]+) Mvox/s", open(sys.argv[1]).read())]
print("| run | Mvox/s | of best flags |\n| --- | ---: | ---: |")
for i, (name, rate) in enumerate(zip(names, rates)):
    ratio = f"{rate / rates[1]:.2f}" if i < 3 and len(rates) > 1 else ""
    print(f"| {name} | {rate:.1f} | {ratio} |")
EOF
