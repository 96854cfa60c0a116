"""Issues 18 and 32's HTML report on the CPU: legends beside the axes, never on the bars, and none
of one entry; box labels that name what differs (not one CPU model on every box, never
'[untagged]'); short labels and a page of a few MB whatever the store holds; plain tick numbers;
whiskers drawn as the caption says; scaling as efficiency from zero; cells that wrap only at spaces
in tables that scroll sideways."""

from __future__ import annotations

import re

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
            "xticks": [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() if t.get_text()],
            "fig": fig,
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


def test_box_labels_name_what_differs_and_leave_what_they_share_to_the_caption(drawn):
    runs = [make_result(spec={"device": "cpu", "workload": w, "input_shape": s}, system=CPU, samples={"step": _steps(9, i)})
            for i, (w, s) in enumerate((("fwdbwd", [3, 224, 224]), ("fwdbwd", [3, 96, 96]), ("inference", [3, 96, 96])))]
    (plot,) = plots.latency_plots(runs)
    assert drawn[-1]["ticks"] == ["fwdbwd 3x224x224", "fwdbwd 3x96x96", "inference 3x96x96"]
    assert "All runs: ResNet-50 b16 fp32 Synthetic (b: batch size)." in plot.caption
    assert "All on CPU: Intel Xeon Platinum 8480+ (16 cores)." in plot.caption
    gpu = make_result(samples={"step": _steps(1, 9)})
    (plot,) = plots.latency_plots(runs[:1] + [gpu])
    cpu, gpu = drawn[-1]["ticks"]
    # the system on a line of its own, nothing elided; the runs differ in nothing else: the model and its settings
    assert cpu == "CPU: Intel Xeon Platinum 8480+ (16\ncores)\nResNet-50 b16 fp32"
    assert gpu == "NVIDIA H200\nResNet-50 b16 fp32" and "All on" not in plot.caption


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
    lines = [line for text in labels for line in text.split("\n")]
    assert max(map(len, lines)) <= plots.LABEL_CHARS and any("…" in text for text in labels)
    assert max(text.count("\n") + 1 for text in labels) <= plots.LABEL_LINES
    assert "Model-xxx" in page and "t" * 300 not in page


def test_shorten_keeps_both_ends():
    assert plots.shorten("short") == "short"
    text = plots.shorten("ResNet-50 " + "x" * 100 + " b16 fp32")
    assert len(text) == plots.LABEL_CHARS and text.startswith("ResNet-50 x") and text.endswith("b16 fp32")


H100 = {"host": "gpu-node-17", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 2}


def _train3d(gpus: int, iters_per_min: float, tag: str | None = None):
    return make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1, "gpus": gpus, "precision": "bf16",
                             "input_shape": [1, 32, 256, 256], "options": {"data": "synthetic"}},
                       system=H100, tag=tag, metrics={"iters_per_min": iters_per_min, "world_size": gpus},
                       samples={"step": _steps(60e3 / iters_per_min, gpus)})


def test_the_step_time_axis_reads_plain_numbers_in_ms(drawn):
    cpu = make_result(spec={"device": "cpu"}, system=CPU, samples={"step": _steps(3000, 1)})
    (plot,) = plots.latency_plots([cpu, make_result(samples={"step": _steps(10, 2)})])
    ticks = drawn[-1]["xticks"]
    assert {"10", "100", "1,000"} <= set(ticks), ticks
    assert not any(re.search(r"[$^×]|times|mathdefault", t) for t in ticks), ticks
    assert drawn[-1]["fig"].axes[0].get_xlabel() == "step time (ms)"


def test_box_plots_draw_the_whiskers_the_caption_describes(drawn):
    steps = _steps(20, 3) + [0.5]  # one 500 ms stall: beyond p99, a dot, not a whisker's end
    (plot,) = plots.latency_plots([make_result(samples={"step": steps})])
    ms = np.asarray(steps) * 1e3
    low, high = np.percentile(ms, [1, 99])
    ax = drawn[-1]["fig"].axes[0]
    ends = sorted(x for line in ax.lines for x in line.get_xdata() if len(line.get_xdata()) == 2
                  and line.get_xdata()[0] != line.get_xdata()[1] and line.get_linestyle() != "None")  # whiskers
    q1, q3 = np.percentile(ms, [25, 75])
    assert ends[0] == ms[ms >= low].min() < q1 and ends[-1] == ms[ms <= high].max() > q3
    assert "whiskers reach the fastest and slowest steps within p1 to p99" in plot.caption
    assert "dots are the steps beyond" in plot.caption
    written = [t.get_text() for t in ax.texts]
    assert written == [f"median {plots.sig(np.median(ms))} ms, p99 {plots.sig(high)}"]  # which statistic, said


def test_a_legend_of_one_entry_is_left_out_and_the_caption_names_it(drawn):
    one = [make_result(spec={"model": m}, metrics={"throughput": 1e3}) for m in ("resnet18", "resnet50")]
    (plot,) = plots.throughput_plots(one)
    assert drawn[-1]["legends"] == [] and "All on NVIDIA H200." in plot.caption and "per system" not in plot.caption
    other = make_result(spec={"model": "resnet18"}, system={"gpus": [{"name": "NVIDIA A100"}]}, metrics={"throughput": 500})
    (plot,) = plots.throughput_plots(one + [other])
    assert sorted(drawn[-1]["entries"]) == ["NVIDIA A100", "NVIDIA H200"] and "per system" in plot.caption
    (plot,) = plots.scaling_plots([_train3d(1, 384.1), _train3d(2, 382.2)])
    assert drawn[-1]["legends"] == []
    assert "The line: 3D U-Net (aniso) (384 → 382 iters/min). All runs: train 3D U-Net (aniso) b1 bf16" in plot.caption


def test_scaling_is_drawn_as_efficiency_from_zero_with_perfect_marked(drawn):
    (plot,) = plots.scaling_plots([_train3d(1, 384.1), _train3d(2, 382.2, tag="scale"),
                                   make_result(metrics={"throughput": 1000.0}),
                                   make_result(spec={"gpus": 2}, metrics={"throughput": 1800.0})])
    ax = drawn[-1]["fig"].axes[0]
    bottom, top = ax.get_ylim()
    assert bottom == 0 and top > 1.0 and "scaling efficiency" in ax.get_ylabel()
    perfect = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(perfect) == 1 and set(perfect[0].get_ydata()) == {1.0}
    curves = {round(float(line.get_ydata()[-1]), 4) for line in ax.lines if line not in perfect}
    assert curves == {round(382.2 / 384.1, 4), 0.9}  # a 0.5% dip reads as one, not as a collapse
    assert drawn[-1]["xticks"] == ["1", "2"]
    assert sorted(drawn[-1]["entries"]) == [  # the system, what differs, the throughputs measured
        "NVIDIA H100 80GB HBM3: train 3D U-Net\n(aniso) b1 bf16 1x32x256x256 [scale]\n(384 → 382 iters/min)",
        "NVIDIA H200: fwdbwd ResNet-50 b16 fp32\n3x224x224 (1000 → 1800 img/s)"]


def test_no_label_or_page_says_untagged(drawn):
    runs = [make_result(tag=tag, samples={"step": _steps(10, i)}, metrics={"throughput": 1e3 + i})
            for i, tag in enumerate((None, "lent"))]
    page = render_html(runs)
    labels = [t for figure in drawn for t in figure["ticks"] + figure["entries"]]
    assert "[lent]" in labels and "untagged" not in page and not any("untagged" in t for t in labels)


def test_table_cells_wrap_only_at_spaces_and_wide_tables_scroll():
    synthetic = make_result(spec={"workload": "train", "options": {"data": "synthetic"}},
                            system={"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]})
    page = render_html([synthetic], with_references=True)
    assert "overflow-wrap: anywhere" not in page and "word-break: break-all" not in page
    assert re.search(r"\.scroll \{ overflow-x: auto;", page) and re.search(r"td \{ white-space: nowrap;", page)
    assert page.count('<div class="scroll"><table>') == page.count("<table>") > 1
    assert '<td class="l">Synthetic</td>' in page and '<td class="l">NVIDIA H100 80GB HBM3</td>' in page
    assert re.search(r'<td class="l wrap">[^<]{33,}</td>', page)  # a sentence wraps, at spaces only


def test_a_scaling_line_takes_its_own_tags_one_gpu_run_as_the_tables_do(drawn):
    clean, faulty = _train3d(1, 384.1, tag="clean"), _train3d(1, 200.0, tag="fault")
    faulty.started = clean.started + "z"  # the newer 1-GPU run, of another tag
    (plot,) = plots.scaling_plots([clean, faulty, _train3d(2, 382.2, tag="clean")])
    curves = [line.get_ydata() for line in drawn[-1]["fig"].axes[0].lines if line.get_linestyle() != "--"]
    assert [round(float(c[-1]), 4) for c in curves] == [round(382.2 / 384.1, 4)]
    (plot,) = plots.scaling_plots([clean, faulty, _train3d(2, 382.2, tag="scale")])  # no 1-GPU run of its own
    curves = [line.get_ydata() for line in drawn[-1]["fig"].axes[0].lines if line.get_linestyle() != "--"]
    assert [round(float(c[-1]), 4) for c in curves] == [round(382.2 / 200.0, 4)]  # the latest, as the table


def test_gpu_readings_are_drawn_from_zero(drawn):
    t = [0.1 * i for i in range(10)]
    run = make_result(traces={"monitor": {"t": t, "sm_clock_mhz": [1980 - 6 * (i % 2) for i in range(10)],
                                          "power_w": [690.0] * 10}})
    (plot,) = plots.trace_plots([run])
    axes = drawn[-1]["fig"].axes
    assert [ax.get_ylabel() for ax in axes] == ["SM clock (MHz)", "power (W)"]
    assert all(ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= max(ax.lines[0].get_ydata()) for ax in axes)


def test_a_volume_runs_step_times_say_what_their_fast_steps_are(drawn):
    volume = make_result(spec={"workload": "volume", "model": "unet3d"}, samples={"step": [0.5, 0.5, 0.2]})
    image = make_result(samples={"step": [0.05, 0.05, 0.06]})
    (plot,) = plots.latency_plots([volume, image])
    assert "the blocks cut short at the volume's edge are the fast steps" in plot.caption
    (plot,) = plots.latency_plots([image])
    assert "volume" not in plot.caption


def test_each_throughput_bar_carries_its_figure(drawn):
    gpu = make_result(metrics={"throughput": 4715.3})
    cpu = make_result(system={"gpus": [], "cpu": {"model": "Xeon", "cores": 32}}, spec={"device": "cpu"},
                      metrics={"throughput": 41.26})
    plots.throughput_plots([gpu, cpu])
    texts = {t.get_text() for t in drawn[-1]["fig"].axes[0].texts}
    assert texts == {"4715", "41.3"}
