"""How much does dlbench's `train` cost over a plain PyTorch loop, how fast are its input pipelines,
and where does its step's time go?

Side by side on one GPU (ResNet-50, bf16 autocast, channels-last):

  1. a plain hand-written training loop on synthetic data (random tensors on the GPU); with
     --optimize compile or max the same loop around torch.compile(model) (default mode)
  2. dlbench `train` on synthetic data at --optimize    target: >= 0.98 x (1)
  3. dlbench `train` on a JPEG folder, --decode gpu, once per --cpu-shares   target: >= 0.90 x (2)
  4. dlbench `train` on a JPEG folder, CPU decoding (left out by --decodes gpu): shows the
     data-wait share when the CPU is the bottleneck

--env-variants adds runs after the others with environment settings, of (2), or of (3) where
the name starts with "folder": "cudnn all=DLBENCH_CUDNN_BENCHMARK_LIMIT=0;folder, low=VAR=0 VAR2=a,b".
At --optimize other than eager (or with --isolate) every dlbench run has a process of its own,
as `dlbench run` runs it. --profile N runs N more steps of each dlbench run under the profiler
and prints the split of its step (docs/profile.md), the GPU's clock, power and throttle reasons
beside it. The JPEG folder (ImageNet-like, ~500x375, ~100 KB) is written to a temporary
directory first unless --data-dir names one. --budget: runs that would start after that many
seconds are skipped and listed; --json writes every run's figures after each run; --db stores
the results (`dlbench doctor`, `dlbench export`). Prints a table at the end. --kernel-bytes TRACE
runs nothing: it reads a compiled step's trace and Inductor's generated code and prints the bytes
its Triton kernels move against the copy ceiling.

    python benchmarks/train_overhead.py [--images 20000] [--batch 256] [--workers 8]
    python benchmarks/train_overhead.py --optimize max --profile 5 --decodes gpu --cpu-shares 0,0.25
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from runs import resnet50_result
from dlbench.data.generate import generate
from dlbench.launch.environment import prepare
from dlbench.measure.kernels import LABELS
from dlbench.paths import cache_folder
from dlbench.results.store import Store
from dlbench.workloads.optimize import COMPILED, LEVELS
from plain import mean_seconds, resnet50_train_step

START = time.perf_counter()
MONITOR = ("sm_clock_mean_mhz", "sm_clock_min_mhz", "power_mean_w", "power_max_w", "throttled_share",
           "throttle_reasons")
KEPT = ("throughput", "data_share", "data_ms", "h2d_ms", "forward_ms", "backward_ms", "optimizer_ms", "data_host_ms",
        "compile_s", "cuda_max_connections", "profile", *MONITOR)


def plain_loop(batch: int, steps: int, warmup: int, dtype: torch.dtype, compiled: bool = False) -> float:
    """The loop a user would write: img/s over `steps` timed steps after `warmup` ones (compilation among them)."""
    ips = batch / mean_seconds(resnet50_train_step(batch, dtype, compiled=compiled), warmup, steps)
    torch.cuda.empty_cache()
    return ips


class Runs:
    """The runs of this call: each one's figures, kept in --json after every run, results in --db."""

    def __init__(self, args) -> None:
        self.args, self.rows, self.results = args, [], {}

    def due(self, name: str) -> bool:
        if not self.args.budget or time.perf_counter() - START < self.args.budget:
            return True
        self.add(name, None, note="skipped: time budget spent")
        return False

    def add(self, name: str, ips: float | None, metrics: dict | None = None, note: str = "") -> None:
        metrics = metrics or {}
        self.rows.append({"run": name, "img_s": ips, "note": note, "at_s": round(time.perf_counter() - START, 1),
                          **{k: metrics[k] for k in KEPT if k in metrics}})
        print(f"[{time.perf_counter() - START:5.0f} s] {name}: " + (f"{ips:,.0f} img/s" if ips else "-") +
              (f" ({note})" if note else ""), file=sys.stderr, flush=True)
        if self.args.json:
            self.args.json.write_text(json.dumps(self.rows, indent=1, default=str))

    def dlbench(self, name: str, options: dict, environment: dict | None = None, trace: Path | None = None):
        """One dlbench run; its metrics, or None if it did not end ok (the row says why)."""
        if not self.due(name):
            return None
        a = self.args
        with environ(environment or {}):
            result = resnet50_result(a.steps, options, batch=a.batch, warmup=a.warmup, precision=a.precision,
                                     optimize=a.optimize, profile=a.profile,
                                     profile_trace=str(trace) if trace else None,
                                     isolate=a.isolate or a.optimize != "eager", timeout=a.run_timeout)
        if a.db:
            with Store(a.db) as store:
                store.add(result)
        if result.status != "ok":
            self.add(name, None, note=f"{result.status}: {(result.error or '')[:300]}")
            return None
        self.results[name] = result.metrics
        self.add(name, result.metrics["throughput"], result.metrics)
        return result.metrics


@contextlib.contextmanager
def environ(settings: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def env_variants(text: str) -> list[tuple[str, dict[str, str]]]:
    """ "name=VAR=VALUE VAR2=VALUE;name2=..." -> [(name, {VAR: VALUE, ...}), ...]"""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, settings = part.partition("=")
        out.append((name.strip(), dict(kv.split("=", 1) for kv in settings.split())))
    return out


def split_lines(name: str, m: dict) -> list[str]:
    """The profile's split of one run's step, and the GPU's clock and power over its measured window."""
    lines = [f"{name}: clock {_num(m.get('sm_clock_mean_mhz'))} MHz mean, {_num(m.get('sm_clock_min_mhz'))} min; power "
             f"{_num(m.get('power_mean_w'))} W mean, {_num(m.get('power_max_w'))} max; throttled "
             f"{_num(m.get('throttled_share'), '.0%')} of readings {m.get('throttle_reasons') or ''}"]
    p = m.get("profile") or {}
    if not p:
        return lines
    if p.get("error"):
        return lines + [f"  profile failed: {p['error']}"]
    measured = p.get("measured_step_s") or 0.0
    lines.append(f"  measured step {measured * 1e3:.2f} ms; profiled {p['step_s'] * 1e3:.2f} ms, classes add to "
                 f"{_num(p.get('coverage'), '.1%')} of the measured step {p.get('note') or ''}")
    ranked = sorted(p["classes"].items(), key=lambda kv: -kv[1].get("share", 0.0))
    for cls, c in ranked:
        rate = ""
        if c.get("flop_s"):
            rate = f", {c['flop_s'] / 1e12:.0f} TFLOP/s over {c['flops'] / 1e12:.2f} TFLOP"
        elif c.get("bytes_s"):
            rate = f", {c['bytes_s'] / 1e12:.2f} TB/s over {c['bytes'] / 1e9:.1f} GB"
        lines.append(f"    {LABELS.get(cls, cls):40s} {c['share']:6.1%} {c['seconds'] * 1e3:7.2f} ms "
                     f"(kernels {c['kernel_seconds'] * 1e3:.2f} ms{rate})")
    for k in p.get("top_kernels", [])[:6]:
        lines.append(f"      {k['share']:5.1%} {k['seconds'] * 1e3:6.2f} ms x{k.get('calls', 0):.0f} {k['class']:11s} "
                     f"{k['name'][:90]}")
    return lines


def _num(value, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


# ---- bytes moved by the compiled step's Triton kernels (offline: a trace and Inductor's code) ----

ITEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "i1": 1, "i8": 1, "u8": 1, "i16": 2, "i32": 4, "i64": 8}
TRITON_MODULE = re.compile(r"^(\w+) = async_compile\.triton\('(\w+)', '{3}(.*?)'{3}, device_str='cuda'\)", re.S | re.M)


def kernel_bytes(trace: Path, inductor: Path, steps: int = 2, ceiling_gbs: float | None = None) -> None:
    """The split of the trace's recorded step (`--profile-trace`: on a GPU a warm step and the
    recorded one, `steps`), then each Triton kernel beside the bytes its arguments hold, read from Inductor's generated modules under
    `inductor` (the wrapper's buffers and inputs, their element types from the kernel's signature;
    an in-place buffer counts read and written): every argument read or written once, as
    Inductor's own estimate counts them. Prints the time, bytes and rate of all of them, and the
    kernels furthest from `ceiling_gbs` (a copy rate)."""
    import gzip

    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as f:
        recorded = json.load(f)
    events = [e for e in recorded["traceEvents"] if e.get("cat") == "kernel"]
    print_split(recorded)
    # Kernel names repeat across compiled graphs: take the modules that name most of the trace's
    # kernels first (the step's forward and backward), then others for what is left.
    modules = []
    for path in inductor.rglob("*.py"):
        text = path.read_text(errors="replace")
        if "def call(" in text and "async_compile.triton(" in text:
            modules.append(_module_bytes(text))
    sizes: dict[str, list[int]] = {}
    left = {e["name"] for e in events if e["name"].startswith("triton_")}
    while left and modules:
        best = max(modules, key=lambda m: len(left & m.keys()))
        if not left & best.keys():
            break
        sizes.update({name: best[name] for name in left & best.keys()})
        left -= best.keys()
        modules.remove(best)
    time_us: dict[str, float] = {}
    calls: dict[str, float] = {}
    for e in events:
        time_us[e["name"]] = time_us.get(e["name"], 0.0) + e["dur"] / steps
        calls[e["name"]] = calls.get(e["name"], 0.0) + 1 / steps
    rows, missing = [], []
    for name, us in time_us.items():
        if name.startswith("triton_"):
            if name in sizes:
                rows.append((name, us, calls[name] * sum(sizes[name]) / len(sizes[name])))
            else:
                missing.append(name)
    print(f"Triton kernels of one step: {len(rows)} kinds, {sum(calls[r[0]] for r in rows):.0f} launches"
          + (f" ({len(missing)} kinds without code found)" if missing else ""))
    for kind, prefix in (("all", "triton_"), ("pointwise", "triton_poi"), ("reductions", ("triton_red", "triton_per")),
                         ("templates", "triton_tem")):
        chosen = [r for r in rows if r[0].startswith(prefix)]
        us, moved = sum(r[1] for r in chosen), sum(r[2] for r in chosen)
        if us:
            at = f", {moved / ceiling_gbs / 1e6:.2f} ms at {ceiling_gbs:,.0f} GB/s" if ceiling_gbs else ""
            print(f"  {kind:10s} {us / 1e3:6.2f} ms {moved / 1e9:6.1f} GB {moved / us / 1e6:5.2f} TB/s{at}")
    if ceiling_gbs:
        print(f"  furthest from {ceiling_gbs:,.0f} GB/s (ms lost, ms, GB, TB/s, launches, kernel):")
        for name, us, moved in sorted(rows, key=lambda r: -(r[1] - r[2] / ceiling_gbs / 1e3))[:10]:
            print(f"    {(us - moved / ceiling_gbs / 1e3) / 1e3:5.2f} {us / 1e3:5.2f} {moved / 1e9:6.3f} "
                  f"{moved / us / 1e6:5.2f} x{calls[name]:.0f} {name[:100]}")


def print_split(recorded: dict) -> None:
    """`--profile`'s split of the trace's recorded step (after the warm one and the pause between
    them, the longest gap in device activity), classified as dlbench classifies kernels now."""
    from dlbench.measure.trace import split_device

    activity = sorted((e for e in recorded["traceEvents"]
                       if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                      key=lambda e: e["ts"])
    end, pause = activity[0]["ts"] + activity[0]["dur"], (0.0, None)
    for e in activity[1:]:
        if e["ts"] - end > pause[0]:
            pause = (e["ts"] - end, e["ts"] - 1)
        end = max(end, e["ts"] + e["dur"])
    step, classes, _ = split_device({**recorded, "dlbench_start_us": pause[1]}, 1, True)
    print(f"the recorded step: {step * 1e3:.2f} ms")
    for cls, c in sorted(classes.items(), key=lambda kv: -kv[1]["seconds"]):
        if c["seconds"] or c["kernel_seconds"]:
            print(f"  {LABELS.get(cls, cls):40s} {c['seconds'] * 1e3:6.2f} ms {c['seconds'] / step:6.1%} "
                  f"(kernels {c['kernel_seconds'] * 1e3:.2f} ms)")


def _module_bytes(text: str) -> dict[str, list[int]]:
    """Bytes of the arguments of each launch of each Triton kernel of one Inductor wrapper module."""
    import ast

    signatures = {}
    for m in TRITON_MODULE.finditer(text):
        found = re.search(r"'signature': (\{.*?\})", m.group(3))
        if found:
            signatures[m.group(1)] = (m.group(2), ast.literal_eval(found.group(1)))
    shapes: dict[str, list[int]] = {}
    out: dict[str, list[int]] = {}

    def dims(listed: str) -> list[int]:
        return [int(x) for x in listed.split(",") if x.strip()]

    for line in text[text.index("def call("):].splitlines():
        for m in re.finditer(r"assert_size_stride\((\w+), \(([\d, ]*)\)", line):
            shapes[m.group(1)] = dims(m.group(2))
        m = re.match(r"\s*(\w+) = (?:empty_strided_cuda\(|reinterpret_tensor\(\w+, )\(([\d, ]*)\)", line)
        if m:
            shapes[m.group(1)] = dims(m.group(2))
        m = re.match(r"\s*(\w+) = (\w+); del \w+\s*# reuse", line)
        if m and m.group(2) in shapes:
            shapes[m.group(1)] = shapes[m.group(2)]
        m = re.match(r"\s+(\w+)\.run\((.*)\)\s*$", line)
        if not m or m.group(1) not in signatures:
            continue
        name, signature = signatures[m.group(1)]
        args = [a.strip() for a in re.split(r",\s*(?![^()]*\))", m.group(2))]
        moved = 0
        for (pointer, kind), arg in zip(signature.items(), args):
            if kind.startswith("*"):
                view = re.match(r"reinterpret_tensor\(\w+, \(([\d, ]*)\)", arg)
                count = 1
                for d in dims(view.group(1)) if view else shapes.get(arg, []):
                    count *= d
                moved += count * ITEM_BYTES.get(kind[1:], 4) * (2 if pointer.startswith("in_out_ptr") else 1)
        out.setdefault(name, []).append(moved)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20_000, help="JPEGs to generate (default 20000)")
    parser.add_argument("--data-dir", type=Path, help="use this JPEG folder instead of generating one")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per run (default 60)")
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--workers", type=int, default=8, help="DataLoader workers for the folder runs")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--rounds", type=int, default=2, help="plain/dlbench synthetic pairs, alternated (median)")
    parser.add_argument("--optimize", default="eager", choices=LEVELS, help="dlbench's level (default eager)")
    parser.add_argument("--isolate", action="store_true", help="dlbench runs in processes of their own at eager too")
    parser.add_argument("--profile", type=int, default=0, help="profiled steps after each dlbench run (default 0)")
    parser.add_argument("--profile-trace", type=Path, help="the synthetic run's detail trace (Chrome JSON)")
    parser.add_argument("--folder-trace", type=Path, help="the first --decode gpu run's detail trace")
    parser.add_argument("--variant-traces", type=Path, help="a folder for each --env-variants run's detail trace")
    parser.add_argument("--decodes", default="gpu,cpu", help="folder runs: gpu, cpu or both (default gpu,cpu)")
    parser.add_argument("--cpu-shares", default="0", help="--cpu-share of each --decode gpu run (default 0)")
    parser.add_argument("--env-variants", default="", help="more runs: 'name=VAR=VALUE VAR2=VALUE;name2=...'")
    parser.add_argument("--budget", type=float, default=0.0, help="seconds after which no run starts (0: none)")
    parser.add_argument("--run-timeout", type=float, default=None, help="seconds before an isolated run is stopped")
    parser.add_argument("--json", type=Path, help="write every run's figures here after each run")
    parser.add_argument("--db", type=Path, help="store the dlbench results here")
    parser.add_argument("--kernel-bytes", type=Path, metavar="TRACE",
                        help="no runs: the bytes the Triton kernels of this trace move, from Inductor's code in "
                             "--inductor-dir, against --copy-gbs")
    parser.add_argument("--inductor-dir", type=Path, help="Inductor's cache folder (dlbench's: <cache>/inductor)")
    parser.add_argument("--copy-gbs", type=float, help="the device copy ceiling, GB/s (`dlbench system`)")
    args = parser.parse_args()
    if args.kernel_bytes:
        return kernel_bytes(args.kernel_bytes, args.inductor_dir or Path(cache_folder("inductor")),
                            ceiling_gbs=args.copy_gbs)
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    compiled = args.optimize in COMPILED
    plain_name = "plain torch.compile loop" if compiled else "plain loop"
    runs = Runs(args)

    plain, ours, shares = [], [], []
    for i in range(args.rounds):  # alternate, so clock and thermal drift hit both alike
        which = f" (round {i + 1})" if args.rounds > 1 else ""
        if runs.due(f"{plain_name}, synthetic{which}"):
            plain.append(plain_loop(args.batch, args.steps, args.warmup, dtype, compiled))
            runs.add(f"{plain_name}, synthetic{which}", plain[-1])
        synthetic = runs.dlbench(f"dlbench train {args.optimize}, synthetic{which}", {},
                                 trace=args.profile_trace if i == 0 else None)
        if synthetic:
            ours.append(synthetic["throughput"])
            shares.append(synthetic["data_share"])
    plain_ips = statistics.median(plain) if plain else None
    synthetic_ips = statistics.median(ours) if ours else None

    decodes = [d.strip() for d in args.decodes.split(",") if d.strip()]
    folder_runs = []
    with tempfile.TemporaryDirectory(prefix="dlbench-jpegs-") as tmp:
        folder = args.data_dir
        if folder is None and decodes:
            folder = Path(tmp) / "images"
            start = time.perf_counter()
            summary = generate(folder, args.images, classes=100, workers=os.cpu_count())
            print(f"wrote {summary['images']} JPEGs ({summary['mean_kb']:.0f} KB on average) in "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
        common = dict(data=f"folder:{folder}", workers=args.workers)
        for decode in decodes:
            cpu_shares = [float(s) for s in args.cpu_shares.split(",")] if decode == "gpu" else [0.0]
            for share in cpu_shares:
                options = {**common, "decode": decode, **({"cpu_share": share} if share else {})}
                what = "--decode gpu" + (f" --cpu-share {share:g}" if share else "") if decode == "gpu" else \
                    f"CPU decode ({args.workers} workers)"
                name = f"dlbench train {args.optimize}, folder, {what}"
                trace = args.folder_trace if decode == "gpu" and not folder_runs else None
                metrics = runs.dlbench(name, options, trace=trace)
                if metrics:
                    folder_runs.append((name, decode, metrics))
        for name, settings in env_variants(args.env_variants):  # last: the runs above are the comparison
            trace = args.variant_traces / (re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-") + ".json") \
                if args.variant_traces else None
            if name.startswith("folder"):  # on the folder, --decode gpu at the first --cpu-shares
                share = float(args.cpu_shares.split(",")[0])
                options = {**common, "decode": "gpu", **({"cpu_share": share} if share else {})}
                metrics = runs.dlbench(f"dlbench train {args.optimize}, {name}", options, settings, trace)
                if metrics:
                    folder_runs.append((f"dlbench train {args.optimize}, {name}", "gpu", metrics))
            else:
                runs.dlbench(f"dlbench train {args.optimize}, synthetic, {name}", {}, settings, trace)

    rows = []
    if plain_ips:
        rows.append((f"{plain_name}, synthetic", plain_ips, "-", "-", ""))
    if synthetic_ips:
        ratio = synthetic_ips / plain_ips if plain_ips else None
        rows.append((f"dlbench train {args.optimize}, synthetic", synthetic_ips,
                     f"{ratio:.3f} x plain" if ratio else "-", f"{max(shares):.1%}",
                     _verdict(ratio >= 0.98, ">= 0.98 x plain") if ratio else ""))
    for name, m in runs.results.items():
        if ", synthetic, " in name:
            rows.append((name, m["throughput"], f"{m['throughput'] / synthetic_ips:.3f} x synthetic" if synthetic_ips
                         else "-", f"{m['data_share']:.1%}", ""))
    for name, decode, m in folder_runs:
        ratio = m["throughput"] / synthetic_ips if synthetic_ips else None
        if decode == "gpu":
            target = _verdict(ratio >= 0.9, ">= 0.90 x synthetic") if ratio else ""
        else:
            target = "data wait = 1 - throughput ratio" if m["data_share"] > 0.05 else ""
        rows.append((name, m["throughput"], f"{ratio:.3f} x synthetic" if ratio else "-", f"{m['data_share']:.1%}",
                     target))
    for row in runs.rows:
        if row["img_s"] is None:
            rows.append((row["run"], None, "-", "-", row["note"][:80]))
    print(f"\nResNet-50 training, {args.precision} autocast, channels-last, batch {args.batch}, --optimize "
          f"{args.optimize}, {torch.cuda.get_device_name()}, torch {torch.__version__}; plain/synthetic runs: "
          f"{', '.join(f'{v:.0f}' for v in plain)} / {', '.join(f'{v:.0f}' for v in ours)} img/s")
    header = ("run", "img/s", "ratio", "data wait share", "target")
    widths = [max(len(str(r[i])) if i != 1 else 8 for r in rows + [header]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for name, ips, ratio, share, target in rows:
        cells = (name, "-".rjust(8) if ips is None else f"{ips:8.0f}", ratio, share, target)
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))
    print()
    for name, m in runs.results.items():
        print(f"phases (ms, median) of {name}: data {m['data_ms']:.2f}, h2d {m['h2d_ms']:.2f}, forward "
              f"{m['forward_ms']:.2f}, backward {m['backward_ms']:.2f}, optimizer {m['optimizer_ms']:.2f}; "
              f"host blocked in next() {m.get('data_host_ms', 0):.2f}; compile {_num(m.get('compile_s'))} s")
        print("\n".join(split_lines(name, m)))


def _verdict(ok: bool, target: str) -> str:
    return f"{target}: {'met' if ok else 'MISSED'}"


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
