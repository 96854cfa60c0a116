"""One flat JSON object per result, in the terms users of other benchmark tools expect
(timm's `--results-file`, optimum-benchmark): throughput, step time and its percentiles,
batch, shape, precision, parameters, FLOPs, peak memory and the system."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlbench.errors import UserError
from dlbench.paths import write_failure
from dlbench.results.stats import summarize
from dlbench.results.measurement import Measurement
from dlbench.results.record import Result

_SPEC = ("workload", "model", "batch", "input_shape", "precision", "channels_last", "optimize", "gpus")


def _measured(m: Measurement) -> dict[str, Any]:
    return {"throughput": m.throughput.value, "throughput_unit": m.throughput.unit,
            "parameters": m.utilisation.parameters, "flops_per_step": m.utilisation.flops_per_step,
            "achieved_tflops": m.utilisation.achieved_tflops, "peak_memory_mb": m.monitor.peak_memory_mb,
            "peak_host_rss_mb": m.monitor.peak_host_rss_mb, "device": m.run.device}


def summary(result: Result) -> dict[str, Any]:
    machine, m = result.machine, result.measured
    row: dict[str, Any] = {"id": result.id, "started": result.started, "status": result.status,
                           **{key: result.spec.get(key) for key in _SPEC},
                           **_measured(m)}
    row["input_shape"] = m.data.input_shape or row["input_shape"]
    samples = result.samples if isinstance(result.samples, dict) else {}
    # fwdbwd's step is forward + backward (the cnn-benchmarks method), as its one-line result says
    steps = samples.get("total") or samples.get("step")
    if steps:
        stats = summarize(steps)
        row.update({f"step_ms_{k}": stats[k] * 1e3 for k in ("median", "mean", "p50", "p90", "p95", "p99")})
        row["steps"] = stats["n"]
    row["system"] = {"label": result.system_label, "gpu": machine.gpus[0].name or None if machine.gpus else None,
                     "gpu_count": machine.gpu_count, "driver": machine.driver, "cuda": machine.cuda,
                     "torch": machine.torch, "cpu": machine.cpu.model, "host": machine.host or None}
    row.update({"suite": result.suite, "tag": result.tag, "error": result.error})
    return row


class ResultsFile:
    """Result summaries written to a file as each run ends: one object per line for `.jsonl`;
    for `.json` one JSON document (an object for a single run, a list for a list of batches or
    a sweep, as timm's `--results-file` does for one model or many), rewritten after every run
    so that the file is valid JSON whenever the command stops.

    The file is opened first, so a path that cannot be written fails before any run; an
    existing file is only replaced once there is a result to put in it."""

    def __init__(self, path: Path, several: bool) -> None:
        self.path, self.several, self.rows = path, several, []
        self.document = path.suffix.lower() == ".json"
        self.created = not path.exists()
        try:
            self.file = open(path, "a", encoding="utf-8")  # append: an error before the first run loses nothing
        except OSError as error:
            raise UserError(f"cannot write {path}: {error.strerror or error}") from None

    def write(self, result: Result) -> None:
        """Adds the result (stored already: a file that cannot take it loses it from the file only)."""
        self.rows.append(summary(result))
        try:
            if self.document:
                self.file.truncate(0)
                self.file.write(json.dumps(self.rows if self.several else self.rows[-1], indent=2) + "\n")
            else:
                if len(self.rows) == 1:
                    self.file.truncate(0)
                self.file.write(json.dumps(self.rows[-1]) + "\n")
            self.file.flush()
        except OSError as error:
            raise UserError(f"cannot write results file {write_failure(self.path, error)}; the result is in the "
                            f"store (dlbench export writes it again)") from None

    def close(self) -> bool:
        """Closes the file; whether it holds results (an unused new file is removed)."""
        try:
            self.file.close()
        except OSError:  # what a failed write left in the buffer, said by `write` already
            pass
        if not self.rows and self.created:
            self.path.unlink(missing_ok=True)
        return bool(self.rows)
