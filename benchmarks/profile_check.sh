#!/usr/bin/env bash
# Where the step's time goes (`--profile`), on one GPU: the runs issue 25 is judged on.
#
#   bash benchmarks/profile_check.sh [WORKDIR]            # about 7 minutes on one H200
#   MAX=compile bash benchmarks/profile_check.sh [WORKDIR]  # about 4 minutes
#
# ResNet-50 b256 bf16 channels-last training, eager and --optimize $MAX (default max, whose
# autotuning compile took 215-233 s on an H200; MAX=compile compiles in ~50 s), fwdbwd ResNet-50 b16 fp32 (seed 004's
# setting) eager and --optimize graphs, and the volume prediction of a generated 64x1536x1536
# volume with --kernels pytorch and --kernels fused; every run with --profile 5. Then `dlbench
# doctor`, and a table: per run the measured and profiled step, whether the classes add up to
# the measured step (within 5 %), and each class's share. SKIP_SYSTEM=1 leaves out `dlbench
# system` (the ceilings the roofline places the classes under, about 40 s).
set -uo pipefail
work=${1:-/tmp/dlbench-profile-check}
db=$work/profile.db
mkdir -p "$work"
export PYTHONUNBUFFERED=1
MAX=${MAX:-max}
dlbench() { python3 -m dlbench "$@"; }  # installed, or src/ on PYTHONPATH
run() { echo "+ dlbench run $*" >&2; timeout 400 python3 -m dlbench --db "$db" run "$@" --device cuda --profile 5; }

date -u
nvidia-smi -L 2>/dev/null
[ "${SKIP_SYSTEM:-0}" = 1 ] || timeout 120 dlbench --db "$db" system
[ -e "$work/vol.h5" ] || dlbench data volume "$work/vol.h5" --shape 64x1536x1536 --format hdf5
train=(train --model resnet50 --batch 256 --precision bf16 --channels-last --steps 20)
run "${train[@]}" --profile-trace "$work/train-eager.json"
run "${train[@]}" --optimize "$MAX"
fwdbwd=(fwdbwd --model resnet50 --batch 16 --input-shape 3x224x224 --precision fp32 --steps 50)
run "${fwdbwd[@]}"
run "${fwdbwd[@]}" --optimize graphs
for kernels in pytorch fused; do
  run volume --model unet3d --input "$work/vol.h5:volumes/raw" --output "$work/pred-$kernels.zarr" --overwrite \
    --kernels "$kernels" --precision fp16 --channels-last
done
dlbench --db "$db" doctor
python3 - "$db" <<'EOF'
import sys
from dlbench.results.store import Store

CLASSES = ("tensor_core", "matmul", "elementwise", "reduction", "d2d", "h2d", "d2h", "communication", "other", "idle")
print("\n| run | measured ms | profiled ms | adds up | " + " | ".join(CLASSES) + " | profiling s |")
print("| --- | ---: | ---: | --- |" + " ---: |" * len(CLASSES) + " ---: |")
for r in Store(sys.argv[1]).results():
    p = r.metrics.get("profile")
    if r.status != "ok" or not p:
        continue
    spec = r.spec
    name = f"{r.workload} b{spec.get('batch')} {spec.get('precision')} {spec.get('optimize')}"
    if r.workload == "volume":
        name += f" --kernels {(spec.get('options') or {}).get('kernels')}"
    shares = [p["classes"].get(c, {}).get("share") for c in CLASSES]
    cells = " | ".join("" if s is None else f"{100 * s:.1f}" for s in shares)
    measured = p.get("measured_step_s") or 0.0
    verdict = f"{100 * (p.get('coverage') or 0):.0f} %" + ("" if p.get("adds_up") else f" ({p.get('note')})")
    print(f"| {name} | {1e3 * measured:.2f} | {1e3 * p['step_s']:.2f} | {verdict} | {cells} | {p['wall_s']:.1f} |")
EOF
date -u
