"""A finished result is never lost, whatever stops the store from taking it (a full disk, a write
past the file-size limit, a lock, a full disk and a lock at once); and a suite file is bounded
before it is expanded (size, nesting, aliases, includes). Each situation is made for real: a
small tmpfs filled to the last byte, `ulimit -f`, other processes holding the store, YAML files."""

import contextlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlbench.results.store import NotStored, Store

from conftest import assert_user_error, cli, make_result

RUN = ["run", "fwdbwd", "--model", "resnet18", "--device", "cpu", "--batch", "2", "--input-shape", "3x32x32",
       "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0"]

# Another process holding the store: "read" keeps a read transaction open (a report loop, a
# dashboard: SQLite cannot restart its -wal file under it), "lock" the write lock.
HOLD = textwrap.dedent("""
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN EXCLUSIVE" if sys.argv[2] == "lock" else "BEGIN")
    db.execute("SELECT COUNT(*) FROM results").fetchall()
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes it
    db.execute("ROLLBACK")
""")


@contextlib.contextmanager
def held(db: Path, how: str):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db), how], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding"
        yield
    finally:
        proc.stdin.close()
        proc.wait(30)


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs, unmounted after the test; skipped where this process cannot mount one."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)],
                                                   capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("needs root to mount a small tmpfs (the file-size-limit test below covers a store that fails)")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def fill(folder: Path) -> None:
    """Write a file in `folder` until its disk is full."""
    with open(folder / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)


def stored_ids(db: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return {row[0] for row in con.execute("SELECT id FROM results")}


def printed(proc: subprocess.CompletedProcess, db: Path, tmp_path: Path) -> tuple[str, Path]:
    """The run's last line and, saved in a file as the line tells, the records it printed."""
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    records = [line for line in lines if line.startswith("{")]
    assert "fwdbwd" in [json.loads(line)["spec"]["workload"] for line in records]  # with its ceiling, if measured
    warning = next(line for line in lines if line.startswith("warning: "))
    assert f"printed above as JSON, one line each; save" in warning, warning
    assert f"with `dlbench import FILE --db {db}`" in warning, warning
    assert not [p for p in db.parent.iterdir() if ".pending" in p.name]  # never an empty or partial one
    saved = tmp_path / "saved.jsonl"
    saved.write_text("\n".join(records) + "\n")
    return warning, saved


@pytest.mark.slow
def test_a_full_disk_under_a_reader_prints_the_result_and_how_to_import_it(small_disk, tmp_path):
    db = small_disk / "r.db"
    with Store(db) as store:
        store.add(make_result(tag="earlier"))
    with held(db, "read"):
        fill(small_disk)
        proc = cli(*RUN, "--db", db)
    warning, saved = printed(proc, db, tmp_path)
    assert warning.startswith(f"warning: cannot write the store {db}: the disk it is on is full, and no file beside "
                              f"it could hold"), warning
    assert "ok fwdbwd resnet18" in proc.stdout  # the run's own line, and its exit status 0
    (small_disk / "filler").unlink()
    assert cli("import", saved, "--db", db).returncode == 0
    assert "ok" in {r.status for r in Store(db, read_only=True).results() if r.tag != "earlier"}


@pytest.mark.slow
def test_a_full_disk_and_a_lock_print_the_result_in_one_line_without_a_chained_error(small_disk, tmp_path):
    db = small_disk / "r.db"
    with Store(db) as store:
        store.add(make_result(tag="earlier"))
    with held(db, "lock"):
        fill(small_disk)
        proc = cli(*RUN, "--db", db, env={"DLBENCH_DB_WAIT": "1"})
    warning, saved = printed(proc, db, tmp_path)
    assert warning.startswith(f"warning: the store {db} is locked by another process (waited 1 s), and no file "
                              f"beside it could hold"), warning
    assert "Errno" not in proc.stderr and "StoreLocked" not in proc.stderr
    (small_disk / "filler").unlink()
    assert cli("import", saved, "--db", db).returncode == 0


@pytest.mark.slow
def test_a_store_past_the_file_size_limit_keeps_the_result_beside_it(tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        store.add(make_result(tag="earlier"))
    limit = 64 * 1024
    with held(db, "read"):  # the -wal file cannot start again under a reader: it grows past the limit
        with Store(db) as store:
            for _ in range(40):
                store.add(make_result(tag="x" * 2000))
        assert Path(f"{db}-wal").stat().st_size > limit
        before = stored_ids(db)
        proc = subprocess.run([sys.executable, "-m", "dlbench", *RUN, "--db", str(db)], capture_output=True,
                              text=True, env={**os.environ, "COLUMNS": "200"}, timeout=300,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    pending = list(tmp_path.glob("r.db.pending-*.jsonl"))
    assert len(pending) == 1 and pending[0].stat().st_size > 0
    warning = next(line for line in proc.stderr.splitlines() if line.startswith("warning: "))
    assert warning.startswith(f"warning: cannot write the store {db} within this process's file-size limit of "
                              f"64 KiB (ulimit -f): "), warning
    assert f"saved in {pending[0]}; add" in warning and f"`dlbench import {pending[0]} --db {db}`" in warning
    assert stored_ids(db) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert cli("import", pending[0], "--db", db).returncode == 0 and len(stored_ids(db)) > len(before)


def test_a_pending_file_that_cannot_be_written_whole_is_not_left_behind(small_disk):
    db = small_disk / "r.db"
    with Store(db) as store:
        store.add(make_result(tag="earlier"))
        fill(small_disk)
        with pytest.raises(NotStored) as raised:
            store.add_many([make_result(tag="x" * 300_000)])  # more than the disk has left
    assert "printed above as JSON" in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__context__ is None  # no chained OSError to show
    assert sorted(p.name for p in small_disk.iterdir() if "pending" in p.name) == []


# --- suite files -----------------------------------------------------------------------------

def alias_bomb(levels: int = 10) -> str:
    """A list whose aliases expand to 9**levels values, in a few hundred bytes."""
    anchors = ["&b0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&b{i} [{', '.join([f'*b{i - 1}'] * 9)}]" for i in range(1, levels)]
    return f"[{', '.join(anchors)}]"


SPEC = "{workload: fwdbwd, model: resnet18}"
BOMBS = {
    "description": (f"description: {alias_bomb()}\nspecs: [{SPEC}]\n", "more than 50,000 values"),
    "name": (f"name: {alias_bomb()}\nspecs: [{SPEC}]\n", "more than 50,000 values"),
    "input_shape": (f"defaults: {{input_shape: {alias_bomb()}}}\nspecs: [{SPEC}]\n", "more than 50,000 values"),
    "deep list": ("specs: " + "[" * 20_000 + "]" * 20_000 + "\n", "nests lists and mappings more than 100 deep"),
    "deep mapping": ("specs: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n", "more than 100 deep"),
    "deep block mapping": ("specs:\n" + "".join(" " * i + "a:\n" for i in range(1, 400)) + " " * 400 + "1\n",
                           "more than 100 deep"),
    "deep through aliases": ("defaults: {x: &d0 " + "[" * 60 + "1" + "]" * 60 + ", y: &d1 " + "[" * 60 + "*d0"
                             + "]" * 60 + "}\n", "more than 100 deep"),
    "alias inside itself": (f"defaults: &a {{x: *a}}\nspecs: [{SPEC}]\n", "an alias is used inside the value it names"),
    "many plain values": ("description: [" + ",".join(["1"] * 300_000) + "]\n", "more than 50,000 values"),
    "larger than 1 MB": ("description: " + "x" * 1_100_000 + "\n", "more than 1,000,000 bytes of YAML"),
}


def timed(*args) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = cli(*args, timeout=120)
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def startup(tmp_path_factory) -> float:
    """Seconds `dlbench suite` takes to refuse a small bad suite: the time every case below pays
    before its suite is read (importing the package), on this machine under its load now."""
    path = tmp_path_factory.mktemp("startup") / "bad.yaml"
    path.write_text("specs: 3\n")
    proc, seconds = timed("suite", path, "--list")
    assert proc.returncode == 2
    return seconds


@pytest.mark.parametrize("case", list(BOMBS))
def test_a_suite_past_a_bound_is_refused_in_one_line_within_a_second(tmp_path, db, startup, case):
    text, needle = BOMBS[case]
    path = tmp_path / "s.yaml"
    path.write_text(text)
    proc, seconds = timed("suite", path, "--list", "--db", db)
    assert_user_error(proc, f"suite {path}", needle)
    assert seconds < max(2.0, startup + 1.0), seconds  # 2 s, or a second past starting on a loaded machine
    assert not db.exists()


def includes(folder: Path, levels: int, width: int) -> Path:
    """A suite whose includes go `levels` deep, `width` files at each, each including all the next."""
    names = [f"leaf{i}.yaml" for i in range(width)]
    for name in names:
        (folder / name).write_text(f"specs: [{SPEC}]\n")
    for level in range(levels - 1):
        below, names = names, [f"l{level}-{i}.yaml" for i in range(width)]
        for name in names:
            (folder / name).write_text(f"include: [{', '.join(below)}]\n")
    top = folder / "top.yaml"
    top.write_text(f"include: [{', '.join(names)}]\n")
    return top


@pytest.mark.parametrize("levels, width", [(3, 100), (12, 2)])
def test_a_suite_with_too_many_includes_is_refused_within_a_second(tmp_path, db, startup, levels, width):
    top = includes(tmp_path, levels, width)
    proc, seconds = timed("suite", top, "--list", "--db", db)
    assert_user_error(proc, f"suite {top} includes more than 100 suite files in all (a file included twice "
                            f"counts twice)")
    assert seconds < max(2.0, startup + 1.0), seconds


def test_the_bytes_of_all_included_files_count_together(tmp_path, db):
    big = "description: " + "x" * 400_000 + f"\nspecs: [{SPEC}]\n"
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (tmp_path / name).write_text(big)
    top = tmp_path / "top.yaml"
    top.write_text("include: [a.yaml, b.yaml, c.yaml]\n")
    assert_user_error(cli("suite", top, "--list", "--db", db),
                      f"suite {top} with its includes is more than 1,000,000 bytes of YAML")


def test_suites_within_the_bounds_still_load(tmp_path):
    from dlbench import suites

    for name in suites.builtin_names():
        assert suites.load(name).specs
    shared = "defaults: &d {workload: fwdbwd, batch: 2}\nmatrix: {model: [resnet18, resnet34]}\n"
    path = tmp_path / "ok.yaml"
    path.write_text(shared + "specs:\n" + "".join(f"  - {{<<: *d, model: resnet18, batch: {i}}}\n"
                                                 for i in range(3, 202)))
    assert len(suites.load(str(path)).specs) == 201
    path.write_text(f"include: [{', '.join(['ok2.yaml'] * 100)}]\n")
    (tmp_path / "ok2.yaml").write_text(f"specs: [{SPEC}]\n")
    assert len(suites.load(str(path)).specs) == 1  # 100 includes are allowed
