#!/usr/bin/env bash
# Does `dlbench doctor` name the right cause? Known faults injected on purpose, each beside a
# clean control of the same configuration on the same machine, then `dlbench doctor --format
# json` and a table fault -> the doctor's verdict and first cause (benchmarks/faults_table.py).
#
#   bash benchmarks/faults.sh [WORKDIR]     # on a machine of 2 GPUs; DB=path to keep the store elsewhere
#
# Faults: a GPU neighbour (bf16 matrix products on the same GPU), NCCL without P2P and shared
# memory (all-reduce over sockets), CPU contention starving a JPEG loader, too few loader
# workers, a launch-bound small batch; two of them again under --profile. About 6 minutes on 2 H200s.
set -uo pipefail
work=${1:-/tmp/dlbench-faults}
db=${DB:-$work/faults.db}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
dl() { python3 -m dlbench "$@"; }
run() { local tag=$1; shift; echo "+ [$tag] dlbench run $*" >&2; dl run "$@" --db "$db" --tag "$tag"; }
stop() { pkill -f "benchmarks/neighbour.py $1" ; sleep 2; }
R50="--model resnet50 --batch 64 --precision bf16 --channels-last --steps 100 --min-seconds 3"
images="folder:$work/images"

dl system --db "$db" >&2
[ -e "$work/images" ] || dl data images "$work/images" --n 12000 >&2

run clean train $R50
run clean train $R50
python3 "$here/neighbour.py" gpu 0 & sleep 8
run gpu-neighbour train $R50
run gpu-neighbour-profiled train $R50 --profile 5
stop gpu
run clean-2gpu train $R50 --gpus 2
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 run nccl-sockets train $R50 --gpus 2
run jpeg-clean train $R50 --data "$images" --workers 8
python3 "$here/neighbour.py" cpu "$(nproc)" & sleep 2
run jpeg-cpu-contention train $R50 --data "$images" --workers 8
run jpeg-cpu-contention-profiled train $R50 --data "$images" --workers 8 --profile 5
stop cpu
run jpeg-few-workers train $R50 --data "$images" --workers 2
run small-batch fwdbwd --model resnet50 --batch 1 --precision fp32 --steps 200
run clean-fwdbwd fwdbwd --model resnet50 --batch 64 --precision bf16 --channels-last --steps 100

# every fault by its tag: the default judges only runs that differ from the newest of their configuration
dl doctor --db "$db" --format json clean gpu-neighbour gpu-neighbour-profiled clean-2gpu nccl-sockets jpeg-clean \
    jpeg-cpu-contention jpeg-cpu-contention-profiled jpeg-few-workers small-batch clean-fwdbwd > "$work/doctor.json"
dl doctor --db "$db" > "$work/doctor.txt"
python3 "$here/faults_table.py" "$work/doctor.json"
