"""--block auto: blockings ranked by computed voxels, the 32-bit bound, the probe's choice."""

import math

import pytest
import torch

from conftest import scripted

from dlbench.data.blocking import Blocking
from dlbench.launch.execute import _settle
from dlbench.models import registry
from dlbench.results.record import Result
from dlbench.workloads import block_choice
from dlbench.workloads.block_choice import axis_blocks, choose, computed, convolution_width, largest_tile, plans

SEED = (200, 3072, 3072)
HALO = (16, 64, 64)


def test_axis_blocks_split_the_axis_in_equal_parts_of_multiples_of_eight():
    sizes = axis_blocks(200)
    assert sizes[0] == 200 and 104 in sizes and 72 in sizes  # 1, 2 and 3 parts: 200, 100 -> 104, 67 -> 72
    assert all(s % 8 == 0 for s in sizes[1:])
    assert sizes == sorted(sizes, reverse=True)
    assert axis_blocks(5) == [5]


def test_plans_come_fewest_computed_voxels_first_and_fit_the_bound():
    bound = largest_tile(32)
    ranked = plans(SEED, HALO, bound)
    assert ranked and all(math.prod(p.tile) <= bound for p in ranked)
    assert [computed(p) for p in ranked] == sorted(computed(p) for p in ranked)
    best = ranked[0]
    # Every tile counts in full, cut blocks too: the share kept is the volume over that.
    assert len(best) == math.prod(-(-s // b) for s, b in zip(SEED, best.block))
    assert computed(best) == len(best) * math.prod(b + 2 * h for b, h in zip(best.block, HALO))
    assert best.kept == pytest.approx(math.prod(SEED) / computed(best))
    # Far better than the default block, whose tiles keep 28% of what the model computes.
    assert best.kept > 1.6 * Blocking(SEED, (32, 384, 384), HALO).kept


def test_the_32_bit_bound_is_computed_from_the_widest_convolution():
    model = registry.build("unet3d:f=4,d=2").eval()
    assert convolution_width(model, torch.device("cpu")) == 4  # level 0 has 4 features; the output 1
    assert largest_tile(4) * 4 < 2**31 <= (largest_tile(4) + 1) * 4
    # A 128x896x896 tile of unet3d (32 features) is over the bound; 96x768x768 is under.
    assert 128 * 896 * 896 > largest_tile(32) >= 96 * 768 * 768


def test_an_opaque_model_counts_as_wide():
    opaque = scripted(torch.nn.Conv3d(1, 4, 3, padding=1))
    assert convolution_width(opaque, torch.device("cpu")) == 64


def test_without_a_gpu_the_fewest_computed_voxels_in_small_tiles_and_no_probe():
    choice = choose((10, 30, 34), (2, 2, 2), "bf16", True, registry.build("unet3d:f=4,d=2"), torch.device("cpu"))
    assert choice.block == (10, 30, 34) and choice.precision == "bf16" and choice.channels_last
    assert choice.probes == [] and "not timed" in choice.why


def _timer(rates):
    """A probe clock: seconds per tile from Mvox/s of tile voxels per (precision, layout)."""
    return lambda tile, precision, cl: math.prod(tile) / (rates[(precision, cl)] * 1e6)


def test_the_probe_takes_the_fastest_half_precision_and_layout_and_says_why():
    plan = Blocking(SEED, (104, 616, 512), HALO)
    rates = {("fp16", True): 416, ("fp16", False): 322, ("bf16", True): 386, ("bf16", False): 309}
    choice = block_choice._probe([plan], "bf16", True, _timer(rates), [], "bound")
    assert (choice.precision, choice.channels_last) == ("fp16", True)
    assert len(choice.probes) == 4
    best = max(r["mvox_per_s"] for r in choice.probes)
    assert best == pytest.approx(416 * plan.kept)
    assert "60 tiles of 136x744x640" in choice.why and "+8%" in choice.why
    assert block_choice.describe(choice).startswith("block 104x616x512, fp16, channels-last-3d")


def test_a_full_precision_run_keeps_its_precision_and_probes_the_layout_only():
    plan = Blocking((64, 64, 64), (32, 32, 32), (4, 4, 4))
    choice = block_choice._probe([plan], "fp32", True, _timer({("fp32", True): 50, ("fp32", False): 80}), [], "b")
    assert (choice.precision, choice.channels_last) == ("fp32", False)
    assert len(choice.probes) == 2


def _tile_timer(rates_by_tile):
    """Seconds per tile where the rate (Mvox/s of tile voxels) depends on the tile: fp32's cuDNN
    algorithms slow down on large tiles, which the voxel count alone does not see."""
    return lambda tile, precision, cl: math.prod(tile) / (rates_by_tile(tile, precision, cl) * 1e6)


def test_auto_never_takes_a_blocking_slower_than_the_default_block():
    fewest = Blocking(SEED, (104, 616, 512), HALO)
    candidates = block_choice._candidates(fewest, SEED, HALO)
    blocks = [c.block for c in candidates]
    assert blocks[0] == (104, 616, 512) and (32, 384, 384) in blocks and len(blocks) == 3
    quarter = candidates[2]
    assert math.prod(quarter.tile) <= math.prod(fewest.tile) // 4
    # fp32 on the large tile at 1/30 of the rate it reaches on the default tile (as measured on an H200)
    slow_large = _tile_timer(lambda tile, p, cl: 20 if math.prod(tile) > 40e6 else 600)
    choice = block_choice._probe(candidates, "fp32", False, slow_large, [], "bound")
    assert choice.block != (104, 616, 512)
    default = next(r for r in choice.probes if r["block"] == [32, 384, 384])
    assert max(r["mvox_per_s"] for r in choice.probes) >= default["mvox_per_s"]
    assert "probe" in choice.why and "32x384x384" in choice.why
    # Where the rate per voxel is the same, the fewest computed voxels win.
    even = block_choice._probe(candidates, "fp32", False, _tile_timer(lambda *a: 600), [], "bound")
    assert even.block == (104, 616, 512)


def test_each_setting_is_timed_twice_and_the_faster_round_counts():
    plan = Blocking(SEED, (104, 616, 512), HALO)
    rates = {("fp16", True): 416, ("fp16", False): 322, ("bf16", True): 386, ("bf16", False): 309}
    seen = set()

    def cold_first(tile, precision, cl):  # the first call of a setting pays for its kernels' compilation
        slow = 3 if (precision, cl) not in seen else 1
        seen.add((precision, cl))
        return slow * math.prod(tile) / (rates[(precision, cl)] * 1e6)

    choice = block_choice._probe([plan], "fp16", True, cold_first, [], "bound")
    assert (choice.precision, choice.channels_last) == ("fp16", True)
    assert max(r["mvox_per_s"] for r in choice.probes) == pytest.approx(416 * plan.kept)


def _checks(fp16, bf16):
    return [{"precision": "fp16", "max_diff": fp16, "mean_diff": fp16 / 10, "agrees": fp16 <= block_choice.AGREEMENT},
            {"precision": "bf16", "max_diff": bf16, "mean_diff": bf16 / 10, "agrees": bf16 <= block_choice.AGREEMENT}]


def test_auto_precision_takes_the_fastest_half_type_that_agrees_with_fp32():
    plan = Blocking(SEED, (104, 616, 512), HALO)
    rates = {("fp16", True): 416, ("fp16", False): 322, ("bf16", True): 500, ("bf16", False): 309}
    # bf16 is faster here but differs by 3%: it is never timed, fp16 runs.
    choice = block_choice._probe([plan], "auto", False, _timer(rates), _checks(0.002, 0.03), "bound")
    assert (choice.precision, choice.channels_last) == ("fp16", True)
    assert {r["precision"] for r in choice.probes} == {"fp16"}
    assert "fp16 agrees with fp32 within 0.2%" in choice.why and "bf16 differs from fp32 by 3%" in choice.why
    assert choice.checks[1]["max_diff"] == 0.03
    both = block_choice._probe([plan], "auto", False, _timer(rates), _checks(0.002, 0.004), "bound")
    assert (both.precision, both.channels_last) == ("bf16", True)
    # Where no half type agrees, fp32 runs.
    none = block_choice._probe([plan], "auto", False, _timer({("fp32", True): 9, ("fp32", False): 10}),
                               _checks(0.5, 0.5), "bound")
    assert none.precision == "fp32"


def test_agreement_is_measured_on_the_sample_against_fp32():
    torch.manual_seed(0)
    model = registry.build("unet3d:f=4,d=2").eval()
    sample = torch.rand(1, 1, 8, 32, 32)
    checks = block_choice.agreement(model, sample, torch.device("cpu"))
    assert [c["precision"] for c in checks] == ["fp16", "bf16"]
    for c in checks:
        assert 0 < c["max_diff"] < 0.1 and c["mean_diff"] <= c["max_diff"]
        assert c["agrees"] == (c["max_diff"] <= block_choice.AGREEMENT)
    assert block_choice.agreement(model, None, torch.device("cpu")) == []


def test_on_the_cpu_auto_precision_is_fp32_and_nothing_is_timed():
    model = registry.build("unet3d:f=4,d=2")
    choice = choose((10, 30, 34), (2, 2, 2), "auto", False, model, torch.device("cpu"))
    assert choice.precision == "fp32" and choice.probes == [] and choice.checks == []
    given = choose((10, 30, 34), (2, 2, 2), "auto", False, model, torch.device("cpu"), block=(4, 8, 8))
    assert given.block == (4, 8, 8) and given.precision == "fp32"


def test_the_record_says_what_ran_and_keeps_what_was_asked():
    result = Result(spec={"workload": "volume", "precision": "bf16", "channels_last": True}, system={})
    _settle(result, {"precision": "fp16", "channels_last": True})
    assert result.spec["precision"] == "fp16" and result.metrics["asked"] == {"precision": "bf16"}
    same = Result(spec={"workload": "volume", "precision": "bf16", "channels_last": True}, system={})
    _settle(same, {"precision": "bf16", "channels_last": True})
    assert "asked" not in same.metrics
