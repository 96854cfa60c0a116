#!/usr/bin/env bash
# Weak scaling on one multi-GPU host: the same dlbench runs on 1 GPU and on all of them
# (DistributedDataParallel through torchrun, NCCL), stored in one SQLite store, then
# `dlbench report` prints each section's tables with the weak-scaling columns.
#
#   bash benchmarks/scaling.sh [WORKDIR]    # GPUS=N to use N GPUs (default: all); DB=path
#
# Runs: ResNet-50 training (synthetic data and a generated JPEG folder decoded on the GPU),
# 3D U-Net training on a generated EM volume, 2D U-Net medical training, blockwise volume
# prediction sharded across the GPUs. About 5 minutes on 2 H200s.
set -euo pipefail
work=${1:-/tmp/dlbench-scaling}
gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
db=${DB:-$work/scaling.db}
mkdir -p "$work"
run() { echo "+ dlbench $*" >&2; dlbench "$@" --db "$db"; }

[ -e "$work/vol.h5" ] || dlbench data volume "$work/vol.h5" --shape 64x1536x1536 --format hdf5
[ -e "$work/images" ] || dlbench data images "$work/images" --n 20000
for g in 1 "$gpus"; do
  run run train --model resnet50 --batch 256 --precision bf16 --channels-last --steps 60 --gpus "$g"
  run run train --model resnet50 --batch 256 --precision bf16 --channels-last --steps 40 --gpus "$g" \
      --data "folder:$work/images" --decode gpu --workers 8
  run run train --model unet3d-aniso --data "$work/vol.h5" --patch 40x432x432 --precision bf16 --steps 40 --gpus "$g"
  run run train --model unet2d-medical --batch 8 --precision tf32 --warmup 50 --steps 200 --gpus "$g"
  run run volume --model unet3d --input "$work/vol.h5" --output "$work/pred-$g.zarr" --overwrite \
      --precision bf16 --channels-last --gpus "$g"
done
dlbench report --db "$db"
