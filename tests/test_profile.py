"""--profile: the classifier on recorded traces (a real CPU profiler trace, a GPU-style Kineto trace
written by hand), the interval arithmetic, the doctor's sentences and the report's SVGs."""

import json

import pytest
import torch

from conftest import assert_user_error, cli, make_result, scripted
from dlbench.diagnose import breakdown
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.render import render
from dlbench.measure import kernels, trace as tr
from dlbench.measure import profile as prof
from dlbench.measure.intervals import exclusive_time, union_length
from dlbench.measure.loop import run_steps
from dlbench.report import profile as placing
from dlbench.report.plots import profile_plots, roofline_plots
from dlbench.results.record import Result

# ---- interval arithmetic ------------------------------------------------------------------


def test_union_counts_overlaps_once():
    assert union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.8)]) == 4.0
    assert union_length([]) == 0.0


def test_exclusive_time_gives_each_instant_to_the_highest_priority():
    # compute (priority 1) hides the copy it overlaps; the copy keeps only what sticks out
    assert exclusive_time([(0, 10, 1, "mm"), (5, 15, 0, "copy")]) == {"mm": 10.0, "copy": 5.0}
    # nested host operators with priority = start: each keeps its own (self) time
    assert exclusive_time([(0, 10, 0, "outer"), (2, 4, 2, "inner"), (6, 7, 6, "leaf")]) == \
        {"outer": 7.0, "inner": 2.0, "leaf": 1.0}


# ---- the classifier -------------------------------------------------------------------------

@pytest.mark.parametrize("name, likely, cls", [
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1", False,
     "tensor_core"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", False, "tensor_core"),
    ("cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4", False, "tensor_core"),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x128x8", True, "matmul"),
    ("implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>", False, "matmul"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", False, "matmul"),
    ("triton_tem_fused_mm_0", True, "tensor_core"),
    ("triton_tem_fused_mm_0", False, "matmul"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", False, "elementwise"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", False, "elementwise"),
    ("void at::native::batch_norm_collect_statistics_kernel<float, float, float, 512>", False, "elementwise"),
    ("triton_poi_fused_add_relu_3", False, "elementwise"),
    ("triton_poi_fused__native_batch_norm_legit_no_training_convolution_relu_5", True, "elementwise"),
    ("triton_per_fused__native_batch_norm_legit_functional_convolution_2", True, "reduction"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, convert>", False,
     "elementwise"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, 0>", False, "elementwise"),
    ("bias_relu", False, "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", False, "reduction"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nhwc<float, float>", False, "reduction"),
    ("max_pool2", False, "reduction"),
    ("triton_red_fused_sum_1", False, "reduction"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float>", True, "tensor_core"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", True, "tensor_core"),
    ("nvjet_sm90_tst_128x128_64x6_1x2_h_bz_splitK_NTT", False, "matmul"),
    ("void nvjpeg::rgba2rgb<(nvjpegOutputFormat_t)3, nvjpeg::RGBAToRGBConversion::LaunchParams<3>>", True,
     "elementwise"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", False, "communication"),
])
def test_kernel_names_fall_into_their_classes(name, likely, cls):
    assert kernels.classify_kernel(name, likely) == cls


def test_copies_by_direction():
    assert kernels.classify_copy("Memcpy HtoD (Pinned -> Device)") == "h2d"
    assert kernels.classify_copy("Memcpy DtoH (Device -> Pageable)") == "d2h"
    assert kernels.classify_copy("Memcpy DtoD (Device -> Device)") == "d2d"
    assert kernels.classify_copy("Memset (Device)") == "d2d"


def test_operator_bytes_from_recorded_shapes():
    args = {"Input Dims": [[2, 3], [2, 3], []], "Input type": ["float", "c10::BFloat16", "Scalar"]}
    assert tr.operator_bytes(args) == 24 + 12 + 24  # both inputs read, one output as large as the largest
    into = {"Input Dims": [[2, 3], [3], [2, 3]], "Input type": ["float", "float", "float"]}
    assert tr.operator_bytes(into, "dlbench::bias_relu_into") == 24 + 12 + 24  # x and bias read, out written
    assert tr.operator_bytes({"Input Dims": [[]], "Input type": ["Scalar"]}) is None
    assert tr.operator_bytes({}) is None


def _kernel(name, ts, dur, stream=7, correlation=None, cat="kernel", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": correlation, **args}}


def gpu_trace():
    """Two steps of a GPU run as Kineto writes them (microseconds): a bf16 convolution, a ReLU and
    a pooling on stream 7, a host copy on stream 20 under the convolution, an all-reduce on its own
    stream sticking out at the end, and gaps where the GPU waits for the host."""
    events = []
    for step, t in enumerate((0.0, 100.0)):
        c = 10 * step
        events += [
            _kernel("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", t, 40, correlation=c + 1),
            _kernel("Memcpy HtoD (Pinned -> Device)", t + 10, 20, stream=20, cat="gpu_memcpy", correlation=c + 2,
                    bytes=4_000_000),
            _kernel("void at::native::vectorized_elementwise_kernel<4, at::native::clamp_min>", t + 50, 20,
                    correlation=c + 3),
            _kernel("void at::native::max_pool_forward_nhwc<c10::BFloat16>", t + 75, 5, correlation=c + 4),
            _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", t + 78, 12, stream=30, correlation=c + 5),
        ]
        # the host side: the ReLU's operator with its shapes, and the launch that links them
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": t + 45, "dur": 4,
                       "args": {"External id": c + 100, "Input Dims": [[1000, 1000]], "Input type": ["c10::BFloat16"]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 46, "dur": 2, "args": {"correlation": c + 3, "External id": c + 100}})
    return {"traceEvents": events + [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]}


def test_gpu_trace_splits_into_classes_that_add_up_to_the_step():
    step_s, classes, top = tr.split_device(gpu_trace(), steps=2, tensor_cores_likely=False)
    assert step_s == pytest.approx(190e-6 / 2)  # first kernel start to last end, over two steps
    seconds = {cls: c["seconds"] for cls, c in classes.items()}
    assert sum(seconds.values()) == pytest.approx(step_s)
    assert seconds["tensor_core"] == pytest.approx(40e-6)
    assert seconds["h2d"] == 0.0 and classes["h2d"]["kernel_seconds"] == pytest.approx(20e-6)  # hidden under compute
    assert seconds["elementwise"] == pytest.approx(20e-6)
    assert seconds["reduction"] == pytest.approx(5e-6)
    assert seconds["communication"] == pytest.approx(10e-6)  # only what sticks out past the pooling
    # idle: 40-50 and 70-75 in each step, and 90-100 between them: 40 us over two steps
    assert seconds["idle"] == pytest.approx(20e-6)
    assert top[0]["class"] == "tensor_core" and top[0]["calls"] == 1 and top[0]["seconds"] == pytest.approx(40e-6)
    assert {k["class"] for k in top[1:3]} == {"h2d", "elementwise"}


def test_bytes_come_from_the_launching_operator_and_the_copies():
    moved = tr.kernel_bytes(gpu_trace(), tensor_cores_likely=False)
    assert moved["elementwise"]["bytes"] == 2 * 2 * 2_000_000 and moved["elementwise"]["bytes_coverage"] == 1.0
    assert moved["h2d"]["bytes"] == 8_000_000
    assert moved["tensor_core"]["bytes_coverage"] == 0.0  # its operator was not recorded


def test_summary_rates_shares_and_the_coverage_check():
    step_s, classes, top = tr.split_device(gpu_trace(), steps=2, tensor_cores_likely=False)
    moved = {cls: {"bytes": v["bytes"] / 2, "bytes_coverage": v["bytes_coverage"]}
             for cls, v in tr.kernel_bytes(gpu_trace(), False).items()}
    summary = prof.summarise(step_s, classes, top, steps=2, measured_step_s=step_s * 1.02, flops_per_step=8e9,
                             moved=moved, on_gpu=True)
    shares = [c["share"] for c in summary["classes"].values()]
    assert sum(shares) == pytest.approx(1.0)
    tc = summary["classes"]["tensor_core"]
    assert tc["flops"] == pytest.approx(8e9) and tc["flop_s"] == pytest.approx(8e9 / 40e-6)
    assert summary["classes"]["elementwise"]["bytes_s"] == pytest.approx(4e6 / 20e-6)
    assert summary["adds_up"] and summary["coverage"] == pytest.approx(1 / 1.02)
    busy = step_s - classes["idle"]["seconds"]
    # Kernels alone longer than the measured step: the profiled run was slower, and it says so.
    slow = prof.summarise(step_s, classes, top, steps=2, measured_step_s=busy / 1.3, flops_per_step=None,
                          moved={}, on_gpu=True)
    assert not slow["adds_up"] and "longer than measured ones" in slow["note"]
    assert "flops" not in slow["classes"]["tensor_core"]


def test_the_profilers_launch_cost_is_taken_out_of_the_idle_share():
    step_s, classes, top = tr.split_device(gpu_trace(), steps=2, tensor_cores_likely=False)
    busy = step_s - classes["idle"]["seconds"]
    measured = busy + 0.2 * classes["idle"]["seconds"]  # the profiler stretched the gaps between launches
    assert step_s > measured * (1 + prof.ADDS_UP)
    summary = prof.summarise(step_s, classes, top, steps=2, measured_step_s=measured, flops_per_step=None,
                             moved={}, on_gpu=True)
    assert summary["adds_up"] and summary["step_s"] == pytest.approx(measured)
    assert summary["classes"]["idle"]["seconds"] == pytest.approx(measured - busy)
    assert sum(c["share"] for c in summary["classes"].values()) == pytest.approx(1.0)
    assert summary["profiled"] == {"step_s": step_s, "idle_s": classes["idle"]["seconds"]}
    assert "the profiler's cost per kernel launch" in summary["note"]
    # On a CPU there are no device kernels to trust apart from the host: nothing is re-based.
    cpu = prof.summarise(step_s, classes, top, steps=2, measured_step_s=measured, flops_per_step=None,
                         moved={}, on_gpu=False)
    assert not cpu["adds_up"] and "profiled" not in cpu


def test_a_real_cpu_run_profiles_after_the_measured_window(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    x = torch.randn(4, 3, 32, 32)
    calls = []

    def step(timer):
        calls.append(type(timer).__name__)
        model(x).sum().backward()
        timer.mark("step_end")

    trace = tmp_path / "trace.json"
    measured = run_steps(step, torch.device("cpu"), warmup=1, warmup_seconds=0.0, steps=3, min_seconds=0.0,
                         profile=2, profile_trace=str(trace))
    assert len(measured.samples["step"]) == 3  # the profiled steps are not among the measured ones
    assert calls[-2:] == ["NullTimer", "NullTimer"]
    p = measured.profile
    assert p["device"] == "cpu" and p["steps"] == 2 and p["wall_s"] > 0
    assert sum(c["seconds"] for c in p["classes"].values()) == pytest.approx(p["step_s"], rel=1e-6)
    assert {"matmul", "elementwise"} <= set(p["classes"])
    assert p["classes"]["matmul"]["flops"] == measured.flops_per_step
    assert p["top_kernels"] and all(k["class"] != "idle" for k in p["top_kernels"])
    assert any("conv" in k["name"] for k in p["top_kernels"])
    # the file is a Chrome trace, as Perfetto and TensorBoard read it
    written = json.loads(trace.read_text())
    assert any(e.get("cat") == "cpu_op" for e in written["traceEvents"])
    assert "profile" in measured.common_metrics(4).to_metrics()


def test_profile_trace_without_profile_is_a_user_error(tmp_path):
    assert_user_error(cli("run", "fwdbwd", "--device", "cpu", "--profile-trace", tmp_path / "t.json"),
                      "--profile-trace needs --profile")
    assert_user_error(cli("run", "fwdbwd", "--device", "cpu", "--profile", "-1"), "--profile")


def test_volume_profiles_tiles_after_the_run(tmp_path):
    from dlbench.data.generate_volume import generate
    from dlbench.launch.execute import execute
    from dlbench.spec import BenchmarkSpec

    volume = generate(tmp_path / "v.h5", (8, 24, 24), "hdf5", chunks=(4, 16, 16), seed=1, labels=False)
    model = tmp_path / "conv.pt"
    scripted(torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.Conv3d(4, 2, 3, padding=1))).save(str(model))
    spec = BenchmarkSpec(workload="volume", model=str(model), device="cpu", warmup=1, profile=2, precision="fp32",
                         options={"input": str(volume), "output": str(tmp_path / "p.zarr"), "block": "4x16x16",
                                  "halo": "2x2x2"})
    result = execute(spec, {})
    assert result.status == "ok", result.error
    p = result.metrics["profile"]
    assert p["steps"] == 2 and p["classes"]["matmul"]["seconds"] > 0
    assert sum(c["share"] for c in p["classes"].values()) == pytest.approx(1.0)


# ---- the doctor and the report ----------------------------------------------------------------

def profiled(optimize="eager", idle=0.45, elementwise=0.25, precision="fp32", workload="fwdbwd", **spec):
    step = 0.02
    tc = 1 - idle - elementwise - 0.05
    classes = {
        "tensor_core": {"seconds": tc * step, "share": tc, "kernel_seconds": tc * step, "flops": 1.2e12,
                        "flop_s": 1.2e12 / (tc * step), "bytes": 4e9, "bytes_s": 4e9 / (tc * step)},
        "elementwise": {"seconds": elementwise * step, "share": elementwise, "kernel_seconds": elementwise * step,
                        "bytes": 2.9e12 * elementwise * step, "bytes_s": 2.9e12},
        "reduction": {"seconds": 0.05 * step, "share": 0.05, "kernel_seconds": 0.05 * step},
        "idle": {"seconds": idle * step, "share": idle, "kernel_seconds": 0.0},
    }
    summary = {"steps": 5, "step_s": step, "measured_step_s": step, "device": "cuda", "classes": classes,
               "top_kernels": [], "coverage": 1.0, "adds_up": True, "note": "", "wall_s": 1.5}
    return make_result(spec={"workload": workload, "optimize": optimize, "precision": precision, **spec},
                       metrics={"device": "cuda:0", "throughput": 800.0, "throughput_unit": "img/s",
                                "profile": summary}, samples={"step": [step] * 5})


def ceilings(**extra):
    metrics = {"device": "cuda:0", "copy_gbs": 4265.0, "matmul_tf32_tflops": 400.0, "matmul_fp32_tflops": 50.0,
               "matmul_bf16_tflops": 700.0, "h2d_pinned_gbs": 50.0, **extra}
    return Result(spec={"workload": "system", "model": "", "device": "cuda:0"},
                  system={"host": "node1", "gpus": [{"name": "NVIDIA H200"}]}, metrics=metrics)


def test_placement_against_the_measured_ceilings():
    places = {p.cls: p for p in placing.placements(profiled(precision="bf16"), ceilings())}
    assert places["elementwise"].bound == "memory"
    assert places["elementwise"].fraction == pytest.approx(2.9e12 / 4265e9)
    tc = places["tensor_core"]
    assert tc.ceiling_name == "matmul_bf16_tflops" and tc.fraction == pytest.approx(tc.flop_s / 700e12)
    assert tc.intensity == pytest.approx(300) and tc.bound == "compute"  # past the ridge (700e12 / 4265e9 = 164)
    assert places["idle"].fraction is None and places["idle"].bound is None
    # without a system record nothing is placed, but the shares stay
    bare = {p.cls: p for p in placing.placements(profiled(), None)}
    assert bare["elementwise"].fraction is None and bare["idle"].share == 0.45


def test_doctor_names_idle_first_with_numbers_and_advice():
    text = render(diagnose([profiled(batch=16), ceilings()], refs=[]))
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    # the cause: the idle the profile measured, as its share of the step
    assert lines[0].startswith("- launch-bound (45% of the step): the GPU waited for the host 9.00 ms a step")
    assert "the profile measured the GPU idle 45% of the step" in lines[0]
    # where the step goes, class by class, below the causes
    assert "where the step goes (--profile):" in text
    assert lines[1].startswith("- profile: GPU idle: 45% of the step (9.00 of 20.00 ms)")
    assert "launch-bound at batch 16" in lines[1] and "`--optimize graphs`" in lines[1]
    assert "elementwise passes: 25% of the step" in lines[2] and "at 2.90 TB/s (68% of the measured copy ceiling)" in lines[2]
    assert "memory-bound; fusing them (`--optimize compile`) removes most of it" in lines[2]
    assert "note: profile: 5 extra steps after the measured ones took 1.50 s; the classes add up to 100%" in text


def test_doctor_places_the_matmul_classes_on_the_runs_quick_ceiling_without_a_survey():
    quick = Result(spec={"workload": "system", "model": "", "device": "cuda:0", "quick": True},
                   system={"host": "node1", "gpus": [{"name": "NVIDIA H200"}]},
                   metrics={"device": "cuda:0", "matmul_bf16_tflops": 700.0})
    text = render(diagnose([profiled(precision="bf16", idle=0.02, elementwise=0.1), quick], refs=[]))
    [tc] = [line for line in text.splitlines() if line.startswith("- profile: tensor-core")]
    assert "of the measured bf16 matmul ceiling)" in tc and "no measured ceiling" not in tc
    [elementwise] = [line for line in text.splitlines() if line.startswith("- profile: elementwise")]
    assert "(no measured ceiling: run `dlbench system`)" in elementwise  # the copy ceiling: only a survey has it


def test_tensor_core_advice_offers_only_what_the_run_has_not_tried():
    def advice(**spec):
        r = profiled(precision="bf16", idle=0.02, elementwise=0.1, **spec)
        [evidence] = [e for name, e in breakdown.classes(r, ceilings(matmul_bf16_tflops=7000.0))
                      if name == "profile: tensor-core conv/matmul"]
        return evidence

    assert advice().endswith("small or badly shaped convolutions; a larger batch or `--channels-last` feeds "
                             "tensor cores better")
    assert advice(channels_last=True).endswith("; a larger batch feeds tensor cores better")
    tried = advice(workload="volume", channels_last=True, options={"block": "auto"})  # what auto settled on
    assert tried.endswith("small or badly shaped convolutions")
    assert "`--block auto` (it times larger tiles)" in advice(workload="volume", options={"block": "32x384x384"})


def test_doctor_tells_eager_and_graphs_apart_and_graphs_leaves_no_idle():
    runs = [profiled(), profiled(optimize="graphs", idle=0.02, elementwise=0.3), ceilings()]
    text = render(diagnose(runs, refs=[]))
    blocks = {" graphs " in block.splitlines()[0]: block for block in text.split("\n\n")}
    assert set(blocks) == {True, False}
    assert "- profile: GPU idle" in blocks[False] and "- profile: GPU idle" not in blocks[True]


def test_volume_advice_names_the_fused_kernels_unless_they_ran():
    r = profiled(workload="volume", idle=0.05, elementwise=0.39)
    (name, evidence), *_ = breakdown.classes(r, ceilings())
    assert name == "profile: elementwise passes" and "`--kernels fused`, `--optimize compile`" in evidence
    r.metrics = {**r.metrics, "kernels": "fused"}  # --kernels auto ran them: what ran counts, not what was asked
    (name, evidence), *_ = breakdown.classes(r, ceilings())
    assert "already fused" in evidence and "`--kernels fused`" not in evidence


def test_doctor_lists_each_rank_idle_share():
    r = profiled()
    r.metrics["profile"]["ranks"] = [{"step_s": 0.02, "coverage": 1.0, "shares": {"idle": 0.05}},
                                     {"step_s": 0.02, "coverage": 1.0, "shares": {"idle": 0.4}}]
    assert "; idle per rank 5%, 40%;" in breakdown.profile_note(r)


def test_host_operators_fall_into_their_classes():
    assert kernels.classify_operator("aten::mkldnn_convolution") == "matmul"
    assert kernels.classify_operator("aten::addmm") == "matmul"
    assert kernels.classify_operator("aten::native_batch_norm") == "elementwise"
    assert kernels.classify_operator("aten::max_pool2d_with_indices") == "reduction"
    assert kernels.classify_operator("aten::copy_") == kernels.classify_operator("aten::_to_copy") == "d2d"
    assert kernels.classify_operator("aten::view") == "idle"
    assert kernels.classify_operator("gloo:all_reduce") == "communication"


def test_doctor_says_why_the_classes_do_not_add_up():
    r = profiled()
    r.metrics["profile"].update(adds_up=False, coverage=1.3, note="profiled steps took 30% longer than measured ones")
    text = render(diagnose([r], refs=[]))
    assert "do not add up to the measured step (the profiled step is 130% of the measured one)" in text


def test_report_draws_a_stacked_bar_and_a_roofline():
    runs = [profiled(), profiled(optimize="graphs", idle=0.02), ceilings()]
    bars = profile_plots(runs)
    assert [p.id for p in bars] == ["profile"] and bars[0].svg.startswith(b"<?xml")
    assert b"GPU idle" in bars[0].svg
    roofs = roofline_plots(runs)
    assert len(roofs) == 1 and roofs[0].id.startswith("roofline-") and b"arithmetic intensity" in roofs[0].svg
    assert roofline_plots(runs[:2]) == []  # no system record: no ceilings to draw


def test_converge_profiles_the_last_fold(tmp_path):
    from dlbench.launch.execute import execute
    from dlbench.spec import BenchmarkSpec

    options = dict(synthetic_n=6, synthetic_size=32, folds=2, fold_limit=None, features=2, target_dice=1.0,
                   eval_every=2, max_steps=2)
    spec = BenchmarkSpec(workload="converge", model="unet2d", batch=2, device="cpu", profile=2, options=options)
    result = execute(spec, {})
    assert result.status == "ok", result.error
    p = result.metrics["profile"]
    assert p["steps"] == 2 and p["measured_step_s"] > 0 and "matmul" in p["classes"]
    assert all("profile" not in fold for fold in result.metrics["per_fold"])


def test_train_from_the_command_line_stores_the_profile_and_doctor_reads_it(tmp_path):
    db, trace = tmp_path / "r.db", tmp_path / "train.json"
    proc = cli("--db", db, "run", "train", "--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32",
               "--device", "cpu", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0",
               "--profile", "2", "--profile-trace", trace)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(trace.read_text())["traceEvents"]
    assert "; profile (2 steps, " in proc.stdout and "other conv/matmul" in proc.stdout
    doctor = cli("--db", db, "doctor")
    assert doctor.returncode == 0, doctor.stderr[-2000:]
    assert "- profile: other conv/matmul:" in doctor.stdout
    assert "note: profile: 2 extra steps after the measured ones took" in doctor.stdout


def test_report_table_puts_the_profiled_runs_side_by_side():
    from dlbench.report import render_markdown

    text = render_markdown([profiled(), profiled(optimize="graphs", idle=0.02), ceilings()])
    section = text[text.index("## Where the step's time goes"):]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:4]
    assert len(rows) == 2 and all("|20.00|yes (100%)|" in row for row in rows)
    assert {row.split("|")[-2] for row in rows} == {"45%", "2%"}  # GPU idle, the last column
    assert {row.split("|")[1] for row in rows} == {"fwdbwd ResNet-50 b16 fp32 eager", "fwdbwd ResNet-50 b16 fp32 graphs"}
    volume = [profiled(workload="volume", options={"kernels": k, "input": "v.h5"}) for k in ("pytorch", "fused")]
    assert "kernels=fused" in render_markdown(volume) and "input=" not in render_markdown(volume)


def test_the_warm_step_before_the_mark_is_left_out():
    trace = gpu_trace()
    trace["dlbench_start_us"] = 95.0  # the mark: between the first step (the warm one) and the second
    step_s, classes, _ = tr.split_device(trace, steps=1, tensor_cores_likely=False)
    assert step_s == pytest.approx(90e-6) and classes["idle"]["seconds"] == pytest.approx(15e-6)
    assert tr.kernel_bytes(trace, False)["elementwise"]["bytes"] == 2 * 2_000_000
    # a mark on another clock (before or after everything) leaves the warm step in, counted as one more
    for mark in (-1e9, 1e12):
        trace["dlbench_start_us"] = mark
        assert tr.split_device(trace, steps=1, tensor_cores_likely=False)[0] == pytest.approx(190e-6 / 2)
        assert tr.kernel_bytes(trace, False)["elementwise"]["bytes"] == 2 * 2_000_000


@pytest.mark.slow
def test_a_suite_entry_takes_profile(tmp_path):
    from dlbench.results.store import Store

    suite, db = tmp_path / "p.yaml", tmp_path / "s.db"
    suite.write_text("defaults: {workload: infer, model: resnet18, batch: 2, input_shape: 3x32x32, device: cpu,"
                     " warmup: 1, warmup_seconds: 0, steps: 2, min_seconds: 0, profile: 2}\nspecs: [{}]\n")
    proc = cli("suite", suite, "--db", db)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (result,) = Store(str(db)).results(workload="infer")
    assert result.spec["profile"] == 2 and result.metrics["profile"]["steps"] == 2


@pytest.mark.slow
def test_each_rank_profiles_under_torchrun(tmp_path):
    from dlbench.results.store import Store

    db, trace = tmp_path / "d.db", tmp_path / "t.json"
    proc = cli("--db", db, "run", "train", "--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32",
               "--device", "cpu", "--gpus", "2", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2",
               "--min-seconds", "0", "--profile", "2", "--profile-trace", trace)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (result,) = Store(str(db)).results(workload="train")
    ranks = result.metrics["profile"]["ranks"]
    assert len(ranks) == 2 and all(sum(r["shares"].values()) == pytest.approx(1.0) for r in ranks)
    assert (tmp_path / "t.rank0.json").is_file() and (tmp_path / "t.rank1.json").is_file()


def test_a_failing_profiler_leaves_the_measurement_and_says_why(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED\nmore")

    monkeypatch.setattr(prof, "record", broken)
    measured = run_steps(lambda timer: None, torch.device("cpu"), warmup=0, warmup_seconds=0.0, steps=2,
                         min_seconds=0.0, flops=False, monitor=False, profile=2)
    assert len(measured.samples["step"]) == 2
    assert measured.profile["error"] == "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"
    assert "profile failed (RuntimeError" in prof.headline(measured.profile)
    r = profiled()
    r.metrics["profile"] = measured.profile
    text = render(diagnose([r], refs=[]))
    assert "note: profile: the profiled steps failed (RuntimeError: CUPTI_ERROR_NOT_INITIALIZED)" in text
    assert "- profile:" not in text
