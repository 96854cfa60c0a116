#!/usr/bin/env bash
# A newcomer's walk: the README's command and one command from each docs page, in a fresh HOME and
# folder, each timed from start to exit with every output line stamped; prints per command the
# estimate it said before it ran and when, its wall time, its longest silence, and whether what was
# left after the estimate took within 2x of it. Then the README's command again from a second folder, and `dlbench doctor`.
#   bash benchmarks/newcomer_walk.sh [WORKDIR]          # from the repository root, no GPU needed
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work/one" "$work/two" "$work/home"
export HOME="$work/home" PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset DLBENCH_DB XDG_DATA_HOME
stamp() { python3 -u -c 'import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin: print(f"{time.time() - t0:8.2f} {line}", end="")' "$1"; }
report() {  # name, log, wall
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
name, log, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
stamps, said, at = [0.0], None, None
for line in open(log, encoding="utf-8", errors="replace"):
    t, _, text = line.strip().partition(" ")
    stamps.append(float(t))
    m = re.search(r"(?:: |to run, )(?:about|at most about|at most) ([^(;,]+?)(?: \(|;|,|$)", text)
    if said is None and m:
        said, at = m.group(1).strip(), float(t)
stamps.append(wall)
silence = max(b - a for a, b in zip(stamps, stamps[1:]))
def seconds(text):
    total = 0.0
    for number, unit in re.findall(r"([\d.]+) (h|min|s)\b", text or ""):
        total += float(number) * {"h": 3600, "min": 60, "s": 1}[unit]
    return total or None
est = seconds(said)
left = wall - at if est else None  # what the estimate is of: the run from the line that says it
ratio = f"{left / est:.2f}" if est else "-"
within = "-" if not est else ("yes" if 0.5 <= left / est <= 2 else "no")
said_at = f" at {at:.1f} s" if est else ""
print(f"| {name} | {said or 'none'}{said_at} | {wall:.1f} s | {silence:.1f} s | {within} ({ratio}) |")
PY
}
timed() {  # name, folder, command...
  local name=$1 folder=$2; shift 2
  local t0; t0=$(date +%s.%N)
  (cd "$folder" && "$@") 2>&1 | stamp "$t0" > "$work/$name.log"
  report "$name" "$work/$name.log" "$(python3 -c "import time; print(time.time() - $t0)")"
}
dl() { python3 -m dlbench "$@"; }
echo "| page | estimate printed, and when | wall | longest silence | within 2x (time left / estimate) |"
echo "| --- | --- | ---: | ---: | --- |"
timed README "$work/one" dl
timed errors.md "$work/one" dl run train --output r.json
timed architecture.md "$work/one" env PYTHONPATH="$here/examples:$PYTHONPATH" DLBENCH_PLUGINS=dlbench_matmul \
  python3 -m dlbench run fwdbwd --model tiny-cnn
timed images.md "$work/one" dl run smooth --data dummy --batch 8 --sigma 0.25 --input-shape 3x64x64 --steps 5
timed profile.md "$work/one" dl run fwdbwd --model resnet18 --batch 2 --input-shape 3x64x64 --steps 5 --profile 2
timed medical.md "$work/one" dl run converge --model unet2d-medical --synthetic-n 8 --synthetic-size 96 --folds 2 \
  --max-steps 20 --eval-every 10 --batch 2 --features 16
(cd "$work/one" && dl data volume cremi-train.h5 --shape 24x128x128 > /dev/null 2>&1)
timed training3d.md "$work/one" dl run train --model unet3d-aniso --data cremi-train.h5 --patch 8x64x64 --steps 5
(cd "$work/one" && dl data volume cremi.h5 --shape 24x128x128 > /dev/null 2>&1)
timed volumes.md "$work/one" dl run volume --model unet3d --input cremi.h5 --output pred.zarr
timed system.md "$work/one" dl system
[ "${OPTIMIZE:-1}" = 1 ] && timed optimize.md "$work/one" dl run fwdbwd --model resnet18 --batch 2 \
  --input-shape 3x64x64 --optimize compile --steps 5
timed "README, second folder" "$work/two" dl
timed doctor.md "$work/two" dl doctor
grep -m1 "against this machine's other runs" "$work/doctor.md.log" | cut -c1-200
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
