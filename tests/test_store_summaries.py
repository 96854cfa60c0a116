"""The store's summaries (one small row per result) let `report` and `doctor` choose in SQL which records
to read: written with each result, filled in once for an older store (and after an interruption), and
the choices made from them are the ones the readers make from every record. Imports are written in
chunks within one transaction: all kept, or none and said so. (benchmarks/big_store.py times them at
100,000 results.)"""

from __future__ import annotations

import io
import json
import random
import sqlite3
import statistics

import pytest
from conftest import make_result
from rich.console import Console

from dlbench.commands import doctor as doctor_command, report as report_command, results as results_command
from dlbench.commands.report import ReportRequest, report
from dlbench.commands.results import ImportRequest, import_
from dlbench.diagnose import choose as doctor_choice, history
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.render import render
from dlbench.errors import UserError
from dlbench.launch.view import Terminal
from dlbench.report import choose
from dlbench.results import exchange, store as store_module, summaries
from dlbench.results.store import Store


def _run(i: int, factor: float, **extra) -> object:
    steps = [0.010 * factor * (1 + 0.01 * ((i + k) % 7)) for k in range(40)]
    return make_result(started=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00",
                       samples={"step": steps, "total": steps}, **extra)


def _history(db, runs_per_host: int = 12, seed: int = 7) -> list:
    """Runs of two configurations on two machines, one in each with a fault (a third slower)."""
    rng = random.Random(seed)
    results = []
    for host in ("node1", "node2"):
        for batch in (16, 32):
            for j in range(runs_per_host):
                factor = 1.35 if j == 4 else rng.lognormvariate(0, 0.01)
                results.append(_run(len(results), factor, system={"host": host}, spec={"batch": batch}))
    with Store(db) as store:
        store.add_many(results)
    return results


def _drop_summaries(db) -> None:
    """The store as dlbench wrote it before summaries were kept."""
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("DROP TABLE summaries")
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # into the file itself, which an archive is read as
    raw.close()


def test_each_result_is_summarised_in_its_transaction(db):
    results = _history(db, runs_per_host=2)
    with Store(db, read_only=True) as store:
        rows = store.summaries()
    assert [s.id for s in rows] == [r.id for r in results]
    first = rows[0]
    assert (first.host, first.device, first.status, json.loads(first.spec)) == \
           ("node1", results[0].system_label, "ok", results[0].spec)
    assert first.step_median == statistics.median(results[0].samples["total"])  # fwdbwd's compared step
    assert first.timed


def test_an_older_store_is_filled_in_once_and_reads_the_same(db, monkeypatch, capsys):
    _history(db, runs_per_host=5)
    with Store(db, read_only=True) as store:
        before, summarised = store.results(), store.summaries()
    _drop_summaries(db)
    monkeypatch.setattr(summaries, "FILL_CHUNK", 3)
    monkeypatch.setattr(summaries, "_TOLD_EVERY_S", 0.0)
    with Store(db, read_only=True) as store:
        assert store.summaries() == summarised and store.results() == before
    assert "summarising the store's older results for fast reports: 3/20" in capsys.readouterr().err
    with sqlite3.connect(db) as raw:  # once: nothing left to fill
        assert raw.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] == 20


def test_an_interrupted_fill_keeps_its_chunks_and_goes_on(db, monkeypatch):
    _history(db, runs_per_host=5)
    _drop_summaries(db)
    monkeypatch.setattr(summaries, "FILL_CHUNK", 4)
    made, row = [0], summaries.row

    def stopped(r):
        made[0] += 1
        if made[0] > 9:
            raise KeyboardInterrupt
        return row(r)

    monkeypatch.setattr(summaries, "row", stopped)
    with Store(db, read_only=True) as store, pytest.raises(KeyboardInterrupt):
        store.summaries()
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] == 8  # two whole chunks
    monkeypatch.setattr(summaries, "row", row)
    with Store(db, read_only=True) as store:
        assert len(store.summaries()) == 20


def test_an_archive_without_summaries_is_read_whole(db, tmp_path, monkeypatch):
    _history(db, runs_per_host=2)
    _drop_summaries(db)
    monkeypatch.setattr(store_module, "read_only_reason", lambda path: "read-only")
    with Store(db, read_only=True) as store:
        assert store.summaries() is None and len(store.results()) == 8


@pytest.mark.parametrize("seed", range(6))
def test_the_doctors_choice_from_summaries_is_history_to_judge(db, seed):
    rng = random.Random(seed)
    results, count = [], rng.choice((1, 2, 3, 4, 9, 40))
    for i in range(count):  # ties, a fault or two, a run without steps
        factor = rng.choice((1.0, 1.0, rng.lognormvariate(0, 0.02), 1.5, 0.6))
        without_steps = rng.random() < 0.1
        results.append(make_result(started=_run(i, 1).started) if without_steps else _run(i, factor))
    with Store(db) as store:
        store.add_many(results)
        full = history.groups(store.results())
        fast = choose.configurations(store.summaries(), choose.Keys())
    assert list(fast) == list(full)
    for key, group in full.items():
        assert [s.id for s in doctor_choice.to_judge(fast[key])] == [r.id for r in history.to_judge(group)]


def test_the_doctor_from_summaries_says_what_it_said_from_every_record(db):
    _history(db)
    with Store(db, read_only=True) as store:
        whole = diagnose(store.results())
        chosen, surveys, compared, judged = doctor_choice.for_doctor(store, None)
        fast = diagnose(surveys, chosen=chosen, compared=compared)
    assert judged == len(whole) == len(fast) >= 6  # the newest of each and the faulty ones
    assert render(fast) == render(whole)


def _terminal() -> tuple[Terminal, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Terminal(Console(file=out, width=300), Console(file=err, width=300)), out, err


def test_the_doctor_judges_the_newest_and_says_how_many_more(db, monkeypatch):
    _history(db)
    monkeypatch.setattr(doctor_command, "DEFAULT_JUDGED", 3)
    view, out, err = _terminal()
    doctor_command.doctor(doctor_command.DoctorRequest(db=str(db)), view)
    assert out.getvalue().count("run ") >= 3
    assert "judged the newest 3 of the " in err.getvalue() and "--all judges every one" in err.getvalue()


def test_a_large_report_reads_the_newest_run_of_the_newest_settings(db, monkeypatch):
    old = _run(0, 3.0, tag="first")  # the same setting again later: only the newer is shown
    newer = [_run(i, 1.0 + i / 10, tag=f"t{i}") for i in range(1, 5)]
    again = _run(9, 1.0, tag="first")
    with Store(db) as store:
        store.add_many([old, *newer, again])
    monkeypatch.setattr(report_command, "WHOLE_REPORT", 0)
    monkeypatch.setattr(choose, "REPORT_ROWS", 3)
    view, out, err = _terminal()
    report(ReportRequest(db=str(db), format="csv"), view)
    shown = out.getvalue()
    assert "t4" in shown and "t3" in shown and "first" in shown and "t1" not in shown
    assert "the report shows the newest run of the newest 3 of 5 settings" in err.getvalue()
    monkeypatch.setattr(choose, "REPORT_ROWS", 100)
    with Store(db, read_only=True) as store:
        assert [r.id for r in choose.for_report(store, None)[0]] == [r.id for r in [*newer, again]]


def _export(tmp_path, count: int, bad_at: int | None = None):
    source = tmp_path / "many.jsonl"
    with open(source, "w") as f:
        exchange.write_jsonl([make_result(started=f"2026-01-01T00:00:{i % 60:02d}+00:00") for i in range(count)], f)
        if bad_at is not None:
            f.write('{"not": "a result"}\n')
    return source


def test_an_import_is_written_in_chunks_in_one_transaction(db, tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "IMPORT_CHUNK", 10)
    monkeypatch.setattr(results_command, "IMPORT_CHUNK", 10)
    view, _, err = _terminal()
    import_(ImportRequest(files=[str(_export(tmp_path, 35))], db=str(db)), view)
    assert err.getvalue().splitlines()[-1] == "imported 35 new results (0 already stored)"
    with Store(db, read_only=True) as store:
        assert store.count() == 35 and len(store.summaries()) == 35


def test_a_bad_record_late_in_an_import_keeps_nothing_and_says_so(db, tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "IMPORT_CHUNK", 10)
    monkeypatch.setattr(results_command, "IMPORT_CHUNK", 10)
    view, _, _ = _terminal()
    with pytest.raises(UserError) as error:  # three chunks written before the bad line is reached
        import_(ImportRequest(files=[str(_export(tmp_path, 35, bad_at=36))], db=str(db)), view)
    assert "is not a dlbench export (line 36" in str(error.value) and str(error.value).endswith("; nothing imported")
    with Store(db, read_only=True) as store:
        assert store.count() == 0 and store.summaries() == []


@pytest.mark.parametrize("sides", [("node1", "node2"), ("first", "node2")])
def test_compare_reads_only_the_runs_its_sides_name_and_says_the_same(db, monkeypatch, sides):
    _history(db)
    with Store(db) as store:  # a side of one run: the noise comes from its machine's other runs
        store.add(_run(100, 1.0, tag="first", system={"host": "node1"}))
        store.add(_run(101, 1.0, system={"host": "node3"}))  # no side's: never read
    from dlbench.report import compare as cmp

    with Store(db, read_only=True) as store:
        whole = cmp.render(cmp.compare(store.results(lean=True), list(sides)), "md", [])
        chosen, everything = choose.for_compare(store, None, sides)
        assert sum(len(side.results) for side in chosen) < store.count()
        assert all(o.machine != ("node3", o.machine[1]) for runs in everything.values() for o in runs)
        assert cmp.render(cmp.compare_sides(chosen, everything), "md", []) == whole
        assert choose.for_compare(store, None, ("node1", "nosuchhost")) is None  # the whole read says why


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_compare_of_two_tags_of_many_runs_reads_their_summaries_and_prints_the_same(db, monkeypatch, fmt):
    rng = random.Random(3)
    runs = [_run(i, rng.lognormvariate(0, 0.05) * (1.1 if i % 2 else 1.0), tag="baseline" if i % 2 else "nightly",
                 system={"host": f"node{i % 3}"}, spec={"batch": 16 if i % 4 < 2 else 32}) for i in range(60)]
    runs.append(_run(60, 1.0, tag="nightly", spec={"batch": 64}, system={"host": "node1"}))  # one run: its
    runs.append(_run(61, 1.0, tag="baseline", spec={"batch": 64}, system={"host": "node1"}))  # machine's noise
    runs += [_run(62 + i, 1.0 + i / 50, spec={"batch": 64}, system={"host": "node1"}) for i in range(3)]
    runs.append(make_result(started="2026-01-01T02:00:00+00:00", status="oom", tag="nightly", spec={"batch": 128}))
    runs.append(make_result(started="2026-01-01T02:00:01+00:00", tag="baseline", spec={"batch": 128},
                            samples={"step": [0.02] * 12}))
    with Store(db) as store:
        store.add_many(runs)
    monkeypatch.setattr(report_command, "WHOLE_REPORT", 0)
    read = []
    real = Store.records
    monkeypatch.setattr(Store, "records", lambda self, ids, **kw: read.extend(ids) or real(self, ids, **kw))
    from dlbench.report import compare as cmp

    with Store(db, read_only=True) as store:
        whole = cmp.render(cmp.compare(store.results(lean=True), ["baseline", "nightly"]), fmt, [])
    assert "(95% interval" in whole and "and 15 runs" in whole and "ran out of memory" in whole
    view, out, _ = _terminal()
    report_command.compare(report_command.CompareRequest(sides=["baseline", "nightly"], db=str(db), format=fmt), view)
    assert out.getvalue().rstrip("\n") == whole.rstrip("\n")
    assert len(read) == 8  # each side's newest run of each of its four benchmarks, never the other 58


def test_a_large_html_report_shows_the_settings_of_every_format_and_plots_the_newest(db, tmp_path, monkeypatch):
    """The page's tables show the settings the other formats show; its plots draw the newest runs of them,
    read whole, and the page and stderr say so and why."""
    from dlbench.report import html

    with Store(db) as store:
        store.add_many([_run(i, 1.0 + i / 10, tag=f"t{i}") for i in range(5)])
    monkeypatch.setattr(report_command, "WHOLE_REPORT", 0)
    monkeypatch.setattr(choose, "REPORT_ROWS", 4)
    monkeypatch.setattr(report_command, "PLOTTED_RUNS", 2)
    drawn = []
    monkeypatch.setattr(html, "plots", lambda runs: drawn.extend(runs) or [])  # the runs the page's plots get
    view, out, err = _terminal()
    report(ReportRequest(db=str(db), format="md"), view)
    listed = out.getvalue()
    report(ReportRequest(db=str(db), output=str(tmp_path / "r.html")), view)
    page = (tmp_path / "r.html").read_text()
    said = ("the report shows the newest run of the newest 4 of 5 settings (configuration, machine, tag); --suite or "
            "--system narrow it; its plots draw the newest 2 of its 4 runs, a bar or line each: a plot of more is "
            "too crowded to read and slow to draw")
    assert f"<p class=\"meta\">T{said[1:]}.</p>" in page
    assert said in err.getvalue()
    assert all(f"t{i}" in page and f"t{i}" in listed for i in range(1, 5)) and "t0" not in page + listed
    assert "All 4 runs in this report." in page
    assert [r.tag for r in drawn] == ["t3", "t4"] and all("total" in r.samples for r in drawn)  # read whole
    monkeypatch.setattr(choose, "REPORT_ROWS", 1000)  # every setting shown: only the plots leave some out
    drawn.clear()
    report(ReportRequest(db=str(db), output=str(tmp_path / "five.html")), view)
    said = ("the report's plots draw the newest 2 of its 5 runs, a bar or line each: a plot of more is too crowded "
            "to read and slow to draw; --suite or --system narrow it")
    assert f"<p class=\"meta\">T{said[1:]}.</p>".replace("'", "&#39;") in (tmp_path / "five.html").read_text()
    assert [r.tag for r in drawn] == ["t3", "t4"]
    monkeypatch.setattr(report_command, "WHOLE_REPORT", 5000)  # a smaller store is drawn whole and says nothing
    drawn.clear()
    report(ReportRequest(db=str(db), output=str(tmp_path / "all.html")), view)
    assert "newest" not in (tmp_path / "all.html").read_text() and len(drawn) == 5
