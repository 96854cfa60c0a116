"""Crafted records of a 2-GPU machine for the report's tests: each seed's table with 1- and 2-GPU
rows, as `dlbench suite` stores them on a lent 2 x H200 machine (no GPU needed to read them)."""

from __future__ import annotations

from conftest import make_result

H200 = {"host": "vm", "gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}], "cuda": "13.0", "cudnn": "9.19.0",
        "torch": "2.11.0+cu130", "cpu": {"model": "Intel(R) Xeon(R) Processor", "cores": 32}}
CPU = {**H200, "gpus": []}
CPU_MODELS = ("vgg16", "vgg19", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet200")


def _stats(**means: float) -> dict:
    return {phase: {"mean": value, "median": value} for phase, value in means.items()}


def train3d(precision: str, gpus: int, step: float, steps: int = 1001) -> object:
    return make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1, "precision": precision,
                             "gpus": gpus, "input_shape": [1, 40, 432, 432], "options": {"data": "/data/cremi.h5"}},
                       system=H200, metrics={"iteration_mean_s": step, "steps": steps, "world_size": gpus,
                                             "iters_per_min": 60 / step},
                       title="3D U-Net (aniso)")


def volume(precision: str, gpus: int, mvox: float, wall: float) -> object:
    voxels = 200 * 3072 * 3072
    return make_result(spec={"workload": "volume", "model": "unet3d-aniso", "batch": 1, "precision": precision,
                             "gpus": gpus, "input_shape": []},
                       system=H200, metrics={"mvox_per_s": mvox, "throughput": mvox, "throughput_unit": "Mvox/s",
                                             "total_s": voxels / mvox / 1e6, "volume_shape": [200, 3072, 3072],
                                             "block": [32, 384, 384], "halo": [8, 48, 48], "world_size": gpus,
                                             "extrapolate_voxels": 8.1e12, "wall_to_result_s": wall},
                       title="3D U-Net (aniso)")


def image_run(workload: str, data: str, gpus: int, means: dict, batch: int = 64) -> object:
    step = sum(means.values()) + 0.0002
    stats = {**_stats(**means), "step": {"mean": step, "median": min(step, means["forward"] * 1.05)}}
    return make_result(spec={"workload": workload, "model": "resnet50", "batch": batch, "gpus": gpus,
                             "options": {"data": data, "workers": 4}},
                       system=H200, metrics={"throughput": batch * gpus / step, "stats": stats, "workers": 4,
                                             "world_size": gpus, "steps": 50, "window_s": 50 * step,
                                             "latency_avg_ms": step * 1e3, "latency_p90_ms": step * 3.8e3,
                                             "latency_p95_ms": step * 3.9e3, "latency_p99_ms": step * 3.9e3})


def unet2d(workload: str, precision: str, gpus: int, batch: int, throughput: float) -> object:
    latency = batch / throughput * 1e3
    return make_result(spec={"workload": workload, "model": "unet2d-medical", "batch": batch, "gpus": gpus,
                             "precision": precision, "input_shape": [1, 572, 572], "options": {"data": "synthetic"}},
                       system=H200, metrics={"throughput": throughput, "world_size": gpus, "latency_avg_ms": latency,
                                             "latency_p90_ms": latency * 1.01, "latency_p95_ms": latency * 1.02,
                                             "latency_p99_ms": latency * 1.03,
                                             "input_shape": [batch, 1, 572, 572]},
                       title="U-Net (original)")


def converge(precision: str, dice: float, step: float) -> object:
    return make_result(spec={"workload": "converge", "model": "unet2d-medical", "batch": 8, "precision": precision,
                             "options": {"target_dice": 0.89, "folds": 5}}, system=H200,
                       metrics={"mean_dice": dice, "dice_per_fold": [dice] * 5, "target_dice": 0.89, "folds": 5,
                                "gpus": 1, "time_to_train_s": 400.0, "target_reached": True,
                                "data": "generated 30 x 512x512 (seed 0)",
                                "per_fold": [{"steps": 100, "train_s": 100 * step}] * 5},
                       title="U-Net (original)")


def cpu_fwdbwd(model: str, total_ms: float) -> object:
    return make_result(spec={"model": model, "device": "cpu"}, system=CPU,
                       metrics={"device": "cpu", "forward_ms": total_ms / 3, "backward_ms": total_ms * 2 / 3})


def two_gpu_runs() -> list:
    """One 2-GPU machine's runs for every seed table: tagged `lent-2gpu` as a suite would."""
    runs = [train3d("bf16", 1, 0.138), train3d("bf16", 2, 0.1421), train3d("fp32", 1, 1.8595, steps=10),
            volume("bf16", 1, 45.4, 58.3), volume("bf16", 2, 87.6, 36.9), volume("fp32", 1, 20.1, 110.2)]
    loader = {"data": 0.0686, "h2d": 0.0002, "forward": 0.0202}
    runs += [image_run("infer", "dummy", 1, loader),
             image_run("train", "dummy", 1, {"data": 0.0101, "forward": 0.0217, "backward": 0.0547, "optimizer": 0.0004}),
             image_run("train", "folder:/data/imagenet-jpeg", 1,
                       {"data": 0.0301, "forward": 0.0217, "backward": 0.0547, "optimizer": 0.0004}),
             image_run("train", "dummy", 2, {"data": 0.0121, "forward": 0.0219, "backward": 0.0561, "optimizer": 0.0004}),
             image_run("smooth", "dummy", 2, {"data": 0.0004, "noise": 0.0001, "forward": 0.0206})]
    runs += [unet2d("train", p, g, b, t) for p, g, b, t in (
        ("tf32", 1, 8, 128.6), ("fp16", 1, 8, 203.1), ("fp32", 1, 8, 40.2), ("tf32", 2, 8, 250.1), ("fp16", 2, 8, 390.4),
        ("tf32", 1, 1, 70.2), ("fp16", 1, 1, 90.3))]
    runs += [unet2d("infer", p, 1, b, 400.0 * b / (b + 1)) for p in ("tf32", "fp16", "fp32") for b in (1, 2, 4, 8, 16)]
    runs += [converge("tf32", 0.93, 0.0636), converge("fp16", 0.933, 0.0412), converge("fp32", 0.931, 0.2444)]
    runs += [cpu_fwdbwd(m, 200.0 + 100 * i) for i, m in enumerate(CPU_MODELS)]
    for r in runs:
        r.tag = "lent-2gpu"
    return runs
