#!/usr/bin/env bash
# Where the time from Enter to prompt goes, for the plain commands: the volume command on the
# reports' 1.9 Gvox HDF5 volume on one GPU and on two (first on a fresh store, then again), and
# the plain `dlbench` (quick suite). Each is timed plainly, then once more with every process
# profiled (benchmarks/startup/sitecustomize.py); the summaries go to $OUT.
#
#   OUT=out bash benchmarks/fixed_costs.sh [WORKDIR]      # on a machine with 2 GPUs
#   QUICK=0 CPROFILE=0 SHAPE=200x6144x6144 ...            # no quick suite; the samples alone; 7.5 Gvox
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/dlbench-fixed}
out=${OUT:-$PWD/out}
mkdir -p "$work" "$out"
export PYTHONPATH="$here/src" PYTHONUNBUFFERED=1
dl() { python3 -m dlbench "$@"; }
stamp() { python3 -u -c 'import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin: print(f"{time.time() - t0:7.2f} {line}", end="")' "$1"; }
. "$here/benchmarks/timing.sh"
timed() {  # name, command...: Enter-to-prompt, the output lines stamped with seconds since Enter
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@" 2>&1 | stamp "$t0" > "$out/$name.log"
  printf '%-28s %6.1f s  | %s\n' "$name" "$(since "$t0")" "$(tail -1 "$out/$name.log" | cut -c1-160)"
}
profiled() {  # name, command...: the same with every process profiled
  local name=$1; shift
  rm -rf "$work/prof-$name"
  DLBENCH_STARTUP_PROFILE="$work/prof-$name" DLBENCH_STARTUP_CPROFILE=${CPROFILE:-1} PYTHONPATH="$here/benchmarks/startup:$here/src" "$@" > /dev/null 2>&1
  python3 "$here/benchmarks/startup/summary.py" "$work/prof-$name" --top 45 --timeline > "$work/summary-$name.txt"
}
[ -e "$work/vol.h5" ] || dl data volume "$work/vol.h5" --shape "${SHAPE:-200x3072x3072}" --format hdf5 --workers "$(nproc)" \
  > /dev/null 2>&1
vol() { dl run volume --model unet3d --input "$work/vol.h5" --output "$work/pred.zarr" --overwrite "$@"; }
rm -f "$work"/*.db
# The floor under any command's start: the interpreter, then torch with a CUDA context.
for i in 1 2 3; do
  timed "floor-python-$i" python3 -c pass
  timed "floor-torch-cuda-$i" python3 -c "import torch; torch.empty(1, device='cuda'); torch.cuda.synchronize()"
done
timed vol1-first  vol --db "$work/v1.db"
timed vol1-second vol --db "$work/v1.db"
profiled vol1-second vol --db "$work/v1.db"
timed vol2-first  vol --gpus 2 --db "$work/v2.db"
timed vol2-second vol --gpus 2 --db "$work/v2.db"
profiled vol2-second vol --gpus 2 --db "$work/v2.db"
if [ "${QUICK:-1}" = 1 ]; then
  (cd "$(mktemp -d)" && DLBENCH_DB="$work/q.db" timed quick dl)
  (cd "$(mktemp -d)" && profiled quick env DLBENCH_DB="$work/q2.db" python3 -m dlbench)
fi
cat "$work"/summary-*.txt > "$out/summaries.txt"
