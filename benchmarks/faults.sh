#!/usr/bin/env bash
# Does `dlbench doctor` name the right cause? Known faults injected on purpose, each beside a
# clean control of the same configuration on the same machine, then `dlbench doctor --format
# json` and a table fault -> the doctor's verdict and first cause (benchmarks/faults_table.py).
#
#   bash benchmarks/faults.sh [WORKDIR]     # on a machine of 2 GPUs; DB=path to keep the store elsewhere
#
# First REPEATS (5) clean runs, each a fresh process (`--repeat`), of a host-bound (batch 64) and a
# GPU-bound (batch 256) configuration: none may be called slower, the GPU-bound ones agree within
# CV 1%. Faults: a GPU neighbour (bf16 matrix products on the same GPU, then on the second GPU of a
# 2-GPU run), CPUs spinning beside synthetic data, CUDA_DEVICE_MAX_CONNECTIONS=1 on 2 GPUs, NCCL
# without P2P and shared memory (all-reduce over sockets), a JPEG run held to two cores by its CPU
# affinity, CPU contention starving a JPEG loader, too few loader workers, a launch-bound small
# batch. About 10 minutes on 2 H100s.
set -uo pipefail
work=${1:-/tmp/dlbench-faults}
db=${DB:-$work/faults.db}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
dl() { python3 -m dlbench "$@"; }
run() { local tag=$1; shift; echo "+ [$tag] dlbench run $*" >&2; dl run "$@" --db "$db" --tag "$tag"; }
stop() { pkill -f "benchmarks/neighbour.py $1" ; sleep 2; }
R50="--model resnet50 --batch 64 --precision bf16 --channels-last --steps 100 --min-seconds 3"
BIG="--model resnet50 --batch 256 --precision bf16 --channels-last --steps 30 --min-seconds 3"
images="folder:$work/images"
REPEATS=${REPEATS:-5}

[ "${SYSTEM:-1}" = 1 ] && dl system --db "$db" >&2
[ -e "$work/images" ] || dl data images "$work/images" --n "${IMAGES:-6000}" >&2

# clean repeats, each a fresh process: a host-bound and a GPU-bound configuration
run clean train $R50 --repeat "$REPEATS"
run clean-gpu-bound train $BIG --repeat "$REPEATS"
python3 "$here/neighbour.py" gpu 0 & sleep 8
run gpu-neighbour train $R50
stop gpu
python3 "$here/neighbour.py" cpu "$(nproc)" & sleep 2
run cpu-spin-synthetic train $R50
stop cpu
run clean-2gpu train $R50 --gpus 2 --repeat 2
python3 "$here/neighbour.py" gpu 1 & sleep 8
run gpu1-neighbour train $R50 --gpus 2
stop gpu
CUDA_DEVICE_MAX_CONNECTIONS=1 run cuda-connections-1 train $R50 --gpus 2
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 run nccl-sockets train $R50 --gpus 2
run jpeg-clean train $R50 --data "$images" --workers 8 --repeat 2
taskset -c 0,1 python3 -m dlbench run train $R50 --data "$images" --workers 8 --db "$db" --tag held-two-cores
python3 "$here/neighbour.py" cpu "$(nproc)" & sleep 2
run jpeg-cpu-contention train $R50 --data "$images" --workers 8
stop cpu
run jpeg-few-workers train $R50 --data "$images" --workers 2
run small-batch fwdbwd --model resnet50 --batch 1 --precision fp32 --steps 200

# every run by its tag: each clean repeat is judged against the others, each fault against its clean runs
dl doctor --db "$db" --format json clean clean-gpu-bound gpu-neighbour cpu-spin-synthetic clean-2gpu gpu1-neighbour \
    cuda-connections-1 nccl-sockets jpeg-clean held-two-cores jpeg-cpu-contention jpeg-few-workers small-batch \
    > "$work/doctor.json"
dl doctor --db "$db" > "$work/doctor.txt"
python3 "$here/faults_table.py" "$work/doctor.json"
