"""Finding a machine's ceilings among stored results, and FLOP utilisation against them.

Utilisation has one denominator wherever it is shown: the measured matmul ceiling for the
precision the run settled on, on the machine it ran on. `dlbench system` measures every
ceiling; a run whose machine has none for its precision measures that one matmul ceiling
itself (a second or two, after its timed window) and stores it as a `quick` system record,
which later runs reuse. The datasheet peak is the denominator only where no ceiling can be
measured (a CPU in half precision), and then it says so.
"""

from __future__ import annotations

from typing import Callable, Iterable

from dlbench.figures import percent, sig
from dlbench.results.measurement import Utilisation
from dlbench.results.record import Result, system_label
from dlbench.system.datasheet import lookup

SYSTEM_WORKLOAD = "system"
QUICK = "quick"  # spec key of a system record that holds one ceiling a run measured for itself
NEW_CEILING = "new_ceiling"  # traces key: the quick system record a worker measured, for its launcher to store
_PRECISION_CEILING = {"fp32": "matmul_fp32_tflops", "tf32": "matmul_tf32_tflops",
                      "fp16": "matmul_fp16_tflops", "bf16": "matmul_bf16_tflops", "fp8": "matmul_fp8_tflops"}

Measure = Callable[[str], "Result | None"]  # precision -> a quick system record, or None where none can be measured


def is_system_record(result: Result) -> bool:
    return result.workload == SYSTEM_WORKLOAD


def is_survey(result: Result) -> bool:
    """A `dlbench system` record (every ceiling, facts of the GPUs), not a run's quick one."""
    return is_system_record(result) and not result.spec.get(QUICK)


def machine_key(result: Result) -> tuple[str, str]:
    """(host, device label): the machine and the GPU (or CPU) a result ran on."""
    device = result.measured.run.device
    device = str(result.spec.get("device", "") if device is None else device)
    return result.machine.host, system_label(result.system, device)


def _on_machine(result: Result, candidates: Iterable[Result]) -> list[Result]:
    """The ok system records measured on `result`'s host and kind of device."""
    key = machine_key(result)
    return [r for r in candidates if is_system_record(r) and r.status == "ok" and machine_key(r) == key]


def ceilings_for(result: Result, candidates: Iterable[Result]) -> Result | None:
    """The newest `dlbench system` record measured on the same host and the same kind of device."""
    matching = [r for r in _on_machine(result, candidates) if is_survey(r)]
    return max(matching, key=lambda r: r.started) if matching else None


def ceiling_name(precision: str) -> str:
    return _PRECISION_CEILING.get(precision, "matmul_fp32_tflops")


def matmul_ceiling(result: Result, candidates: Iterable[Result]) -> tuple[float, Result] | None:
    """The measured matmul ceiling (TFLOP/s) for the precision `result` ran in, on its machine, and
    its record: the newest `dlbench system` survey that has it, else the newest quick one."""
    name = ceiling_name(result.setup.precision)
    found = [(value, r) for r in _on_machine(result, candidates)
             if (value := r.measured.system.measured(name)) is not None]
    if not found:
        return None
    value, best = max(found, key=lambda pair: (is_survey(pair[1]), pair[1].started))
    return float(value), best


def datasheet_tflops(result: Result) -> float | None:
    label = machine_key(result)[1]
    spec = lookup(label)
    return spec.peak_tflops(result.setup.precision) if spec else None


def utilisation(result: Result, candidates: Iterable[Result]) -> Utilisation:
    """Achieved TFLOP/s as a fraction of the measured ceiling (and of the datasheet peak) for the
    precision the result ran in. Empty where a figure is missing."""
    achieved = result.measured.utilisation.achieved_tflops
    if not achieved:
        return Utilisation()
    found = matmul_ceiling(result, candidates)
    ceiling, record = found if found is not None else (None, None)
    peak = datasheet_tflops(result)
    if ceiling is None and not peak:
        return Utilisation()
    return Utilisation(ceiling_precision=result.setup.precision, ceiling_tflops=ceiling,
                       ceiling_fraction=None if ceiling is None else achieved / ceiling,
                       ceiling_record=None if record is None else record.id,
                       datasheet_tflops=peak or None, datasheet_fraction=achieved / peak if peak else None)


def utilisation_text(u: Utilisation) -> str | None:
    """'16% of the measured bf16 matmul ceiling of 703 TFLOP/s': the same words in result lines,
    reports and doctor; the datasheet only where nothing was measured, named as such."""
    kind = f"{u.ceiling_precision} " if u.ceiling_precision else ""
    if isinstance(u.ceiling_fraction, (int, float)):
        value = f" of {sig(u.ceiling_tflops)} TFLOP/s" if u.ceiling_tflops else ""
        text = f"{percent(u.ceiling_fraction)} of the measured {kind}matmul ceiling{value}"
        if u.ceiling_fraction > 1.0:  # the run beat the ceiling: the ceiling is what is wrong
            text += (" (above it: that measurement was low, taken under load, at a lower clock or, on a CPU, "
                     "with torch.mm alone; `dlbench system` measures it again)")
        return text
    if isinstance(u.datasheet_fraction, (int, float)):
        return (f"{percent(u.datasheet_fraction)} of the datasheet {kind}peak of "
                f"{sig(u.datasheet_tflops)} TFLOP/s (no ceiling measured here)")
    return None


def annotate(result: Result, candidates: Iterable[Result], measure: Measure | None = None) -> Result | None:
    """Add utilisation metrics to a workload result (in place) from the stored ceilings. Where its
    machine has no measured ceiling for its precision, `measure` (given only in the process that
    measured the run) measures one; that new quick system record is returned, for storing."""
    if result.status != "ok" or is_system_record(result) or not result.measured.utilisation.achieved_tflops:
        return None
    known = list(candidates)
    new = None
    if measure is not None and matmul_ceiling(result, known) is None:
        new = measure(result.setup.precision)
        known += [new] if new is not None else []
    result.add(utilisation(result, known))
    return new


def here(records: Iterable[Result], system: dict) -> list[Result]:
    """The ok system records of `system`'s host: what a worker there needs to know of its ceilings."""
    host = system.get("host")
    return [r for r in records if is_system_record(r) and r.status == "ok" and r.machine.host == host]


def carried_ceiling(result: Result) -> Result | None:
    """The quick system record a worker measured and sent along in `result`'s traces (removed from them)."""
    data = result.traces.pop(NEW_CEILING, None) if isinstance(result.traces, dict) else None
    try:
        return Result.from_dict(data, strict=False) if isinstance(data, dict) else None
    except (KeyError, TypeError, ValueError):
        return None
