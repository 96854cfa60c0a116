"""The input pipeline: a step that waited for its batch, and why (another process's CPU use, slow
storage, slow or too few loader workers, decoding on the CPU), each with its fix; and what a run on
images costs against the same work on synthetic data. The loader workers advised never exceed the
cores the run may use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlbench.cores import decoding_workers
from dlbench.diagnose.check import Cause, Check, Context, Kind
from dlbench.diagnose.history import Against
from dlbench.diagnose.host import contention
from dlbench.figures import ms, percent, sig
from dlbench.report.parts import Parts, mean_step, on_gpu, parts
from dlbench.results.measurement import System
from dlbench.results.record import Result

INPUT_BOUND_SHARE = 0.15  # without a baseline, a data wait above this share of the step is a cause
SLOW_DISK_GBS = 1.0
SLOW_WORKER = 0.5  # loader workers delivering below this share of one worker's measured rate are slow
NEGLIGIBLE = 0.2  # of a longer step on images, a rest below this share beside the data wait is not told

STARVED = Kind("CPU contention starving the input pipeline", idle=True, needs_cores="data", short_of_cpu=True)
SLOW_STORAGE = Kind("slow storage", idle=True)
SLOW_WORKERS = Kind("slow loader workers")
TOO_FEW_WORKERS = Kind("too few loader workers", idle=True, needs_cores="data")
CPU_DECODING = Kind("JPEG decoding on the CPU", idle=True, needs_cores="data")
INPUT_BOUND = Kind("input-bound", idle=True, needs_cores="data")


def _workers(r: Result) -> int | None:
    options = r.setup.options
    value = r.measured.data.workers
    if value is None:
        value = options.get("workers", options.get("num_workers"))
    return value if isinstance(value, int) else None


def usable_cores(r: Result) -> int | None:
    """The cores the run's loader workers can run on: the CPUs its process was allowed (affinity,
    cgroup quota) where recorded, else the machine's; more workers than these only queue."""
    allowed = r.measured.host.allowed_cores
    if allowed is not None:
        return max(1, int(allowed))
    return r.machine.cpu.cores


def _cores_word(r: Result) -> str:
    allowed, machine = r.measured.host.allowed_cores, r.measured.neighbours.cpu_cores
    return "allowed cores" if allowed is not None and machine and allowed < machine else "cores"


def reads_storage(r: Result) -> str | None:
    options = r.setup.options
    for key in ("data", "dataset", "path", "root", "folder", "images", "volume", "input"):
        value = options.get(key)
        if isinstance(value, str) and value and value not in ("synthetic", "dummy", "random"):
            return value
    return None


def decoding_on_the_gpu(r: Result) -> str:
    """What of `--decode gpu` runs on the model's SMs, from the decoder the run recorded."""
    from dlbench.data import decoders

    decoder = r.measured.data.decoder
    if decoder == decoders.HARDWARE:
        return "the crops and resizes run there (the decoding itself on the hardware JPEG decoders)"
    if decoder == decoders.CUDA and any(decoders.named_with_hardware(name) for name in r.machine.gpu_names):
        return ("the JPEGs are decoded there, by nvjpeg, while this GPU's hardware JPEG decoders sit idle: "
                "`--decode hardware` moves the decoding to them (measure both: their host work can cost more)")
    return "the decoding and crops of --decode gpu run there, beside the model's kernels"


def input_cause(r: Result, seconds: float, p: Parts, record: Result | None) -> Cause:
    """Name the reason the input pipeline starved: another process's CPU use, slow storage, too few
    workers for the decode rate, decoding on the CPU; each with its fix."""
    wait = f"waiting for data {percent(p.data / p.step)} of the measured time ({ms(p.data * 1e3)} of {ms(p.step * 1e3)} ms a step)"
    contended = contention(r)
    if contended:
        return STARVED(f"{wait}; {contended}: free those cores or run where no other job shares them", seconds)
    system = record.measured.system if record else System()
    disk = system.disk_read_gbs
    if reads_storage(r) and disk is not None and disk < SLOW_DISK_GBS:
        where = (c.details if (c := system.ceiling("disk_read_gbs")) else {}).get("path", "?")
        return SLOW_STORAGE(f"{wait}; data read from {reads_storage(r)}; `dlbench system --disk` measured "
                                     f"{disk:.2f} GB/s on {where} (below {SLOW_DISK_GBS:g} GB/s): copy the data to "
                                     f"local or faster storage", seconds)
    workers, cores = _workers(r), usable_cores(r)
    gpus = r.setup.gpus
    decode = r.setup.options.get("decode")
    throughput = r.measured.throughput
    rate, unit = throughput.value, throughput.unit or ""
    if workers and cores and rate and p.step > p.data:
        fed = rate / (workers * gpus)
        needed = rate * p.step / (p.step - p.data)  # the rate with no wait
        want = min(decoding_workers(int(cores), gpus), math.ceil(needed / (fed * gpus)))
        per_core = system.jpeg_decode_cpu_img_s_per_core
        text = (f"{wait}; {workers} loader workers per GPU delivered {sig(rate)} {unit} ({sig(fed)} per worker"
                + (f"; JPEG decode alone measured {per_core:,.0f} img/s per core" if per_core else "")
                + f"); without the wait the GPU would take {sig(needed)} {unit}")
        loader = system.jpeg_loader_cpu_img_s_per_core
        if decode in (None, "cpu") and loader and fed < SLOW_WORKER * loader:
            return SLOW_WORKERS(f"{text}; one worker alone reached {loader:,.0f} img/s here "
                         f"(`dlbench system`), {sig(loader / fed)}x what each delivered: the workers wait for "
                         "a core or for storage; free cores or run fewer workers", seconds)
        if want > workers:
            fix = f"`--workers {want}` ({cores} {_cores_word(r)} for {gpus} GPU(s))"
            fix += " or `--decode gpu`" if decode == "cpu" else ""
            return TOO_FEW_WORKERS(f"{text}: {fix}", seconds)
        if decode == "cpu":
            gpu_rate = system.jpeg_decode_gpu_img_s
            measured = f" (nvjpeg measured {gpu_rate:,.0f} img/s here)" if gpu_rate else ""
            return CPU_DECODING(f"{text}; the cores cannot add workers: `--decode gpu`{measured}",
                         seconds)
    return INPUT_BOUND(wait, seconds)


def _waited(ctx: Context) -> Cause | None:
    p = ctx.parts
    data = ctx.grown("data")
    if data is not None and data > 0 and (ctx.base or p.data >= INPUT_BOUND_SHARE * p.step):
        return input_cause(ctx.run, data, p, ctx.record)
    return None


INPUT = Check("the input pipeline", "the data wait; other processes' CPU use; the loader workers, their rate and the "
              "cores the run may use; `dlbench system`'s disk, JPEG decode and loader rates",
              _waited, (STARVED, SLOW_STORAGE, SLOW_WORKERS, TOO_FEW_WORKERS, CPU_DECODING, INPUT_BOUND))


# ---- images against synthetic data ------------------------------------------------------------

@dataclass(frozen=True)
class InputCost:
    """Where a run on images loses to the same work on synthetic data, in seconds a step."""
    longer: float  # its step over the synthetic run's
    data: float  # of that, waiting for data
    rest: float | None  # the rest of it, where more than NEGLIGIBLE of it
    step: float  # its mean step
    gpu_work: str | None  # what the rest does on the GPU; None on a CPU, where the loader's workers share the cores


def input_cost(r: Result, a: Against) -> InputCost | None:
    """The steps' data wait, and the rest of the longer step (with --decode gpu, the decoding and crops
    on the model's GPU); None where the run on images is not slower."""
    longer = mean_step(r) - mean_step(a.other)
    if not a.slower or longer <= 0:
        return None
    data = min(parts(r).data or 0.0, longer)
    rest = longer - data
    if rest <= NEGLIGIBLE * longer:
        return InputCost(longer, data, None, mean_step(r), None)
    where = None
    if on_gpu(r):
        where = (decoding_on_the_gpu(r) + "; `--profile` shows it among the elementwise kernels"
                 if r.setup.options.get("decode") in ("gpu", "hardware") else "each batch's copy and normalising")
    return InputCost(longer, data, rest, mean_step(r), where)
