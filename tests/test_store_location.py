"""Where results go: without --db, DLBENCH_DB or a dlbench.db in the current folder, into the one
store of the user's data folder, so that runs from any folder are one history and a ceiling is
measured once per machine; the command that creates it says so. Also the listing's columns and
--output's one meaning."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from conftest import assert_user_error, cli, make_result
from dlbench import paths
from dlbench.results.store import Store

FIRST = "results go to {}, the store your runs from any folder share (--db or DLBENCH_DB choose another)"


def dlbench(*args, cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess:
    """The real command in `cwd`, for a user whose home is `home` and who chose no store."""
    full = {k: v for k, v in os.environ.items() if k not in ("XDG_DATA_HOME", "DLBENCH_DB", "DLBENCH_GLOBAL_DB")}
    full.update(HOME=str(home), COLUMNS="200", **env)
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=full, timeout=300)


@pytest.fixture
def user(tmp_path):
    """A home without dlbench data, two working folders, and two export files of one result each."""
    home, here, there = tmp_path / "home", tmp_path / "here", tmp_path / "there"
    for folder in (home, here, there):
        folder.mkdir()
    exports = []
    for tag in ("first", "second"):
        exports.append(tmp_path / f"{tag}.jsonl")
        exports[-1].write_text(json.dumps(make_result(tag=tag).to_dict()) + "\n")
    return home, here, there, exports


def tags(path: Path) -> list[str]:
    with Store(path, read_only=True) as store:
        return [r.tag for r in store.results()]


def test_runs_from_any_folder_land_in_the_users_store_which_says_so_once(user):
    home, here, there, (first, second) = user
    store = home / ".local" / "share" / "dlbench" / "dlbench.db"
    made = dlbench("import", first, cwd=here, home=home)
    assert made.returncode == 0, made.stderr
    assert made.stderr.splitlines().count(FIRST.format(store)) == 1
    again = dlbench("import", second, cwd=there, home=home)
    assert again.returncode == 0 and "results go to" not in again.stderr
    assert tags(store) == ["first", "second"]
    assert not (here / "dlbench.db").exists() and not (there / "dlbench.db").exists()
    listing = dlbench("results", cwd=there, home=home)
    assert listing.returncode == 0 and listing.stdout.count("fwdbwd resnet50 b16 fp32") == 2


@pytest.mark.parametrize("xdg, where", [("{home}/data", "{home}/data/dlbench/dlbench.db"),
                                        ("relative/data", "{home}/.local/share/dlbench/dlbench.db"),
                                        ("", "{home}/.local/share/dlbench/dlbench.db")],
                         ids=["XDG_DATA_HOME", "a relative one is ignored", "empty"])
def test_the_users_store_follows_xdg_data_home(user, xdg, where):
    home, here, _, (first, _) = user
    store = Path(where.format(home=home))
    proc = dlbench("import", first, cwd=here, home=home, XDG_DATA_HOME=xdg.format(home=home))
    assert proc.returncode == 0, proc.stderr
    assert FIRST.format(store) in proc.stderr and tags(store) == ["first"]
    assert not (here / "relative").exists()


def test_a_dlbench_db_in_the_current_folder_wins_over_the_users_store(user):
    home, here, _, (first, _) = user
    Store(here / "dlbench.db").close()  # a working folder's own history, from before
    proc = dlbench("import", first, cwd=here, home=home)
    assert proc.returncode == 0, proc.stderr
    assert tags(here / "dlbench.db") == ["first"] and "results go to" not in proc.stderr
    assert not (home / ".local").exists()


def test_dlbench_db_wins_over_the_current_folders_store_and_db_over_both(user):
    home, here, _, (first, second) = user
    Store(here / "dlbench.db").close()
    chosen, given = here / "chosen.db", here / "given.db"
    assert dlbench("import", first, cwd=here, home=home, DLBENCH_DB=str(chosen)).returncode == 0
    for args in (("import", second, "--db", given), ("--db", given, "import", second)):
        proc = dlbench(*args, cwd=here, home=home, DLBENCH_DB=str(chosen))
        assert proc.returncode == 0 and "results go to" not in proc.stderr, proc.stderr
    assert tags(chosen) == ["first"] and tags(given) == ["second"] and tags(here / "dlbench.db") == []
    assert not (home / ".local").exists()


def test_a_data_folder_that_cannot_be_made_is_one_line(user):
    home, here, _, (first, _) = user
    (home / "file").write_text("not a folder\n")
    proc = dlbench("import", first, cwd=here, home=home, XDG_DATA_HOME=str(home / "file"))
    assert_user_error(proc, f"cannot create the folder {home}/file/dlbench for the result store: Not a directory; "
                            "give --db or set DLBENCH_DB to choose another store")


def test_reading_before_any_run_names_the_users_store_and_creates_nothing(user):
    home, here, _, _ = user
    proc = dlbench("results", cwd=here, home=home)
    assert_user_error(proc, f"no store at {home}/.local/share/dlbench/dlbench.db: no results yet")
    assert not (home / ".local").exists()


@pytest.mark.parametrize("platform, env, where", [
    ("darwin", {}, "{home}/Library/Application Support/dlbench"),
    ("win32", {"LOCALAPPDATA": "{home}/AppData/Local"}, "{home}/AppData/Local/dlbench"),
    ("linux", {"XDG_DATA_HOME": "{home}/xdg"}, "{home}/xdg/dlbench"),
])
def test_the_data_folder_of_each_system(monkeypatch, tmp_path, platform, env, where):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME")
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(home=tmp_path))
    monkeypatch.setattr(sys, "platform", platform)
    assert paths.data_folder() == Path(where.format(home=tmp_path))


@pytest.mark.slow
def test_two_folders_share_one_history_and_one_measured_ceiling(user):
    """The first run measures the matmul ceiling for its utilisation; a run from another folder
    finds it in the same store instead of measuring it again."""
    home, here, there, _ = user
    run = ("run", "infer", "--model", "resnet18", "--batch", "1", "--input-shape", "3x32x32", "--device", "cpu",
           "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0")
    store = home / ".local" / "share" / "dlbench" / "dlbench.db"
    first = dlbench(*run, cwd=here, home=home)
    assert first.returncode == 0, first.stderr
    assert FIRST.format(store) in first.stderr
    second = dlbench(*run, cwd=there, home=home)
    assert second.returncode == 0 and "results go to" not in second.stderr, second.stderr
    with Store(store, read_only=True) as stored:
        assert len(stored.results(workload="infer")) == 2 and len(stored.results(workload="system")) == 1


# ---- `dlbench results`: throughput in its unit, and the input's shape -------------------------

def listing(results) -> str:
    from dlbench.launch.view import Terminal

    out = io.StringIO()
    Terminal(out=Console(file=out, width=300), err=Console(file=io.StringIO())).results(results)
    return out.getvalue()


def test_the_listing_shows_each_runs_throughput_unit_and_shape():
    images = make_result(metrics={"throughput": 1500.0, "throughput_unit": "img/s"})
    volume = make_result(spec={"workload": "volume", "model": "unet3d"},
                         metrics={"throughput": 376.2, "throughput_unit": "Mvox/s", "volume_shape": [64, 512, 512],
                                  "input_shape": None})
    failed = make_result(status="oom", metrics={"throughput": None, "input_shape": None})
    text = listing([images, volume, failed])
    header, *rows = text.splitlines()
    assert header.split()[3:7] == ["benchmark", "shape", "throughput", "system"] and "tag" not in header
    lines = {line.split()[0]: line for line in rows}
    assert " 3x224x224 " in lines[images.id[:8]] and " 1500 img/s " in lines[images.id[:8]]
    assert " 64x512x512 " in lines[volume.id[:8]] and " 376 Mvox/s " in lines[volume.id[:8]]
    assert " 3x224x224 " in lines[failed.id[:8]] and " img/s" not in lines[failed.id[:8]]


def test_the_tag_column_shows_where_a_run_has_a_tag():
    text = listing([make_result(), make_result(tag="nightly")])
    assert "tag" in text.splitlines()[0] and "nightly" in text


# ---- --output: the prediction of `run volume`, nothing else -------------------------------------

@pytest.mark.parametrize("workload", ["train", "fwdbwd", "infer"])
def test_output_for_a_results_file_names_the_flag_that_writes_one(workload, tmp_path, db):
    proc = cli("run", workload, "--device", "cpu", "--output", tmp_path / "r.json", "--db", db)
    assert_user_error(proc, f"error: --output is the prediction of `dlbench run volume` only; `run {workload}` writes "
                            f"its results to a file with --results-file: give --results-file {tmp_path / 'r.json'}")
    assert not db.exists() and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("name", ["r.json", "r.jsonl"])
def test_output_of_a_volume_named_as_a_results_file_names_the_flag_that_writes_one(name, tmp_path, db):
    proc = cli("run", "volume", "--device", "cpu", "--output", tmp_path / name, "--db", db)
    assert_user_error(proc, f"--output {tmp_path / name}: --output is where the prediction goes (.zarr or .n5); the "
                            f"results file is --results-file: give --results-file {tmp_path / name}")
    assert not db.exists()


def test_help_shows_output_only_where_it_is_the_prediction():
    assert "--output" not in cli("run", "train", "--help").stdout
    assert "--results-file" in cli("run", "train", "--help").stdout
    assert "Prediction, PATH[:KEY]" in cli("run", "volume", "--help").stdout


def test_a_mistyped_command_gets_a_did_you_mean():
    assert_user_error(cli("reslts"), "unknown command 'reslts' (did you mean results?)", "--help` lists them")
