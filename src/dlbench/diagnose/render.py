"""The diagnoses as the doctor shows them: text (one block a run, escaped like the report's Markdown)
and JSON (`--format json`: each diagnosis with its comparison and causes).
"""

from __future__ import annotations

import math
from typing import Any

from dlbench.diagnose.check import Cause
from dlbench.diagnose.gpu import NEIGHBOUR
from dlbench.diagnose.history import Against, against_text
from dlbench.diagnose.inputs import InputCost
from dlbench.diagnose.references import Reference
from dlbench.diagnose.verdict import AS_EXPECTED, SCALING_OK, Diagnosis, verdict
from dlbench.figures import ODD, ODD_LEGEND, fixed, ms, percent, sig
from dlbench.report.markdown import line
from dlbench.report.parts import on_gpu
from dlbench.system.records import machine_key


def _fmt(value: float) -> str:
    return sig(value, grouping=True)


def _figure(value: float, unit: str) -> str:
    return ms(value) if unit.startswith("ms") else _fmt(value)


def _headline(d: Diagnosis) -> str:
    if d.actual is None:
        return "no throughput recorded"
    measured = f"measured {_figure(d.actual, d.unit)} {d.unit}"
    if d.expected is None:
        if d.not_comparable:
            return f"{measured}; not comparable with the published figures: {d.not_comparable}"
        return f"{measured}; {d.reason or 'no reference'}"
    ratio = d.ratio or 0.0
    if ratio >= AS_EXPECTED:
        judged = "as expected" if ratio <= 1.25 else f"{fixed(ratio, 2)}x faster than expected"
    else:
        judged = f"{fixed(1 / ratio, 1)}x slower than it should be ({percent(ratio)} of expected)"
    return f"{measured}, expected {_figure(d.expected, d.unit)} {d.unit}: {judged}"


def _history_line(d: Diagnosis) -> list[str]:
    lines = []
    if d.history is not None:
        lines.append(f"against this machine's other runs of this configuration: {against_text(d.history)}")
    if d.one_gpu is not None:
        lines.append(f"against one GPU: {against_text(d.one_gpu)}"
                     + (" (below " + fixed(SCALING_OK, 2) + ")" if d.one_gpu.ratio < SCALING_OK else ""))
    if d.synthetic is not None:
        lines.append(f"against synthetic data: {against_text(d.synthetic)}{_input_cost(d.input_cost)}")
    return lines


def _input_cost(c: InputCost | None) -> str:
    """'; its step is A ms longer: B ms waiting for data, C ms (S of its step) more work on the GPU: ...'."""
    if c is None:
        return ""
    text = f"; its step is {ms(c.longer * 1e3)} ms longer: {ms(c.data * 1e3)} ms waiting for data"
    if c.rest is None:
        return text
    if c.gpu_work is None:
        return text + f", {ms(c.rest * 1e3)} ms more in the step itself (the loader's workers share the cores)"
    return text + f", {ms(c.rest * 1e3)} ms ({percent(c.rest / c.step)} of its step) more work on the GPU: {c.gpu_work}"


def _reference_value(ref: Reference) -> str:
    if ref.metric == "step_s":
        return f"{ms(ref.value * 1e3)} ms/step"
    return f"{_fmt(ref.value)} {ref.unit}"


def _cause_line(c: Cause) -> str:
    if c.share is None:
        return f"- {c.name}: {c.evidence}"
    took = f"{percent(c.share)} of the step"
    if c.explains is not None:
        took += f", {percent(c.explains)} of the time lost"
    return f"- {c.name} ({took}): {c.evidence}"


def _title(d: Diagnosis) -> str:
    r = d.result
    host, label = machine_key(r)
    setup = r.setup
    where = (f" x{setup.gpus} GPUs" if on_gpu(r) else f" x{setup.gpus} processes") if setup.gpus > 1 else ""
    level = f" {r.optimize}" if r.optimize != "eager" else ""
    tag = f", tag {r.tag}" if r.tag else ""
    batch = ODD if "spec.batch" in r.odd else setup.batch
    return (f"## {r.workload} {r.model} b{batch} {setup.precision}{level}{where} on {label} "
            f"({host}): run {r.id[:8]} ({r.started[:16].replace('T', ' ')}{tag})")


def render(diagnoses: list[Diagnosis]) -> str:
    # Hosts, GPU names, paths and sources come from results (imported ones too): escaped like the
    # report's Markdown, so no line breaks apart or renders a link.
    return "\n\n".join("\n".join(map(line, _lines(d))) for d in diagnoses)


def _lines(d: Diagnosis) -> list[str]:
    r = d.result
    lines = [_title(d), f"{_headline(d)}; verdict: {verdict(d)}"]
    if r.odd:
        lines.append(f"note: {ODD_LEGEND}: {', '.join(r.odd)} of record {r.id[:8]}")
    lines += _history_line(d)
    if d.reference:
        ref = d.reference
        lines.append(f"reference: {ref.gpu}, {_reference_value(ref)} ({ref.source}); scaled by {d.scaling}")
    if d.utilisation:
        lines.append(f"FLOP utilisation: {sig(r.measured.utilisation.achieved_tflops)} TFLOP/s, {d.utilisation}")
    return lines + _cause_lines(d) + [f"note: {h}" for h in d.hints]


def _cause_lines(d: Diagnosis) -> list[str]:
    """The causes, the machine's conditions and where the step goes."""
    lines = []
    if d.causes:
        lines.append("causes, largest first (share of the step" +
                     ("; of the time lost against the comparison):" if d.baseline else "):"))
        lines += [_cause_line(c) for c in d.causes]
    elif verdict(d) in ("below the reference",):
        lines.append("no cause found in the recorded evidence")
    if d.machine:
        lines.append("about the machine (no share of the step measured):")
        lines += [_cause_line(c) for c in d.machine]
    if d.breakdown:
        beside = any(c.kind is NEIGHBOUR for c in d.causes)
        lines.append("where the step goes (--profile" + ("; measured beside another process on the GPU, "
                     "so each class runs slower than alone):" if beside else "):"))
        lines += [f"- {name}: {evidence}" for name, evidence in d.breakdown]
    return lines


def _against_json(a: Against | None) -> dict[str, Any] | None:
    if a is None:
        return None
    spread = a.spread if a.between_runs else None
    return {"kind": a.kind, "run": a.other.id, "started": a.other.started, "tag": a.other.tag, "ratio": a.ratio,
            "low": a.low, "high": a.high, "beyond_noise": a.beyond_noise,
            "sets": None if spread is None or a.sets is None else {
                "ratio": a.sets.value, "low": a.sets.low, "high": a.sets.high, "runs": list(a.sets.runs),
                "level": a.sets.level},
            "between_runs": None if spread is None else {
                "runs": spread.n, "low": spread.low, "high": spread.high, "median": spread.median, "cv": spread.cv,
                "unit": spread.unit, "band": spread.band(), "place": a.place}}


def to_json(diagnoses: list[Diagnosis]) -> dict[str, Any]:
    """The diagnoses as data: what was judged, against what, and the causes in order."""
    out = []
    for d in diagnoses:
        r = d.result
        comparison = _against_json(d.baseline or d.history or d.one_gpu)
        if comparison is None and d.expected is not None and d.reference is not None:
            comparison = {"kind": "reference", "source": d.reference.source, "gpu": d.reference.gpu,
                          "expected": d.expected, "ratio": d.ratio, "scaled_by": d.scaling}
        out.append({
            "result": r.id, "tag": r.tag, "started": r.started, "workload": r.workload, "model": r.model,
            "host": machine_key(r)[0], "device": machine_key(r)[1], "gpus": r.setup.gpus,
            "figure": {"value": d.actual, "unit": d.unit}, "verdict": verdict(d), "comparison": comparison,
            "history": _against_json(d.history), "one_gpu": _against_json(d.one_gpu),
            "synthetic": _against_json(d.synthetic),
            "causes": [{"name": c.name, "share_of_step": c.share, "share_of_lost": c.explains,
                        "seconds_per_step": c.seconds, "evidence": c.evidence} for c in d.causes],
            "about_the_machine": [{"name": c.name, "evidence": c.evidence} for c in d.machine],
            "breakdown": [{"name": name, "evidence": evidence} for name, evidence in d.breakdown],
            "notes": d.hints,
        })
    return _plain({"format": "dlbench-doctor", "diagnoses": out})


def _plain(value: Any) -> Any:
    """JSON's own values: a figure that is no finite number (an odd stored value) becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


NOTHING_TO_DIAGNOSE = (
    "No benchmark results in the store yet. Run first:\n"
    "  dlbench system                            # measure this machine's ceilings\n"
    "  dlbench                                   # the quick suite (or: dlbench run fwdbwd --model resnet50)\n"
    "then `dlbench doctor` again."
)
