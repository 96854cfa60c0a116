"""A store of many results: the listing says what it leaves out, lean reads keep what readers need and give
the rest back on request, exports stream exactly what an export wrote before, imports tell their progress,
and huge text is shortened alike in every output format while the store keeps it whole
(benchmarks/big_store.py times the same at 100,000 results)."""

from __future__ import annotations

import functools
import io
import json

import pytest
from conftest import cli, make_result
from rich.console import Console

from dlbench.commands.results import ImportRequest, import_
from dlbench.launch import view as view_module
from dlbench.launch.view import Terminal
from dlbench.results import exchange
from dlbench.results.store import Store
from dlbench.shorten import CELL_CHARS, shorten

HUGE_TAG = "start-" + "t" * 1_000_000 + "-end"


def _stored(db, count: int, **extra) -> list:
    results = [make_result(started=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00", samples={
        "step": [0.01 + i * 1e-5, 0.011, 0.012], "data": [0.001, 0.002, 0.001]}, traces={"monitor": {"util": [1, 2]}},
        **extra) for i in range(count)]
    with Store(db) as store:
        store.add_many(results)
    return results


def test_listing_says_how_many_it_leaves_out(db):
    results = _stored(db, 30)
    shown = cli("results", "--limit", "5", "--db", db)
    assert shown.returncode == 0, shown.stderr
    ids = [line.split()[0] for line in shown.stdout.splitlines()[1:] if line.strip()]
    assert ids == [r.id[:8] for r in results[-5:]]  # the newest five, oldest first
    assert "showing the newest 5 of 30 results; --limit N shows more, --all every one" in shown.stderr
    every = cli("results", "--all", "--format", "json", "--db", db)
    assert len(every.stdout.splitlines()) == 30 and "showing" not in every.stderr


def test_lean_reads_keep_the_steps_and_complete_gives_the_rest(db):
    _stored(db, 12)
    with Store(db, read_only=True) as store:
        whole, lean = store.results(), store.results(lean=True)
        assert [r.samples for r in lean] == [{"step": r.samples["step"]} for r in whole]
        assert [(r.metrics, r.spec, r.system, r.tag) for r in lean] == [(r.metrics, r.spec, r.system, r.tag)
                                                                        for r in whole]
        assert all(r.traces == {} for r in lean)
        assert store.complete(lean[3:5]) == whole[3:5]  # traces and every sample back, by id
        assert [r.id for r in store.results(newest=4, lean=True)] == [r.id for r in whole[-4:]]


def test_export_streams_what_it_wrote_before(db, tmp_path):
    _stored(db, 10, tag="a,=b")
    with Store(db, read_only=True) as store:
        for fmt in ("jsonl", "csv"):
            streamed, whole = io.StringIO(), io.StringIO()
            exchange.WRITERS[fmt](store.exported(flat=fmt == "csv"), streamed)
            exchange.WRITERS[fmt](store.results(exact=True), whole)
            if fmt == "csv":
                assert streamed.getvalue() == whole.getvalue()
            else:
                assert [json.loads(x) for x in streamed.getvalue().splitlines()] == \
                       [json.loads(x) for x in whole.getvalue().splitlines()]


def test_import_tells_its_progress(db, tmp_path, monkeypatch):
    source = tmp_path / "many.jsonl"
    with open(source, "w") as f:
        exchange.write_jsonl([make_result() for _ in range(300)], f)
    # each step told (a user's log sees one every five seconds: Heartbeat's interval)
    monkeypatch.setattr(view_module, "Heartbeat", functools.partial(view_module.Heartbeat, every_s=0.0))
    err = io.StringIO()
    import_(ImportRequest(files=[str(source)], db=str(db)), Terminal(Console(file=io.StringIO()),
                                                                     Console(file=err, width=200)))
    lines = err.getvalue().splitlines()
    assert "reading records to import: 0/1 MB" in lines and lines[-1] == "imported 300 new results (0 already stored)"


@pytest.fixture
def huge(db, tmp_path):
    _stored(db, 3, tag=HUGE_TAG)
    return db


@pytest.mark.parametrize("args", [("results",), ("results", "--format", "json"), ("report",),
                                  ("report", "--format", "csv"), ("report", "--format", "json"),
                                  ("report", "-o", "{tmp}/r.html"), ("compare", "node1", "node2")])
def test_huge_text_is_shortened_alike_in_every_format(huge, tmp_path, args):
    if args[0] == "compare":  # a second machine to compare with
        with Store(huge) as store:
            store.add(make_result(system={"host": "node2", "gpus": [{"name": "NVIDIA H100"}]}, tag=HUGE_TAG,
                                  samples={"step": [0.02, 0.021, 0.022]}))
    done = cli(*(a.format(tmp=tmp_path) for a in args), "--db", huge)
    assert done.returncode == 0, done.stderr
    out = (tmp_path / "r.html").read_text() if "-o" in args else done.stdout
    assert HUGE_TAG not in out and len(out) < 200_000
    if args[0] == "compare":  # it names runs by their machines: no tag to show
        return
    short = shorten(HUGE_TAG)
    assert len(short) == CELL_CHARS
    head, tail = short.split("…")
    assert head in out and tail in out  # the same cut: its start and its end, the middle elided


def test_the_store_and_export_keep_huge_text_whole(huge, tmp_path):
    done = cli("export", "--db", huge, "-o", tmp_path / "all.jsonl")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["tag"] for line in (tmp_path / "all.jsonl").read_text().splitlines()] == [HUGE_TAG] * 3
