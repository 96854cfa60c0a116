"""The HTML report in a real headless Chromium: it renders, every plot decodes, a screenshot is taken."""

import json
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from PIL import Image

from dlbench.report.html import render_html

from conftest import make_result

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PLOTS = {"throughput-fwdbwd", "scaling", "batch-sweep", "latency", "gpu-traces", "ceiling", "profile",
         "roofline-NVIDIA-H200"}
# Added to a copy of the page only: records whether each image decoded and whether the page is
# wider than the window (a figure or a long name pushing it sideways), for --dump-dom to show.
PROBE = """<script>window.addEventListener("load", () => { document.body.dataset.images = JSON.stringify(
  Array.from(document.images, i => [i.closest("figure").id, i.complete, i.naturalWidth, i.naturalHeight]));
  document.body.dataset.overflow = document.documentElement.scrollWidth - document.documentElement.clientWidth; });
</script>"""


def _results():
    rng = np.random.default_rng(0)
    out = []
    for gpu, ms in (("NVIDIA H200", 10.0), ("NVIDIA A100-SXM4-80GB", 24.0)):
        system = {"gpus": [{"name": gpu}], "host": gpu.split()[-1]}
        for batch in (8, 16, 32):
            step = ms * batch / 16
            t = list(np.arange(0, 5, 0.1))
            out.append(make_result(
                spec={"batch": batch}, system=system,
                metrics={"throughput": 1e3 * batch / step, "throughput_unit": "img/s", "total_ms": step,
                         "achieved_tflops": 400.0 * 10 / ms, "ceiling_fraction": 0.5 * 10 / ms},
                samples={"step": list(rng.normal(step, step * 0.03, 50) / 1e3)},
                traces={"monitor": {"available": True, "t": t, "sm_clock_mhz": [1980 - 5 * i for i in range(len(t))],
                                    "power_w": [600 + (i % 7) for i in range(len(t))], "throttle": [0] * len(t),
                                    "util": [99] * len(t), "temperature_c": [60 + i / 10 for i in range(len(t))]}}))
        for gpus in (2, 4, 8):
            out.append(make_result(spec={"gpus": gpus}, system=system,
                                   metrics={"throughput": 1.6e3 * gpus * 0.9 * 10 / ms}))
    out += _profiled({"gpus": [{"name": "NVIDIA H200"}], "host": "H200"})
    out.append(make_result(system={"gpus": [{"name": "<script>alert(1)</script>"}]}, status="oom"))
    # A run without NVML: its monitor trace says so and is skipped.
    out.append(make_result(spec={"model": "resnet18"}, traces={"monitor": {"available": False, "reason": "no NVML"}}))
    return out


def _profiled(system):
    """Two profiled runs (eager and CUDA graphs) and the machine's measured ceilings."""
    from test_profile import ceilings, profiled

    runs = [profiled(idle=0.4), profiled(optimize="graphs", idle=0.03)]
    for r in runs:
        r.system = system
        r.spec["model"] = "resnet18"
    record = ceilings()
    record.system = system
    return [*runs, record]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium(tmp_path):
    page = render_html(_results())
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    (tmp_path / "report.html").write_text(page, encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    shot = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1280,2400", f"--screenshot={shot}", "--dump-dom",
             probed.as_uri()],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "<h1>dlbench report</h1>" in dom and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    figures = set(re.findall(r'<figure class="plot" id="([^"]+)"', dom))
    assert figures == PLOTS
    images = json.loads(re.search(r'data-images="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    assert {figure for figure, *_ in images} == PLOTS
    for figure, complete, width, height in images:
        assert complete and width > 200 and height > 100, (figure, width, height)
    assert int(re.search(r'data-overflow="(-?\d+)"', dom).group(1)) <= 0  # no sideways scrolling
    with Image.open(shot) as picture:
        assert picture.size == (1280, 2400)
        colours = np.asarray(picture.convert("L")).std()
    assert colours > 10  # not a blank page


# Each table cell's line count as laid out: a short cell ('Synthetic', a device name) on one line,
# and how many tables are wider than their box (they scroll there, not the page).
CELLS = """<script>window.addEventListener("load", () => {
  const lines = td => { const r = document.createRange(); r.selectNodeContents(td);
    return new Set(Array.from(r.getClientRects(), x => Math.round(x.top))).size; };
  const cells = Array.from(document.querySelectorAll("td"));
  document.body.dataset.broken = JSON.stringify(cells.filter(td => !td.classList.contains("wrap") && lines(td) > 1)
    .map(td => td.textContent));
  document.body.dataset.cells = cells.length;
  document.body.dataset.scrolling = Array.from(document.querySelectorAll(".scroll"))
    .filter(d => d.scrollWidth > d.clientWidth).length;
  document.body.dataset.overflow = document.documentElement.scrollWidth - document.documentElement.clientWidth; });
</script>"""


def _laptop_results():
    """The page's hard cases: a CPU beside GPUs, synthetic data, a long device name, 2-GPU runs."""
    cpu = {"host": "laptop", "gpus": [], "cpu": {"model": "Intel(R) Xeon(R) CPU E5-2630 v3 @ 2.40GHz", "cores": 16}}
    h100 = {"host": "gpu-node-17", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 2}
    out = [make_result(spec={"device": "cpu"}, system=cpu, metrics={"device": "cpu", "total_ms": 1800.0})]
    for gpus in (1, 2):
        out.append(make_result(spec={"workload": "train", "batch": 256, "gpus": gpus, "precision": "bf16",
                                     "options": {"data": "synthetic", "workers": 8}}, system=h100,
                               metrics={"throughput": 2900.0 * gpus, "throughput_unit": "img/s", "world_size": gpus}))
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_at_laptop_width_no_cell_breaks_a_word_and_wide_tables_scroll_in_their_box(tmp_path):
    page = render_html(_results() + _laptop_results(), with_references=True)
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", CELLS + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1366,900", "--dump-dom", probed.as_uri()],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = {key: re.search(rf'data-{key}="([^"]*)"', proc.stdout).group(1).replace("&quot;", '"')
             for key in ("broken", "cells", "scrolling", "overflow")}
    assert int(found["cells"]) > 200
    assert json.loads(found["broken"]) == []  # 'Synthetic', 'NVIDIA H100 80GB HBM3' each on one line
    assert int(found["scrolling"]) >= 1  # the 16-19 column tables scroll in their own box...
    assert int(found["overflow"]) <= 0  # ...and never the page
