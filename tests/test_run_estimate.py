"""A single run says how long it will take before it starts, from what it knows; its progress counts
down against that; a step's FLOPs are counted once per configuration and remembered in the store;
a suite's listing counts and measures nothing."""

import io
import re
import socket

import pytest
from rich.console import Console

from dlbench.commands.run import announce_estimate
from dlbench.launch import flopcount
from dlbench.launch.inprocess import run_specs
from dlbench.launch.suiterun import make_plan
from dlbench.launch.view import Terminal
from dlbench.measure import loop
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.suites import Suite, estimate
from dlbench.suites.estimate import Known, countdown, estimate_run, over_a_minute

from conftest import cli

TINY = dict(model="resnet18", batch=2, input_shape=(3, 32, 32), device="cpu", warmup=1, warmup_seconds=0.0,
            steps=2, min_seconds=0.0)


def _spec(**changes) -> BenchmarkSpec:
    return BenchmarkSpec(workload="fwdbwd", **{**TINY, **changes})


def _facts(times=None, flops=None, rates=None, overhead=None, compile_s=None) -> Known:
    return Known(times or {}, flops or {}, rates or {}, overhead, compile_s or {})


def _view() -> tuple[Terminal, io.StringIO]:
    err = io.StringIO()
    return Terminal(err=Console(file=err, width=300, soft_wrap=True)), err


def test_an_estimate_says_which_of_its_three_sources_it_comes_from():
    spec = _spec()
    stored = estimate_run(spec, _facts(times={estimate.spec_key(spec): [38.0, 42.0, 40.0]}), "cpu")
    assert stored.seconds == 40.0 and stored.text() == "about 40 s (from 3 stored runs here)"
    counted = estimate_run(spec, _facts(flops={estimate._work(spec): 1e9}, rates={("cpu", "fp32"): 1e11},
                                        overhead=5.0), "cpu")
    assert counted.basis == "FLOPs over this machine's measured ceiling" and not counted.run.rough
    assert counted.text().startswith("about ") and "from FLOPs over this machine's measured ceiling" in counted.text()
    rough = estimate_run(spec, _facts(), "cpu")  # nothing stored, no ceiling, no count
    assert rough.run.rough and rough.run.source == "rough" and rough.text().endswith("(rough)")
    # a count of one forward pass on the meta device stands in for a remembered one, but no ceiling is known
    assert estimate_run(spec, _facts(), "cpu", forward=lambda s: 10**9).basis == "rough"


def test_an_estimate_adds_a_first_compile_and_a_batch_search_where_they_happen():
    spec = _spec(optimize="compile")
    rough = estimate_run(spec, _facts(), "cpu")
    assert "a first compile, rough:" in rough.text()
    here = estimate_run(spec, _facts(compile_s={False: 30.0, True: 3.0}), "cpu")
    assert "; a first compile: 30 s" in here.text() and here.seconds == here.run.seconds + 30.0
    assert "a first compile" not in estimate_run(_spec(), _facts(), "cpu").text()  # eager compiles nothing
    searched = estimate_run(_spec(), _facts(), "cpu", search_s=60.0)
    assert "; a batch search, at most: 1 min 00 s" in searched.text()


def test_the_progress_counts_down_against_the_estimate():
    assert countdown(40.0, 15.2) == "about 25 s left of 40 s"
    assert countdown(40.0, 52.0) == "12 s past the 40 s expected"
    assert countdown(None, 7.0) == "7 s so far"


def test_a_run_over_a_minute_on_a_cpu_says_so_before_it_starts(db):
    spec = _spec()
    with Store(db) as store:  # a stored run of the same spec here that took 95 s
        store.add(Result(spec=spec.to_dict(), system={"host": socket.gethostname()}, status="ok",
                         traces={"launch": {"wall_s": 95.0}}, started="2026-01-01T00:00:00+00:00",
                         finished="2026-01-01T00:01:35+00:00"))
        view, err = _view()
        assert announce_estimate([spec], store, view) == [95.0]
    said = err.getvalue().splitlines()
    assert said[0] == f"{spec.label()}: about 1 min 35 s (from a stored run here)"
    assert said[1].startswith("warning: expected to take over a minute on the CPU (about 1 min 35 s)")
    assert over_a_minute(59.0, "cpu") is None and over_a_minute(600.0, "cuda") is None


def test_the_estimate_says_the_start_up_it_comes_after(db, monkeypatch):
    # said seconds after Enter (torch, the checks): the wait a user sees is both, so both are told
    import time

    import dlbench

    spec = _spec()
    monkeypatch.setattr(dlbench, "command_started", time.monotonic() - 12.2)
    with Store(db) as store:
        view, err = _view()
        announce_estimate([spec], store, view)
    said = re.fullmatch(rf"{re.escape(spec.label())}: about .+\), after (\d+) s of start-up", err.getvalue().splitlines()[0])
    assert said and int(said[1]) >= 12  # and the estimate's own seconds on top
    monkeypatch.setattr(dlbench, "command_started", None)  # dlbench used from Python: no command to time
    with Store(db) as store:
        view, err = _view()
        announce_estimate([spec], store, view)
    assert "start-up" not in err.getvalue()


def test_a_second_run_reuses_the_remembered_flop_count(db, monkeypatch):
    counted = []
    real = loop.count_flops
    monkeypatch.setattr(loop, "count_flops", lambda fn: counted.append(1) or real(fn))
    spec = _spec()
    with Store(db) as store:
        [first] = run_specs([spec], store, console=Console(file=io.StringIO()), expected=[10.0])
        assert first.status == "ok" and counted == [1]
        remembered = store.flop_counts()[flopcount.key(spec.to_dict())]
        assert remembered == first.measured.utilisation.flops_per_step > 0
    with Store(db) as store:  # a fresh connection: the count comes from the store, not this process
        [second] = run_specs([spec], store, console=Console(file=io.StringIO()))
    assert second.status == "ok" and counted == [1]  # the second run counted nothing
    assert second.measured.utilisation.flops_per_step == first.measured.utilisation.flops_per_step
    # the count is the machine's no more than the warm-up's: another device or step count shares it
    assert flopcount.key(_spec(steps=50, device="auto").to_dict()) == flopcount.key(spec.to_dict())
    assert flopcount.key(_spec(batch=4).to_dict()) != flopcount.key(spec.to_dict())


def test_a_listing_counts_no_flops_and_measures_nothing(db, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a listing counted FLOPs or measured the machine")

    monkeypatch.setattr(flopcount, "_forward_flops", refuse)
    monkeypatch.setattr("dlbench.measure.flops.count_flops", refuse)
    spec, other = _spec(), _spec(batch=8)
    with Store(db) as store:  # a count remembered from elsewhere: a guess from it needs this host's ceiling too
        store.keep_flops(flopcount.key(other.to_dict()), 1e9, "r" * 32, "2026-01-01T00:00:00+00:00")
        plan = make_plan(Suite("s", "", [spec, other]), store, socket.gethostname())
    assert [e.source for e in plan.estimates] == ["rough", "rough"]
    assert all(e.seconds and e.seconds > 0 for e in plan.estimates)


def test_a_damaged_flop_table_costs_a_count_never_the_run(db):
    with Store(db) as store:
        store._db.execute("DROP TABLE flops")
        store._db.execute("CREATE TABLE flops (key TEXT)")
        assert store.flop_counts() == {}
        assert flopcount.lookup(store, _spec().to_dict()) is None


RANKS = ["run", "train", "--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32", "--device", "cpu",
         "--gpus", "2", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0"]


@pytest.mark.slow
def test_the_ranks_of_a_run_on_several_processes_use_the_remembered_count(db):
    first = cli(*RANKS, "--db", db)
    assert first.returncode == 0, first.stderr
    with Store(db) as store:
        [(key, counted)] = store.flop_counts().items()  # rank 0 counted, the launcher kept it
        [ran] = store.results(workload="train")
        assert ran.measured.utilisation.flops_per_step == counted > 0
        store.keep_flops(key, 12345.0, ran.id, ran.finished)  # a count no rank could have made itself
    second = cli(*RANKS, "--db", db)
    assert second.returncode == 0, second.stderr
    with Store(db, read_only=True) as store:
        assert store.results(workload="train")[-1].measured.utilisation.flops_per_step == 12345
