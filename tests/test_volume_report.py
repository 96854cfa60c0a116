from dlbench.report import render_markdown

from conftest import make_result


def volume_result(mvox: float, total: float, world: int = 1, status: str = "ok", **system):
    return make_result(spec={"workload": "volume", "model": "unet3d", "batch": 1, "input_shape": [], "precision": "fp32"},
                       system={"cuda": "12.4", "torch": "2.4.0+cu124", **system},
                       metrics={"mvox_per_s": mvox, "throughput": mvox, "throughput_unit": "Mvox/s", "total_s": total,
                                "volume_shape": [200, 3072, 3072], "block": [32, 384, 384], "halo": [16, 64, 64],
                                "extrapolate_voxels": 8.1e12, "world_size": world}, status=status)


def _block(text: str, title: str) -> list[str]:
    return text.split(f"## {title}\n")[1].split("\n## ")[0].strip().splitlines()


def test_seed_001_prediction_in_its_own_table():
    results = [volume_result(8.8, 215.3, gpus=[{"name": "GTX 1080 Ti"}]), volume_result(100.0, 18.9),
               make_result(), volume_result(1.0, 1.0, gpus=[{"name": "GTX 1080 Ti"}], status="error")]
    text = render_markdown(results)
    block = _block(text, "3D U-Net (unet3d): prediction")
    assert block[0].startswith("How long predicting the publications' 1.89 gigavoxel volume (200x3072x3072) takes")
    assert "Inference [s]: prediction of the publications' 200x3072x3072 volume (1.89 Gvox), measured where the run " \
           "predicted one that size" in block[1]
    assert "(volumes run: 200x3072x3072 (1.89 Gvox); block 32x384x384, halo 16x64x64)" in block[1]
    # one GPU each and no wall time stored: the Speed-up and Wall time columns, empty, are left out
    assert block[3] == "|System|GPUs|Precision|Inference [s]|Megavox / s|Platynereis, 8.1 Tvox [h]|Software|"
    # 8.1e12 voxels at 8.8 Mvox/s are 255.7 hours (the publication's table said 25.7).
    assert block[5] == "|GTX 1080 Ti|1|fp32|215.3|8.8|255.7|CUDA 12.4, PyTorch 2.4.0|"
    assert block[6] == "|NVIDIA H200|1|fp32|18.9|100.0|22.5|CUDA 12.4, PyTorch 2.4.0|"
    assert "ResNet-50" in text  # other sections stay


def test_multi_gpu_rows_have_their_gpu_count_speed_up_and_wall_time():
    one, four = volume_result(100.0, 18.9), volume_result(380.0, 5.0, world=4)
    one.metrics["wall_to_result_s"], four.metrics["wall_to_result_s"] = 31.2, 12.04
    text = render_markdown([one, four])
    assert "|NVIDIA H200|4|fp32|5.0|380.0|3.80x|12.0|5.9|CUDA 12.4, PyTorch 2.4.0|" in text


def test_gpu_benchmarks_3d_suite_expands():
    from dlbench import suites

    suite = suites.load("gpu-benchmarks-3d")
    assert {s.model for s in suite.specs} == {"unet3d", "unet3d-aniso"}
    predict = [s for s in suite.specs if s.workload == "volume"]
    assert len(predict) == 4 and all(s.options["volume_shape"] == "200x3072x3072" for s in predict)
    # training on 1, 2 and 4 GPUs like the seeds' (x2) and (x4) rows, in fp32 and bf16
    train = {(s.precision, s.gpus) for s in suite.specs if s.workload == "train" and s.model == "unet3d-aniso"}
    assert train == {(p, n) for p in ("fp32", "bf16") for n in (1, 2, 4)}


def test_wall_time_note_says_when_a_run_generated_its_input():
    given, generated = volume_result(100.0, 18.9), volume_result(100.0, 18.9)
    given.spec["options"] = {"input": "/data/vol.h5"}
    generated.spec["options"] = {"volume_shape": "200x3072x3072"}
    for r in (given, generated):  # a column no row fills is not shown, nor is its definition
        r.metrics["wall_to_result_s"] = 30.0
    note = _block(render_markdown([given]), "3D U-Net (unet3d): prediction")[1]
    assert "loading included) to the stored result" in note
    note = _block(render_markdown([given, generated]), "3D U-Net (unet3d): prediction")[1]
    assert ("loading included; a run given no input file generates its volume first, and that is included too) to "
            "the stored result") in note
