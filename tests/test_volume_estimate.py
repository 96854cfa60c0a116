"""`dlbench run volume` says how long it will take from what it will compute: one tile a step (block
plus halo, as --block auto chooses on a CPU), as many steps as blocks, the warm-up's forwards, over
the measured ceiling, else a rough rate; a stored run of the same command (its --precision auto
settled as fp32 in the record) is the estimate of the next one."""

import re

from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.suites.estimate import ROUGH_STARTUP_S, Known, estimate_run, known, wall_seconds
from dlbench.workloads.volume import CPU_EFFICIENCY

from conftest import cli

MODEL = "unet3d:f=4,d=2"
ARGS = ["run", "volume", "--model", MODEL, "--device", "cpu", "--volume-shape", "8x32x32", "--halo", "2x4x4",
        "--warmup", "1"]
SAID = re.compile(r"^volume \S+ b1 auto: about (\d+) s \((.*)\)(?:, after \d+ s of start-up)?$", re.M)


def _spec(volume_shape="16x48x48", block="8x24x24", gpus=1) -> BenchmarkSpec:
    return BenchmarkSpec(workload="volume", model=MODEL, batch=1, device="cpu", warmup=1, gpus=gpus,
                         options={"volume_shape": volume_shape, "halo": "2x4x4", "block": block})


def _said(text: str) -> tuple[int, str]:
    found = SAID.search(text)
    assert found, text
    return int(found.group(1)), found.group(2)


def test_a_fresh_store_estimates_the_tiles_run_not_the_models_default_input(tmp_path):
    """Once the default 64x512x512 input three times over: minutes for a run of seconds."""
    db = tmp_path / "r.db"
    done = cli(*ARGS, "--db", db)
    assert done.returncode == 0, done.stderr
    seconds, basis = _said(done.stderr)
    assert basis == "rough"
    assert seconds < 2 * ROUGH_STARTUP_S["cpu"]  # its start-up stand-in and a few tiny tiles
    assert "expected to take" not in done.stderr

    again = cli(*ARGS, "--db", db)  # the record holds fp32 where the command asked auto: still the same command
    assert again.returncode == 0, again.stderr
    with Store(db) as store:
        first = next(r for r in store.results() if r.spec["workload"] == "volume")
    assert _said(again.stderr) == (round(wall_seconds(first)), "from a stored run here")


def test_flops_over_the_ceiling_count_the_blockings_tiles_and_the_warmup():
    counted = []

    def forward(spec: BenchmarkSpec) -> int:
        counted.append((spec.batch, spec.input_shape))
        return 10**9

    facts = Known({}, {}, {("cpu", "fp32"): 1e10}, 3.0)
    found = estimate_run(_spec(), facts, "cpu", forward=forward)
    assert found.basis == "FLOPs over this machine's measured ceiling"
    assert counted == [(1, (1, 12, 32, 32))]  # block 8x24x24 with a 2x4x4 halo on each side, one channel
    tiles, warmup = 8, 1  # a 16x48x48 volume in 8x24x24 blocks
    assert found.seconds == 3.0 + (warmup + tiles) * 1e9 / (1e10 * CPU_EFFICIENCY)
    assert found.extras == ()  # generating 37 kvox: no news

    two = estimate_run(_spec(gpus=2), facts, "cpu", forward=forward)  # each rank takes half the tiles
    assert two.seconds == 3.0 + (warmup + tiles // 2) * 1e9 / (1e10 * CPU_EFFICIENCY)


def test_a_stored_tiles_flops_serve_that_tile_only():
    """A tile's count, as a run stored it, is that tile's: another volume's tile is counted again."""
    stored = Result(spec={**_spec().to_dict(), "precision": "fp32"}, system={"host": "here"},
                    metrics={"device": "cpu", "flops_per_step": 7e9, "tile": [12, 32, 32]})
    facts = known([stored], "elsewhere", None)  # a count from any machine
    facts = Known(facts.times, facts.flops, {("cpu", "fp32"): 1e10}, 3.0)
    assert estimate_run(_spec(), facts, "cpu", forward=lambda spec: 0).seconds == 3.0 + 9 * 7e9 / 1e10
    other = estimate_run(_spec(block="16x48x48"), facts, "cpu", forward=lambda spec: 0)
    assert other.basis == "rough"  # the 20x56x56 tile was never counted, and nothing counts it here
