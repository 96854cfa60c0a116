"""Issue 18's HTML report on the CPU: legends beside the axes, never on the bars; box labels that
name what differs (not one CPU model on every box); short labels and a page of a few MB
whatever the store holds."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_result
from dlbench.report import plots
from dlbench.report.html import render_html
from test_html_browser import _results

CPU = {"host": "laptop", "gpus": [], "cpu": {"model": "Intel Xeon Platinum 8480+", "cores": 16}}


@pytest.fixture
def drawn(monkeypatch):
    """What every figure shows as the report saves it: its labels and where its legends and axes lie."""
    seen: list[dict] = []
    save = plots._svg

    def inspect(fig):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
        seen.append({
            "axes": [ax.get_window_extent(renderer) for ax in fig.axes],
            "legends": [legend.get_window_extent(renderer) for legend in legends],
            "ticks": [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()],
            "entries": [t.get_text() for legend in legends for t in legend.get_texts()],
        })
        return save(fig)

    monkeypatch.setattr(plots, "_svg", inspect)
    return seen


def _apart(a, b) -> bool:
    return a.x0 >= b.x1 or a.x1 <= b.x0 or a.y0 >= b.y1 or a.y1 <= b.y0


def _steps(ms: float, seed: int) -> list[float]:
    return list(np.random.default_rng(seed).normal(ms, ms * 0.03, 50) / 1e3)


def test_every_legend_lies_outside_every_axes(drawn):
    # Two systems: throughput, scaling, batch-sweep and GPU-trace figures each have a legend.
    crowded = [make_result(spec={"model": f"resnet{n}"}, metrics={"throughput": 1e3 + n}) for n in range(30)]
    assert plots.plots(_results() + crowded)
    legends = [(figure, box) for figure in drawn for box in figure["legends"]]
    assert len(legends) >= 4
    for figure, legend in legends:
        assert all(_apart(legend, ax) for ax in figure["axes"]), (legend, figure["axes"])


def test_box_labels_name_workload_and_shape_and_leave_the_one_cpu_to_the_caption(drawn):
    runs = [make_result(spec={"device": "cpu", "workload": w, "input_shape": s}, system=CPU, samples={"step": _steps(9, i)})
            for i, (w, s) in enumerate((("fwdbwd", [3, 224, 224]), ("fwdbwd", [3, 96, 96]), ("inference", [3, 96, 96])))]
    (plot,) = plots.latency_plots(runs)
    assert drawn[-1]["ticks"] == ["fwdbwd ResNet-50 b16 fp32 3x224x224", "fwdbwd ResNet-50 b16 fp32 3x96x96",
                                  "inference ResNet-50 b16 fp32 3x96x96"]
    assert "All on CPU: Intel Xeon Platinum 8480+ (16 cores)." in plot.caption
    gpu = make_result(samples={"step": _steps(1, 9)})
    (plot,) = plots.latency_plots(runs[:1] + [gpu])
    cpu, gpu = drawn[-1]["ticks"]
    assert cpu.startswith("CPU: Intel Xeon") and cpu.endswith(" b16 fp32") and len(cpu) == plots.LABEL_CHARS
    assert gpu == "NVIDIA H200: ResNet-50 b16 fp32" and "All on" not in plot.caption


def test_labels_are_short_and_the_page_small_whatever_the_store_holds(drawn):
    model = "Model-" + "x" * 294
    gpus = ("NVIDIA H200", "GPU-" + "g" * 296)
    results = [make_result(title=model, spec={"batch": 8 * (1 + i % 3)}, tag=f"{i:02d}-" + "t" * 100_000,
                           system={"gpus": [{"name": gpus[i % 2]}]}, samples={"step": _steps(10, i)},
                           metrics={"throughput": 1e3 + i, "ceiling_fraction": 0.5, "achieved_tflops": 100.0})
               for i in range(50)]
    page = render_html(results)
    assert len(page.encode()) < 3_000_000
    labels = [text.replace(r"\$", "$") for figure in drawn for text in figure["ticks"] + figure["entries"]]
    assert len(drawn) >= 3 and labels
    assert max(map(len, labels)) <= plots.LABEL_CHARS and any("…" in text for text in labels)
    assert "Model-xxx" in page and "t" * 100 not in page


def test_shorten_keeps_both_ends():
    assert plots.shorten("short") == "short"
    text = plots.shorten("ResNet-50 " + "x" * 100 + " b16 fp32")
    assert len(text) == plots.LABEL_CHARS and text.startswith("ResNet-50 x") and text.endswith("b16 fp32")
