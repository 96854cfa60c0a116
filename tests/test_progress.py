"""Long work is never silent: a phase that reports nothing still gets a line every few seconds off a
terminal, and a batch search on a CPU is bounded in time and says each probe with a guess of its time."""

import io
import time

from rich.console import Console

from dlbench.launch import batchsize
from dlbench.launch.view import Heartbeat


def test_heartbeat_ticks_through_a_silent_phase():
    out = io.StringIO()
    with Heartbeat(Console(file=out, width=200), every_s=0.2) as heartbeat:
        heartbeat("volume unet3d: warm-up 0/1")
        time.sleep(1.0)  # the work reports nothing meanwhile
    lines = [line for line in out.getvalue().splitlines() if line]
    assert len(lines) >= 2, lines
    assert all(line.startswith("volume unet3d: warm-up 0/1 (") and line.endswith("so far)") for line in lines)
    count = len(lines)
    time.sleep(0.5)
    assert len([line for line in out.getvalue().splitlines() if line]) == count  # stopped with its block


class FakeCPU:
    """A probe whose step time grows with its batch, on a clock of its own; memory never runs out."""

    def __init__(self, fixed_s: float = 0.0) -> None:
        self.now, self.fixed_s = 0.0, fixed_s

    def clock(self) -> float:
        return self.now

    def probe(self, batch: int):
        self.now += self.fixed_s + batch
        return "ok", float(batch)


def test_batch_search_on_a_cpu_stops_at_its_time_bound():
    cpu, told = FakeCPU(), []
    found = batchsize.search(cpu.probe, limit=1024, budget_s=20.0, clock=cpu.clock,
                             told=lambda batch, guess: told.append((batch, guess)))
    assert [t.batch for t in found.tried] == [1, 2, 4, 8]  # 16 more seconds would end at 31 s
    assert cpu.now <= 20.0
    assert found.largest == 8 and found.stopped == "time" and found.budget_s == 20.0
    assert found.stored()["stopped"] == "time" and found.stored()["tried"][0] == {"batch": 1, "status": "ok",
                                                                               "throughput": 1.0, "seconds": 1.0}
    assert told == [(1, None), (2, 2.0), (4, 4.0), (8, 8.0)]


def test_batch_search_without_a_bound_goes_to_the_limit():
    cpu = FakeCPU()
    found = batchsize.search(cpu.probe, limit=64, clock=cpu.clock)
    assert found.largest == 64 and found.stopped is None and "stopped" not in found.stored()


def test_heartbeat_time_counts_from_the_start_not_the_stage():
    out = io.StringIO()
    with Heartbeat(Console(file=out, width=200), every_s=0.5) as heartbeat:
        heartbeat("train resnet18: count FLOPs")
        time.sleep(3.0)
        heartbeat("train resnet18: warm-up 1/5")
        time.sleep(1.5)
    ticks = [line for line in out.getvalue().splitlines() if line.startswith("train resnet18: warm-up 1/5 (")]
    assert ticks, out.getvalue()
    # a clock that restarted with the warm-up would say 1 or 2 s
    assert all(int(line.split("(")[1].split(" s so far")[0]) >= 3 for line in ticks), ticks


def test_heartbeat_says_moving_work_at_its_interval():
    # Steps a little under the interval apart: each comes too soon after the last line to be printed,
    # and the tick must say the latest one, not wait for a line that stands still.
    out = io.StringIO()
    with Heartbeat(Console(file=out, width=200), every_s=0.5) as heartbeat:
        started = time.monotonic()
        for step in range(8):
            heartbeat(f"volume unet3d: tile {step}/8")
            time.sleep(0.4)
    stamps = [line for line in out.getvalue().splitlines() if line.startswith("volume unet3d: tile ")]
    assert len(stamps) >= int((time.monotonic() - started) / 0.5) - 2, stamps  # about one per 0.5 s, not per 0.8 s
