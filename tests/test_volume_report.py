from dlbench.report import render_markdown

from conftest import make_result


def volume_result(mvox: float, total: float, world: int = 1, status: str = "ok", **system):
    return make_result(spec={"workload": "volume", "model": "unet3d", "batch": 1, "input_shape": [], "precision": "fp32"},
                       system={"cuda": "12.4", "torch": "2.4.0+cu124", **system},
                       metrics={"mvox_per_s": mvox, "throughput": mvox, "throughput_unit": "Mvox/s", "total_s": total,
                                "volume_shape": [200, 3072, 3072], "block": [32, 384, 384], "halo": [16, 64, 64],
                                "extrapolate_voxels": 8.1e12, "world_size": world}, status=status)


def test_seed_001_prediction_tables():
    results = [volume_result(8.8, 215.3, gpus=[{"name": "GTX 1080 Ti"}]), volume_result(100.0, 18.9),
               make_result(), volume_result(1.0, 1.0, gpus=[{"name": "GTX 1080 Ti"}], status="error")]
    text = render_markdown(results)
    block = text.split("## 3D U-Net prediction\n")[1].split("\n## ")[0].strip().splitlines()
    assert block[0] == "(prediction of 200 x 3072 x 3072 = 1.89 gigavoxel; block 32x384x384, halo 16x64x64)"
    assert block[2] == "|System|CUDA|pytorch|Prediction [s]|"
    assert block[4] == "|NVIDIA H200|12.4|2.4.0|18.9|"
    assert block[5] == "|GTX 1080 Ti|12.4|2.4.0|215.3|"
    derived = text.split("## 3D U-Net prediction: Megavox / s and Platynereis\n")[1].split("\n## ")[0].strip().splitlines()
    assert derived[2] == "|System|Megavox / s|Platynereis [h]|"
    # 8.1e12 voxels at 8.8 Mvox/s are 255.7 hours (the seed's table said 25.7).
    assert derived[5] == "|GTX 1080 Ti|8.8|255.7|"
    assert derived[4] == "|NVIDIA H200|100.0|22.5|"
    assert "ResNet-50" in text  # other sections stay


def test_multi_gpu_rows_are_labelled():
    text = render_markdown([volume_result(400.0, 5.0, world=4)])
    assert "|NVIDIA H200 (x4)|400.0|5.6|" in text


def test_gpu_benchmarks_3d_suite_expands():
    from dlbench import suites

    suite = suites.load("gpu-benchmarks-3d")
    assert {s.model for s in suite.specs} == {"unet3d", "unet3d-aniso"}
    predict = [s for s in suite.specs if s.workload == "volume"]
    assert len(predict) == 4 and all(s.options["volume_shape"] == "200x3072x3072" for s in predict)
