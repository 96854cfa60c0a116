"""Check `dlbench system` and the GPU monitor on a GPU (one H200: about 2 minutes).

1. Runs the `dlbench system` measurements (the same code as the command) and compares the
   matmul and copy ceilings with the reference H200 figures (bf16 756, tf32 401, fp32 51
   TFLOP/s; device copy 4.25 TB/s): they should agree within 5%.
2. Times a plain hand-written bf16 matmul loop (CUDA events, nothing from dlbench) in the
   same process, as a cross-check of dlbench's matmul ceiling.
3. Measures the monitor's overhead on a training step: fwdbwd ResNet-50, batch 256, bf16,
   with and without the NVML sampler, interleaved rounds; it must stay below 1%.

Prints a short table at the end. Example:
    python benchmarks/system_check.py
    python benchmarks/system_check.py --db h200.db   # also store the system record
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from dlbench.launch.environment import prepare

REFERENCE_H200 = {"matmul_bf16_tflops": 756.0, "matmul_tf32_tflops": 401.0, "matmul_fp32_tflops": 51.0,
                  "copy_gbs": 4250.0}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda:0", help="GPU to measure (default cuda:0)")
    p.add_argument("--rounds", type=int, default=10, help="interleaved monitor on/off rounds (default 10)")
    p.add_argument("--steps", type=int, default=15, help="measured steps per round (default 15)")
    p.add_argument("--batch", type=int, default=256, help="ResNet-50 batch for the overhead test (default 256)")
    p.add_argument("--db", default=None, help="store the system record in this dlbench database")
    p.add_argument("--skip-survey", action="store_true", help="only measure the monitor overhead")
    p.add_argument("--skip-monitor", action="store_true", help="only run the system measurements")
    return p.parse_args()


def survey(device: torch.device, db: str | None) -> dict[str, float]:
    from dlbench.report.system import ceilings_table
    from dlbench.report.tables import markdown
    from dlbench.system.info import fingerprint
    from dlbench.system.survey import survey as measure

    start = time.perf_counter()
    record = measure(fingerprint(), device,
                     progress=lambda stage, done, total: print(f"  [{done + 1}/{total}] {stage}", file=sys.stderr))
    print(f"dlbench system took {time.perf_counter() - start:.0f} s\n")
    print(markdown([ceilings_table(record)]))
    if db:
        from dlbench.results.store import Store

        with Store(db) as store:
            store.add(record)
        print(f"\nstored system record {record.id} in {db}")
    return {k: v for k, v in record.metrics.items() if isinstance(v, float)}


def plain_matmul_tflops(device: torch.device, n: int = 8192, iters: int = 50) -> float:
    """A hand-written bf16 matmul loop: the figure dlbench's ceiling should match."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        a @ b
    end.record()
    end.synchronize()
    return 2 * n**3 * iters / (begin.elapsed_time(end) / 1e3) / 1e12


def monitor_overhead(device: torch.device, rounds: int, steps: int, batch: int) -> tuple[float, float, float, int]:
    """(median step s with monitor, without, overhead share, readings per round)."""
    import torchvision

    from dlbench.measure.loop import run_steps

    model = torchvision.models.resnet50().to(device).train().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        grad = torch.randn_like(model(x))

    def step(timer) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        timer.mark("forward")
        out.backward(grad)
        timer.mark("backward")
        model.zero_grad(set_to_none=True)

    run_steps(step, device, warmup=10, warmup_seconds=2.0, steps=1, min_seconds=0.0, flops=False, monitor=False)
    on, off, readings = [], [], []
    for i in range(rounds):
        for monitored in ((True, False) if i % 2 == 0 else (False, True)):  # alternate which goes first
            m = run_steps(step, device, warmup=2, warmup_seconds=0.0, steps=steps, min_seconds=0.0,
                          flops=False, monitor=monitored)
            (on if monitored else off).append(statistics.median(m.samples["step"]))
            if monitored and m.monitor is not None:
                readings.append(len(m.monitor.readings))
    with_monitor, without = statistics.median(on), statistics.median(off)
    return with_monitor, without, with_monitor / without - 1, int(statistics.median(readings or [0]))


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("system_check.py needs a CUDA GPU")
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device)
    rows: list[tuple[str, str, str, str]] = []
    if not args.skip_survey:
        measured = survey(device, args.db)
        for key, ref in REFERENCE_H200.items():
            value = measured.get(key)
            if value is None:
                rows.append((key, "not measured", f"{ref:,.0f}", "-"))
                continue
            diff = value / ref - 1
            verdict = "ok" if abs(diff) <= 0.05 else "OFF BY MORE THAN 5%"
            rows.append((key, f"{value:,.1f}", f"{ref:,.0f}", f"{diff:+.1%} {verdict}"))
        plain = plain_matmul_tflops(device)
        dl = measured.get("matmul_bf16_tflops")
        rows.append(("plain bf16 matmul loop n=8192 (TFLOP/s)", f"{plain:,.1f}", f"dlbench {dl:,.1f}" if dl else "-",
                     f"{plain / dl - 1:+.1%}" if dl else "-"))
    if not args.skip_monitor:
        on, off, overhead, readings = monitor_overhead(device, args.rounds, args.steps, args.batch)
        verdict = "ok" if overhead < 0.01 else "ABOVE 1%"
        rows.append((f"resnet50 b{args.batch} bf16 step, monitor on vs off (ms)", f"{on * 1e3:.2f}",
                     f"{off * 1e3:.2f}", f"{overhead:+.2%} {verdict} ({readings} readings/round)"))
    print(f"\n## system_check on {name}, torch {torch.__version__}\n")
    print("|check|measured|reference|difference|")
    print("|---|---:|---:|---|")
    for row in rows:
        print("|" + "|".join(row) + "|")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
