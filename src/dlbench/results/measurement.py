"""What one benchmark measured, as typed records read and written through their fields.

A `Measurement` is a few small records: the throughput in its unit, the measured window and its
per-phase statistics, the GPU monitor's readings, what else ran on the machine, the utilisation
against the measured ceiling, and the figures only one kind of workload has (latency, training,
volume prediction, convergence, the system's ceilings). The raw per-step samples stay in
`Result.samples`.

The stored form is the record's flat `metrics` mapping (see results/record.py, whose schema
number versions it): this module is the one place that knows its keys. `Measurement.read`
reads the mapping of any schema, `to_metrics` writes it, and keys no record knows (a
plug-in workload's own figures) ride along in `extra`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, TypedDict, TypeVar, Union

G = TypeVar("G", bound="Group")


def stored_as(key: str) -> Any:
    """A field stored under another key than its name (`throughput_unit` for `Throughput.unit`)."""
    return field(default=None, metadata={"key": key})


class Group:
    """A record stored as some of the flat metrics' keys: each field under its name or `stored_as`."""

    @classmethod
    def keys(cls) -> dict[str, str]:
        """field name → stored key."""
        return {f.name: f.metadata.get("key", f.name) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def read(cls: type[G], metrics: Mapping[str, Any]) -> G:
        return cls(**{name: metrics[key] for name, key in cls.keys().items() if key in metrics})

    def to_metrics(self) -> dict[str, Any]:
        return {key: getattr(self, name) for name, key in self.keys().items() if getattr(self, name) is not None}


@dataclass(frozen=True)
class Stats(Group):
    """Statistics of one phase's per-step seconds (results/stats.py), stored under `stats` by phase."""
    n: int | None = None
    mean: float | None = None
    median: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    cv: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None


@dataclass(frozen=True)
class Throughput(Group):
    value: float | None = stored_as("throughput")
    unit: str | None = stored_as("throughput_unit")  # img/s, patch/s, Mvox/s, ...
    method: str | None = stored_as("throughput_method")  # how it was computed, in words


@dataclass(frozen=True)
class Window(Group):
    """The warm-up and the measured window, and the wall time the user waited for the result."""
    warmup_s: float | None = None
    warmup_steps: int | None = None
    window_s: float | None = None
    steps: int | None = None
    step_ms: float | None = None  # the median step
    total_ms: float | None = None
    total_s: float | None = None
    compile_s: float | None = None
    wall_to_result_s: float | None = None  # from the command's start to its result
    timeout_s: float | None = None  # the limit a timed-out run hit


ENERGY_PER = "energy_j_per_"  # + the item a run counts, for a plug-in's own unit (in `extra`)
PHASES = ("data", "h2d", "forward", "backward", "optimizer", "noise")


@dataclass(frozen=True)
class Phase:
    """One phase of the step: its median in ms and its share of the measured time (its statistics
    are in `Measurement.stats` under its name)."""
    name: str
    ms: float | None = None
    share: float | None = None


@dataclass(frozen=True)
class Monitor(Group):
    """The GPU monitor's readings over the measured window (measure/monitor.py)."""
    readings: int | None = stored_as("monitor_readings")
    gpu_util_mean: float | None = None
    sm_clock_mean_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    power_mean_w: float | None = None
    power_max_w: float | None = None
    energy_j: float | None = None
    energy_method: str | None = None
    energy_j_per_step: float | None = None
    temperature_max_c: float | None = None
    memory_used_max_gb: float | None = None
    throttled: bool | None = None
    throttled_share: float | None = None
    throttle_reasons: list[str] | None = None
    energy_j_per_img: float | None = None
    energy_j_per_patch: float | None = None
    energy_j_per_mvox: float | None = None
    peak_memory_mb: float | None = None  # the allocator's peak in this process
    peak_host_rss_mb: float | None = None
    ranks: list[dict[str, Any]] | None = stored_as("rank_gpus")  # as stored: read it through `per_rank`

    @property
    def per_rank(self) -> list["RankGpu"]:
        """Every rank's GPU over the window in a multi-process run, in rank order (the figures above are
        rank 0's); empty with one process, and in a record stored before each rank's GPU was watched."""
        return [RankGpu.read(entry) for entry in self.ranks or [] if isinstance(entry, Mapping) and "rank" in entry]


@dataclass(frozen=True)
class GpuNeighbour:
    """Another process that computed on the GPU during the window (measure/monitor.py)."""
    pid: int
    sm_share: float = 0.0  # its share of the window's SM time
    memory_gb: float | None = None
    command: str | None = None
    launcher: bool = False  # the process that started this run: it holds memory, and is no neighbour


@dataclass(frozen=True)
class Neighbours(Group):
    """What else used the GPU and the CPU while the benchmark ran (measure/monitor.py, measure/host.py)."""
    gpu_sm_instants: int | None = None
    gpu_own_sm_share: float | None = None
    gpu_neighbours: list[dict[str, Any]] | None = None
    gpu_neighbours_sm_share: float | None = None
    other_processes: int | None = None
    other_processes_memory_gb: float | None = None
    cpu_cores: int | None = None
    cpu_own_cores: float | None = None
    cpu_other_cores: float | None = None
    cpu_other_busy_processes: int | None = None
    cpu_other_top: list[Any] | None = None
    load_average_1m: float | None = None
    launcher_processes: int | None = None  # the process(es) that started the run, holding GPU memory
    launcher_memory_gb: float | None = None
    launcher_commands: list[str] | None = None

    @property
    def strangers(self) -> list[GpuNeighbour]:
        """The other processes that computed on the GPU, the largest share first; the run's launcher
        is not among them."""
        found = [GpuNeighbour(**_known(GpuNeighbour, n)) for n in self.gpu_neighbours or []
                 if isinstance(n, Mapping) and "pid" in n]
        return [n for n in found if not n.launcher]


def _neighbour(stored: Mapping[str, Any]) -> GpuNeighbour:
    """A stored neighbour; its `launcher` mark (the launcher's command, where it was recorded) as a flag."""
    return GpuNeighbour(**{**_known(GpuNeighbour, stored), "launcher": bool(stored.get("launcher"))})


@dataclass(frozen=True)
class RankGpu:
    """One rank's GPU over the measured window of a multi-process run, as that rank's own monitor saw
    it (workloads/distributed.py): stored, one mapping per rank, under `rank_gpus`. The ranks wait
    for each other every step, so what slows any one GPU slows the run."""
    rank: int
    gpu: int | None = None  # the rank's CUDA device index; None on the CPU
    pid: int | None = None  # the rank's process: on another rank's GPU it is no neighbour
    host: str | None = None
    readings: int | None = None  # the monitor's readings; None where the GPU was not read
    gpu_util_mean: float | None = None
    sm_clock_mean_mhz: float | None = None
    power_mean_w: float | None = None
    neighbours_sm_share: float | None = None  # other processes' share of its SM time, launchers apart
    other_processes: int | None = None
    neighbours: tuple[GpuNeighbour, ...] = ()  # every other process that computed on it
    reason: str | None = None  # why its GPU was not read (a CPU run, no NVML)

    @classmethod
    def watched(cls, rank: int, gpu: int | None, pid: int, host: str, summary: Mapping[str, Any],
                reason: str | None = None) -> "RankGpu":
        """The record of a rank from its monitor's summary (measure/monitor.py `MonitorData.summary`)."""
        monitor, seen = Monitor.read(summary), Neighbours.read(summary)
        return cls(rank, gpu, pid, host, monitor.readings, monitor.gpu_util_mean, monitor.sm_clock_mean_mhz,
                   monitor.power_mean_w, seen.gpu_neighbours_sm_share, seen.other_processes,
                   tuple(_neighbour(n) for n in seen.gpu_neighbours or [] if isinstance(n, Mapping) and "pid" in n),
                   reason)

    @classmethod
    def read(cls, stored: Mapping[str, Any]) -> "RankGpu":
        found = stored.get("neighbours") or []
        return cls(**{**_known(cls, stored), "neighbours": tuple(
            _neighbour(n) for n in found if isinstance(n, Mapping) and "pid" in n)})

    def stored(self) -> dict[str, Any]:
        figures = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return {**figures, "neighbours": [{k: v for k, v in dataclasses.asdict(n).items() if v is not None}
                                          for n in self.neighbours]}

    def strangers(self, siblings: Collection[int] = ()) -> list[GpuNeighbour]:
        """The processes that computed on this GPU beside the rank, the largest share first: neither the
        run's launcher nor another rank of the run (`siblings`: the ranks' PIDs)."""
        found = [n for n in self.neighbours if not n.launcher and n.pid not in siblings]
        return sorted(found, key=lambda n: -n.sm_share)


@dataclass(frozen=True)
class Utilisation(Group):
    """The model's FLOPs per step against the ceiling `dlbench system` measured, and the datasheet."""
    flops_per_step: float | None = None
    parameters: int | None = None
    achieved_tflops: float | None = None
    ceiling_tflops: float | None = None
    ceiling_precision: str | None = None
    ceiling_record: str | None = None  # the id of the system record the ceiling came from
    ceiling_fraction: float | None = None
    datasheet_tflops: float | None = None
    datasheet_fraction: float | None = None


@dataclass(frozen=True)
class Latency(Group):
    """Per-batch latency in ms (infer, smooth)."""
    avg_ms: float | None = stored_as("latency_avg_ms")
    p50_ms: float | None = stored_as("latency_p50_ms")
    p90_ms: float | None = stored_as("latency_p90_ms")
    p95_ms: float | None = stored_as("latency_p95_ms")
    p99_ms: float | None = stored_as("latency_p99_ms")


@dataclass(frozen=True)
class Data(Group):
    """Where the inputs came from and how they were loaded."""
    source: Any = stored_as("data")  # converge: where its images came from
    path: str | None = stored_as("data_path")
    host_ms: float | None = stored_as("data_host_ms")  # the host's share of a data step
    images: int | None = None  # images processed
    images_per_s: float | None = None
    dataset_images: int | None = None
    corrupt_files: int | None = None
    corrupt_examples: list[str] | None = None
    workers: int | None = None
    batch_per_process: int | None = None
    input_shape: list[int] | None = None
    augment: str | None = None
    ranks: list[Any] | None = None  # one line per rank of a multi-GPU run
    decoder: str | None = None  # the JPEG decoder that ran (data/decoders.py): pillow, nvjpeg-cuda, nvimgcodec-hardware
    cpu_share: float | None = None  # the share of JPEGs decoded on the CPU beside the GPU's decoder
    cuda_max_connections: str | None = None  # CUDA_DEVICE_MAX_CONNECTIONS as the decoder ran under it
    prefetch_priority: Any = None
    warnings: list[str] | None = None  # what the data checks warned of before the run

    @property
    def per_rank(self) -> list["RankPhases"]:
        """Each rank's steps and phase times in a multi-process run, in rank order (empty with one)."""
        return [RankPhases.read(line) for line in self.ranks or [] if isinstance(line, Mapping) and "rank" in line]


@dataclass(frozen=True)
class PhaseSpread:
    """One phase's per-step times on one rank, in ms: its median and, where recorded, its p10 and p90."""
    median_ms: float
    p10_ms: float | None = None
    p90_ms: float | None = None


SPREAD_ENDS = ("_p10_ms", "_p90_ms")


@dataclass(frozen=True)
class RankPhases:
    """One rank's line of a multi-process run (`Data.ranks`, workloads/pipeline.py): its steps, its
    median step and each phase's spread, stored as `<phase>_ms`, `<phase>_p10_ms`, `<phase>_p90_ms`."""
    rank: int
    steps: int | None = None
    step_ms: float | None = None
    phases: dict[str, PhaseSpread] = field(default_factory=dict)  # in the step's order

    @classmethod
    def read(cls, line: Mapping[str, Any]) -> "RankPhases":
        names = [k.removesuffix("_ms") for k, v in line.items() if k.endswith("_ms") and k != "step_ms"
                 and not k.endswith(SPREAD_ENDS) and isinstance(v, (int, float))]
        phases = {name: PhaseSpread(line[f"{name}_ms"], _number(line.get(f"{name}_p10_ms")),
                                    _number(line.get(f"{name}_p90_ms")))
                  for name in names}
        return cls(int(line["rank"]), line.get("steps"), line.get("step_ms"), phases)

    @property
    def spread_recorded(self) -> bool:
        """Whether the line holds each phase's p10 and p90 (a line stored by an earlier dlbench has medians only)."""
        return bool(self.phases) and all(s.p10_ms is not None and s.p90_ms is not None for s in self.phases.values())


def _number(value: Any) -> float | None:
    """A stored figure where it is a number; None where it is not (a line edited by hand)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _known(cls, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a stored mapping that are fields of the dataclass `cls`, Nones left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in stored.items() if k in names and v is not None}


@dataclass(frozen=True)
class ClassTime:
    """One class of a profiled step's time (measure/kernels.py's CLASSES): seconds a step on the
    device timeline and their share of the step, the time its kernels ran (overlapped ones too),
    and its FLOPs or bytes a step with their rates where they are known."""
    seconds: float = 0.0
    share: float = 0.0
    kernel_seconds: float = 0.0
    flops: float | None = None
    flop_s: float | None = None
    bytes: float | None = None
    bytes_s: float | None = None
    bytes_coverage: float | None = None  # the share of the class's kernels whose bytes are known


@dataclass(frozen=True)
class ProfileSummary:
    """`--profile`'s summary as measure/profile.py stores it under `profile`. `classes` is None where
    the profiled steps failed (`error` says why)."""
    classes: dict[str, ClassTime] | None = None
    steps: int | None = None
    step_s: float | None = None  # the profiled step the classes add up to
    measured_step_s: float | None = None
    device: str | None = None  # cuda or cpu
    coverage: float | None = None  # the profiled step over the measured one
    adds_up: bool = False  # within measure/profile.py's ADDS_UP of it
    note: str = ""  # why not, where it does not
    wall_s: float | None = None  # what profiling took
    ranks: list[dict[str, Any]] = field(default_factory=list)  # each rank's step, coverage and shares
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @classmethod
    def read(cls, stored: Any) -> "ProfileSummary | None":
        if not isinstance(stored, Mapping):
            return None
        raw = stored.get("classes")
        classes = {name: ClassTime(**_known(ClassTime, entry)) for name, entry in raw.items()
                   if isinstance(entry, Mapping)} if isinstance(raw, Mapping) else None
        return cls(**{**_known(cls, stored), "classes": classes})

    def share(self, cls: str) -> float | None:
        """The share of the step a class took; None where the profile has no such class."""
        found = (self.classes or {}).get(cls)
        return None if found is None else found.share


@dataclass(frozen=True)
class Communication:
    """What decides how fast a multi-GPU step's all-reduce can be (workloads/distributed.py), stored
    as one mapping under `communication`; a fact a record lacks reads as None (or empty)."""
    gradient_bytes: int | None = None  # what each step reduces
    nccl_settings: dict[str, str] = field(default_factory=dict)  # the NCCL_* environment
    backend: str | None = None
    nccl_version: str | None = None
    peer_access: bool | None = None  # whether the GPUs reach each other directly
    nvlinks_active: list[int | None] | None = None  # per GPU, as NVML reports them (on GPUs only)

    @classmethod
    def read(cls, stored: Mapping[str, Any] | None) -> "Communication":
        return cls(**_known(cls, stored or {}))

    def stored(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Training(Group):
    """What only training reports: iterations, the extrapolated time, the step's communication."""
    iters_per_min: float | None = None
    patches_per_s: float | None = None
    iteration_mean_s: float | None = None
    iteration_min_s: float | None = None
    iteration_max_s: float | None = None
    iteration_std_s: float | None = None
    extrapolate_iters: int | None = None
    days_to_extrapolate: float | None = None
    epochs: int | None = None
    patch: list[int] | None = None
    task: str | None = None
    optimizer: str | None = None
    communication: dict[str, Any] | None = None  # as stored: read it through `all_reduce`

    @property
    def all_reduce(self) -> Communication:
        return Communication.read(self.communication)


@dataclass(frozen=True)
class Smoothing(Group):
    """Smoothed inference (BenchmarkJade): the noisy copies per image."""
    sigma: float | None = None
    noise_copies: int | None = None
    noisy_per_s: float | None = None


@dataclass(frozen=True)
class Volume(Group):
    """Blockwise prediction of a volume."""
    mvox_per_s: float | None = None
    model_mvox_per_s: float | None = None  # the model alone on the same tiles
    sustained_mvox_per_s: float | None = None
    voxels: int | None = None
    volume_shape: list[int] | None = None
    volume_voxels: int | None = None
    blocks: int | None = None
    blocks_skipped: int | None = None
    blocks_redone: int | None = None  # marked done, but a chunk was missing or did not decode: predicted again
    redone_why: list[str] | None = None  # the first few of those, naming the chunk files
    blocks_per_rank: list[int] | None = None
    block: list[int] | None = None
    halo: list[int] | None = None
    tile: list[int] | None = None
    block_fill: float | None = None
    kept_share: float | None = None
    output: str | None = None
    dtype: str | None = None
    phase_s: dict[str, float] | None = None  # seconds per stage of the pipeline
    data_wait_share: float | None = None
    warmup_tile_s: float | None = None
    first_tile_wait_s: float | None = None
    nonfinite_voxels: int | None = None
    extrapolate_voxels: float | None = None
    extrapolate_hours: dict[str, float] | None = None  # GPUs → hours for extrapolate_voxels
    extrapolate_hours_basis: dict[str, str] | None = None
    kernels: str | None = None
    fused_layers: int | None = None
    slab_layers: int | None = None
    block_choice: str | None = None  # the chosen block, in words
    block_probe: list[dict[str, Any]] | None = None
    choice_asked: dict[str, Any] | None = None
    precision_check: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Convergence(Group):
    """Training to a target accuracy (converge), UNet_Medical's time to train."""
    target_dice: float | None = None
    folds: int | None = None
    folds_run: int | None = None
    folds_reached: int | None = None
    target_reached: bool | None = None
    per_fold: list[dict[str, Any]] | None = None
    dice_per_fold: list[float] | None = None
    mean_dice: float | None = None
    time_to_train_s: float | None = None
    steps_to_target: float | None = None
    time_method: str | None = None
    global_batch: int | None = None
    image_size: list[int] | None = None
    train_input: list[int] | None = None
    train_output: list[int] | None = None
    eval_size: list[int] | None = None


@dataclass(frozen=True)
class Ceiling:
    """One measured ceiling of the machine (system/ceilings.py)."""
    name: str
    value: float | None = None
    method: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    unit: str | None = None  # TFLOP/s, GB/s, img/s, ...


@dataclass(frozen=True)
class GpuFacts:
    """What NVML told a `dlbench system` survey of one GPU (measure/nvml.py `device_facts`), stored, one
    mapping per GPU, under `gpu_facts`. A fact NVML did not give, or a value of the wrong type, reads as
    None; the stored mapping's other keys (the clocks and temperature at rest) are not read."""
    index: int | None = None  # the GPU's CUDA index
    name: str | None = None
    pcie_gen: int | None = None  # the link at rest: an idle GPU drops to a lower generation
    pcie_width: int | None = None
    pcie_gen_max: int | None = None  # what the slot allows
    pcie_width_max: int | None = None
    pcie_gen_gpu_max: int | None = None  # what the GPU supports
    nvlinks_active: int | None = None
    ecc: bool | None = None
    sm_clock_max_mhz: float | None = None
    power_limit_w: float | None = None
    power_limit_default_w: float | None = None
    # the compute processes on it beside the survey (stored as a list of them): strangers, and the
    # processes that started the survey (marked `launcher`)
    other_processes: int = 0
    launcher_processes: int = 0

    @classmethod
    def read(cls, stored: Mapping[str, Any]) -> "GpuFacts":
        hints = _hints(cls)
        found = stored.get("other_processes")
        found = [p for p in found if isinstance(p, Mapping)] if isinstance(found, list) else []
        launchers = sum(1 for p in found if p.get("launcher"))
        return cls(**{k: v for k, v in _known(cls, stored).items()
                      if k not in ("other_processes", "launcher_processes") and _fits(v, hints[k])},
                   other_processes=len(found) - launchers, launcher_processes=launchers)


@dataclass(frozen=True)
class System(Group):
    """A `dlbench system` record: the machine's ceilings (each also under its own name) and facts."""
    matmul_fp32_tflops: float | None = None
    matmul_tf32_tflops: float | None = None
    matmul_fp16_tflops: float | None = None
    matmul_bf16_tflops: float | None = None
    matmul_fp8_tflops: float | None = None
    copy_gbs: float | None = None
    h2d_pinned_gbs: float | None = None
    h2d_pageable_gbs: float | None = None
    d2h_pinned_gbs: float | None = None
    d2h_pageable_gbs: float | None = None
    allreduce_busbw_gbs: float | None = None
    jpeg_decode_gpu_img_s: float | None = None
    jpeg_decode_cpu_img_s_per_core: float | None = None  # the decoder alone, one core
    jpeg_loader_cpu_img_s_per_core: float | None = None  # one loader worker through the real JPEG folder path
    disk_read_gbs: float | None = None
    ceilings: dict[str, Any] | None = None  # name → {value, method, details}
    datasheet: dict[str, float] | None = None  # name → the datasheet's figure
    gpu_facts: list[dict[str, Any]] | None = None  # as stored: read it through `facts`
    unmeasured: dict[str, str] | None = None  # name → why not

    @property
    def facts(self) -> list[GpuFacts]:
        """What NVML told the survey of each GPU, in the order stored."""
        return [GpuFacts.read(f) for f in self.gpu_facts or [] if isinstance(f, Mapping)]

    def facts_of(self, index: int) -> GpuFacts:
        """The facts of the GPU of CUDA index `index`; all unknown where the survey has none of it."""
        return next((f for f in self.facts if f.index == index), GpuFacts())

    def measured(self, name: str) -> float | None:
        """The ceiling `name` (one of the fields above) where it was measured: a positive number."""
        value = getattr(self, name)
        return value if isinstance(value, (int, float)) and value > 0 else None

    def ceiling(self, name: str) -> Ceiling | None:
        entry = (self.ceilings or {}).get(name)
        if not isinstance(entry, Mapping):
            return None
        return Ceiling(name, entry.get("value"), entry.get("method"), dict(entry.get("details") or {}),
                       entry.get("unit"))


@dataclass(frozen=True)
class Run(Group):
    """How the run was set up and what it tried."""
    device: str | None = None
    processes: int | None = None  # the processes that measured, one per GPU (on a CPU, all on it)
    optimize: Any = None  # the optimisation level, or what it did
    batch_tried: int | None = None  # the batch an out-of-memory run tried
    # --optimize: the optimised model checked against eager (workloads/optimize.py)
    compile_log: str | None = None
    compile_cache: dict[str, Any] | None = None  # how warm the compiler's caches were
    check_error: dict[str, float] | None = None  # relative error of outputs, loss, gradients
    check_noise: dict[str, float] | None = None
    check_allowed: dict[str, float] | None = None
    check_tolerance: float | None = None
    check_update_error: float | None = None
    step_graphs: list[str] | None = None  # the step's phases captured as CUDA graphs
    rewrites: Any = None  # the layers --optimize max rewrote
    cudnn_benchmark_limit: int | None = None
    asked: dict[str, Any] | None = None  # spec fields the workload chose itself, as they were asked
    tuned: dict[str, Any] | None = None  # what the run tuned (volume's block, a batch), for the next run
    tuned_from: Any = None  # the earlier run whose tuning this one reused
    batch_search: dict[str, Any] | None = None  # --batch auto: the probes and what they found
    # --repeat: the set of fresh processes this run is one of, its place in it and the runs asked for
    # ('auto' where the set stops on its own noise)
    repeat_set: str | None = None
    repeat_index: int | None = None
    repeat_of: Any = None


@dataclass(frozen=True)
class Host(Group):
    """What the host's CPUs did for the run over the measured window (measure/host.py); the machine's
    cores and the CPU the run's processes and others used are in `Neighbours`. A record stored
    before these were recorded has none of them (`recorded` is False)."""
    window_s: float | None = stored_as("host_window_s")  # the window these figures cover
    launch_thread_wait_s: float | None = None  # the thread that launched the steps, waiting for a CPU
    launch_thread_switches: int | None = None  # its involuntary context switches
    launch_thread_migrations: int | None = None  # its moves between CPUs (None where the kernel hides them)
    cpu_wait_process_s: float | None = None  # all threads of the benchmark process
    cpu_wait_run_s: float | None = None  # all threads of the run's processes (loader workers, ranks)
    cpu_wait_threads: list[dict[str, Any]] | None = None  # the process's longest waiters: tid, name, wait_s
    cpu_steal_share: float | None = None  # of all CPUs' time, taken by the hypervisor
    cpu_mhz_mean: float | None = None  # the allowed CPUs' clock at the window's end
    cpus_allowed: int | None = None  # the CPUs the process may run on (its affinity)
    cpu_quota_cores: float | None = None  # its cgroup's CPU quota; None: none (or not recorded)
    torch_threads: int | None = None
    torch_interop_threads: int | None = None
    environment: dict[str, str] | None = None  # CUDA_*, NCCL_*, TORCH_*, PYTORCH_*, OMP/MKL threads

    @property
    def recorded(self) -> bool:
        """Whether the run recorded these figures (a record of an earlier dlbench did not)."""
        return self.cpus_allowed is not None or self.environment is not None

    @property
    def allowed_cores(self) -> float | None:
        """The cores the process may use: its CPU set, or its cgroup's quota where that is less."""
        limits = [v for v in (self.cpus_allowed, self.cpu_quota_cores) if v is not None]
        return min(limits) if limits else None

    @property
    def launch_wait_share(self) -> float | None:
        """The share of the window the launching thread spent waiting for a CPU."""
        if self.launch_thread_wait_s is None or not self.window_s:
            return None
        return self.launch_thread_wait_s / self.window_s

    @property
    def omp_num_threads(self) -> str | None:
        return (self.environment or {}).get("OMP_NUM_THREADS")


_GROUPS = {"throughput": Throughput, "window": Window, "monitor": Monitor, "neighbours": Neighbours,
           "utilisation": Utilisation, "latency": Latency, "data": Data, "training": Training,
           "smoothing": Smoothing, "volume": Volume, "convergence": Convergence, "system": System, "run": Run,
           "host": Host}
# The processes' count as records stored it before it had one name: volume prediction's `world_size`,
# converge's `gpus`. Read as `Run.processes`, kept as stored.
_PROCESSES_ONCE = ("world_size", "gpus")
_OWN = {"stats", "profile", *_PROCESSES_ONCE, *(f"{p}_{end}" for p in PHASES for end in ("ms", "share"))} | {
    key for group in _GROUPS.values() for key in group.keys().values()}


@dataclass(frozen=True)
class Measurement:
    throughput: Throughput = field(default_factory=Throughput)
    window: Window = field(default_factory=Window)
    phases: dict[str, Phase] = field(default_factory=dict)
    stats: dict[str, Stats] = field(default_factory=dict)  # per phase, and `step` for the whole step
    monitor: Monitor = field(default_factory=Monitor)
    neighbours: Neighbours = field(default_factory=Neighbours)
    utilisation: Utilisation = field(default_factory=Utilisation)
    latency: Latency = field(default_factory=Latency)
    data: Data = field(default_factory=Data)
    training: Training = field(default_factory=Training)
    smoothing: Smoothing = field(default_factory=Smoothing)
    volume: Volume = field(default_factory=Volume)
    convergence: Convergence = field(default_factory=Convergence)
    system: System = field(default_factory=System)
    run: Run = field(default_factory=Run)
    host: Host = field(default_factory=Host)
    profile: dict[str, Any] | None = None  # measure/profile.py's summary of the profiled steps
    extra: dict[str, Any] = field(default_factory=dict)  # keys no record knows
    # Not metrics, so neither stored in them nor read back: what a workload hands the runner beside
    # its figures (launch/execute.py) — traces for Result.traces (the GPU monitor's), and spec
    # fields it chose itself (volume's --block auto: precision, layout) for Result.spec.
    traces: dict[str, Any] = field(default_factory=dict, compare=False)
    settled: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def read(cls, metrics: Mapping[str, Any]) -> "Measurement":
        raw = metrics.get("stats")
        stats = {name: Stats.read(value) for name, value in (raw.items() if isinstance(raw, Mapping) else ())
                 if isinstance(value, Mapping)}
        phases = {name: Phase(name, metrics.get(f"{name}_ms"), metrics.get(f"{name}_share"))
                  for name in PHASES if f"{name}_ms" in metrics or f"{name}_share" in metrics}
        profile = metrics.get("profile")
        groups = {name: group.read(metrics) for name, group in _GROUPS.items()}
        if groups["run"].processes is None:
            once = next((metrics[key] for key in _PROCESSES_ONCE if metrics.get(key) is not None), None)
            groups["run"] = dataclasses.replace(groups["run"], processes=once)
        return cls(**groups, phases=phases, stats=stats, profile=dict(profile) if isinstance(profile, Mapping) else None,
                   extra={k: v for k, v in metrics.items() if k not in _OWN})

    @property
    def device(self) -> str | None:
        return self.run.device

    @property
    def profiled(self) -> ProfileSummary | None:
        """The profile's summary, typed (`profile` holds it as stored)."""
        return ProfileSummary.read(self.profile)

    @property
    def step(self) -> Stats | None:
        """Statistics of the whole step's seconds."""
        return self.stats.get("step")

    def phase_ms(self, name: str) -> float | None:
        phase = self.phases.get(name)
        return phase.ms if phase else None

    def phase_share(self, name: str) -> float | None:
        phase = self.phases.get(name)
        return phase.share if phase else None

    def energy_per_item(self) -> tuple[str, float] | None:
        """(unit, joules) per item the run counts: img, patch, mvox, or a plug-in workload's own."""
        per_item = {**self.monitor.to_metrics(), **self.extra}
        return next(((k.removeprefix(ENERGY_PER), v) for k, v in per_item.items()
                     if k.startswith(ENERGY_PER) and k != ENERGY_PER + "step" and v is not None), None)

    def to_metrics(self) -> dict[str, Any]:
        """The stored form: the flat mapping that `read` reads back to an equal Measurement."""
        metrics: dict[str, Any] = dict(self.extra)
        for name in _GROUPS:
            metrics.update(getattr(self, name).to_metrics())
        for name, phase in self.phases.items():
            if phase.ms is not None:
                metrics[f"{name}_ms"] = phase.ms
            if phase.share is not None:
                metrics[f"{name}_share"] = phase.share
        if self.stats:
            metrics["stats"] = {name: s.to_metrics() for name, s in self.stats.items()}
        if self.profile is not None:
            metrics["profile"] = dict(self.profile)
        return metrics


def combine(*parts: Measurement) -> Measurement:
    """One Measurement of the parts' figures: each group's fields that are set, a later part's over
    an earlier's; phases, statistics, extra figures, traces and settled fields joined."""
    joined: dict[str, Any] = {}
    for f in dataclasses.fields(Measurement):
        values = [getattr(part, f.name) for part in parts]
        if f.name == "profile":
            joined[f.name] = next((v for v in reversed(values) if v is not None), None)
        elif isinstance(values[0], Group):
            fields = {k: v for group in values for k, v in vars(group).items() if v is not None}
            joined[f.name] = type(values[0])(**fields)
        else:
            joined[f.name] = {k: v for value in values for k, v in value.items()}
    return Measurement(**joined)


def energy_per(unit: str, joules: float) -> Measurement:
    """Joules per item of `unit`: the monitor's record holds img, patch and mvox; a plug-in's own
    unit rides in `extra`."""
    key = ENERGY_PER + unit
    if key in Monitor.keys():
        return Measurement(monitor=Monitor(**{key: joules}))
    return Measurement(extra={key: joules})


def with_nulls(measured: Measurement, group: str) -> Measurement:
    """`measured` with the unset fields of one of its groups stored as nulls (in `extra`), where the
    stored form has always said 'none' rather than left the figure out (converge's steps to target)."""
    record = getattr(measured, group)
    nulls = {key: None for name, key in record.keys().items() if getattr(record, name) is None}
    return dataclasses.replace(measured, extra={**nulls, **measured.extra})


# --- the shape of nested figures ----------------------------------------------------------------

class CpuProcess(TypedDict):
    """One entry of `cpu_other_top` (measure/host.py): another process that used the CPU."""
    pid: int
    cores: float
    command: str


class StoredNeighbour(TypedDict, total=False):
    """One entry of `gpu_neighbours` or of a rank's `neighbours` as stored, read as `GpuNeighbour`:
    `launcher` is a flag, or the launcher's command in a record of an earlier dlbench."""
    pid: int
    sm_share: float | None
    memory_gb: float | None
    command: str | None
    launcher: bool | str | None


class RankLine(TypedDict, total=False):
    """One entry of `ranks` (`Data.ranks`, workloads/pipeline.py), read as `RankPhases`."""
    rank: int
    steps: int
    step_ms: float
    throughput: float


# The nested figures that reports read entry by entry, and what each entry is read as. A stored value
# of another shape (a text where a list of mappings belongs) would stop the report that reads it.
NESTED: dict[str, Any] = {
    "cpu_other_top": list[CpuProcess], "gpu_neighbours": list[StoredNeighbour], "rank_gpus": list[RankGpu],
    "ranks": list[RankLine], "communication": Communication, "profile": ProfileSummary, "stats": dict[str, Stats],
    "throttle_reasons": list[str], "launcher_commands": list[str], "cpu_wait_threads": list[dict[str, Any]],
    "per_fold": list[dict[str, Any]], "block_probe": list[dict[str, Any]], "precision_check": list[dict[str, Any]],
    "gpu_facts": list[dict[str, Any]], "environment": dict[str, str],
}


def nested_problem(key: str, value: Any) -> str | None:
    """Why the metric `key` has not the shape its readers expect (`NESTED`), or None."""
    hint = NESTED.get(key)
    if hint is None or value is None or _fits(value, hint):
        return None
    return f"must be {_described(hint)}"


def _fits(value: Any, hint: Any) -> bool:
    """Whether a stored value has the shape of `hint` (a type, a typed record or a container of them)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(item, args[1]) for item in value.values())
    if hint is GpuNeighbour:  # a rank's neighbours, as stored
        hint = StoredNeighbour
    if dataclasses.is_dataclass(hint):  # read through `_known`, which leaves a None out: the default stands
        return isinstance(value, dict) and all(_fits(value[k], h) for k, h in _hints(hint).items()
                                               if value.get(k) is not None)
    if typing.is_typeddict(hint):  # read with `.get`: a key present must hold its type
        return isinstance(value, dict) and all(_fits(value[k], h) for k, h in _hints(hint).items() if k in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return type(value) is int
    return isinstance(value, hint)


@functools.cache  # every imported record is checked: resolve each record type's hints once
def _hints(record: type) -> dict[str, Any]:
    return typing.get_type_hints(record)


def _described(hint: Any) -> str:
    """The shape in words, for the line that refuses a record: 'a list of mappings (pid, cores, command)'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, dict):
        return ("a list of " if origin is list else "a mapping of ") + _plural(args[-1])
    return "a mapping" + _keys(hint)


def _plural(hint: Any) -> str:
    return {str: "texts", int: "numbers", float: "numbers"}.get(hint) or "mappings" + _keys(hint)


def _keys(record: Any) -> str:
    typed = isinstance(record, type) and (dataclasses.is_dataclass(record) or typing.is_typeddict(record))
    names = list(_hints(record)) if typed else []
    return f" ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})" if names else ""
