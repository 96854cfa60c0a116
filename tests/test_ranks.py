"""dlbench's own start of N ranks on one host (launch/ranks.py, in place of `torchrun --standalone`),
and `dlbench run --gpus N` starting them before its checks: real processes throughout. The
launcher's own tests use ranks that are plain Python scripts (no torch: fast); the command's use
gloo ranks of the volume workload on the CPU."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_user_error, cli
from dlbench.launch import ranks
from dlbench.results.store import Store
from test_volume_workload import _descendants, _gone, _run_args, _started, data  # noqa: F401

LINUX = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="follows processes through /proc")


def launch(tmp_path: Path, script: str, n: int = 2) -> subprocess.Popen:
    """`python -m dlbench.launch.ranks N -c SCRIPT`, in a session of its own as dlbench starts it."""
    return subprocess.Popen([sys.executable, "-m", "dlbench.launch.ranks", str(n), "-c", script], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_gone(pids: list[int], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(_gone(pid) for pid in pids), "a rank still runs"


ENV_SCRIPT = """
import json, os
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "OMP_NUM_THREADS", "DLBENCH_RANKS", "GLOO_SOCKET_IFNAME")
open(f"rank{os.environ['RANK']}.json", "w").write(json.dumps({k: os.environ.get(k) for k in keys}))
"""


def test_every_rank_gets_torchruns_environment(tmp_path):
    proc = launch(tmp_path, ENV_SCRIPT, n=3)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    envs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    for rank, env in enumerate(envs):
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"]) == \
            (str(rank), str(rank), "3", "3", "0")
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["DLBENCH_RANKS"] == str(proc.pid)
    assert len({env["MASTER_PORT"] for env in envs}) == 1 and int(envs[0]["MASTER_PORT"]) > 0
    assert envs[0]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS", "1")  # torchrun's default
    if Path("/sys/class/net/lo").exists():  # gloo's ranks of one host meet over loopback
        assert envs[0]["GLOO_SOCKET_IFNAME"] == os.environ.get("GLOO_SOCKET_IFNAME", "lo")


FAILING = """
import os, time
open(f"pid{os.environ['RANK']}", "w").write(str(os.getpid()))
if os.environ["RANK"] == "1":
    time.sleep(0.5)
    raise SystemExit(3)
time.sleep(120)
"""


@LINUX
def test_a_rank_that_fails_stops_the_others(tmp_path):
    started = time.monotonic()
    proc = launch(tmp_path, FAILING)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 20  # not rank 0's 120 s
    assert proc.returncode == 3
    assert err.strip().splitlines()[-1] == "rank 1 exited with status 3; the other ranks were stopped"
    wait_gone([int((tmp_path / f"pid{r}").read_text()) for r in range(2)])


SLEEPING = """
import os, time
open(f"pid{os.environ['RANK']}", "w").write(str(os.getpid()))
time.sleep(120)
"""


def _pids(tmp_path: Path, n: int = 2) -> list[int]:
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pid{r}").exists() for r in range(n)) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.05)  # written
    return [int((tmp_path / f"pid{r}").read_text()) for r in range(n)]


@LINUX
@pytest.mark.parametrize("how", ["group", "launcher"])
def test_killing_the_launcher_or_its_group_kills_every_rank(tmp_path, how):
    """A supervisor kills the session (a stop, a timeout); a parent killed with SIGKILL leaves the
    launcher to die with it, and the ranks with the launcher."""
    proc = launch(tmp_path, SLEEPING)
    pids = _pids(tmp_path)
    if how == "group":
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    proc.wait(timeout=30)
    wait_gone(pids)


def test_a_rank_killed_by_a_signal_is_named(tmp_path):
    script = "import os, signal\nif os.environ['RANK'] == '0': os.kill(os.getpid(), signal.SIGKILL)\n"
    proc = launch(tmp_path, script)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL
    assert "rank 0 died from SIGKILL; the other ranks were stopped" in err


FINISHED_THEN_SLOW = """
import os, time
from dlbench.launch.leave import leave
from dlbench.launch.ranks import said_done
open(f"pid{os.environ['RANK']}", "w").write(str(os.getpid()))
while not all(os.path.exists(f"pid{r}") for r in range(2)):  # both started: both can be seen to go
    time.sleep(0.01)
def slow_end(code):  # what the driver does after a GPU process ends: its memory released, seconds
    said_done(code)
    time.sleep(120)
leave(int(os.environ.get("CODE", "0")) if os.environ["RANK"] == "1" else 0, slow_end)
"""


@LINUX
def test_the_launcher_ends_when_every_rank_said_it_finished_not_when_their_end_is_over(tmp_path):
    """A rank tells the launcher it finished before the operating system releases its memory and
    GPU; the launcher ends then, and the ranks, already ending, go with it."""
    started = time.monotonic()
    proc = launch(tmp_path, FINISHED_THEN_SLOW)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert time.monotonic() - started < 20  # not the ranks' 120 s
    wait_gone(_pids(tmp_path))


@LINUX
def test_a_rank_that_finished_with_an_error_stops_the_others_at_once(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "dlbench.launch.ranks", "2", "-c", FINISHED_THEN_SLOW],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "CODE": "2"})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().splitlines()[-1] == "rank 1 exited with status 2; the other ranks were stopped"
    wait_gone(_pids(tmp_path))


def test_a_rank_says_nothing_where_no_launcher_listens(monkeypatch):
    """Alone or under torchrun there is no pipe: telling is a no-op, not an error; a process a rank
    started inherits the rank's environment, not its place to tell."""
    monkeypatch.delenv(ranks.DONE_FD, raising=False)
    ranks.said_done(0)
    read, write = os.pipe()
    monkeypatch.setenv(ranks.DONE_FD, str(write))
    monkeypatch.setenv("DLBENCH_RANKS", str(os.getppid() + 1))  # not this process's parent
    ranks.said_done(0)
    monkeypatch.setenv("DLBENCH_RANKS", str(os.getppid()))
    ranks.said_done(3)
    os.close(write)
    assert os.read(read, 100) == f"{os.environ.get('RANK', '0')} 3\n".encode()  # the rank's own word alone
    os.close(read)
    monkeypatch.setenv(ranks.DONE_FD, "987654")  # a launcher gone: its pipe closed
    ranks.said_done(0)


def test_single_host_runs_need_no_torchrun():
    from dlbench.launch import torchrun

    one_host = torchrun.command(Path("job.json"), Path("result.json"), 2)
    assert one_host[1:4] == ["-m", "dlbench.launch.ranks", "2"] and "torch.distributed.run" not in one_host
    nodes = torchrun.command(Path("job.json"), Path("result.json"), 4, ["--nnodes=2", "--rdzv-endpoint=h:1"])
    assert nodes[1:3] == ["-m", "torch.distributed.run"]  # several nodes: torchrun's rendezvous, as before


def test_usage_of_the_launcher():
    assert ranks.main(["x", "-c", "pass"]) == 2


# ------------------------------------------------------------------ `dlbench run --gpus N`

RECORDING = """
import subprocess, sys
seen = []
popen = subprocess.Popen.__init__
def record(self, args, *a, **k):
    if "dlbench.launch.ranks" in args:
        seen.append("torch" in sys.modules)
    popen(self, args, *a, **k)
subprocess.Popen.__init__ = record
sys.argv = ["dlbench", *sys.argv[1:]]
import atexit  # the command ends without unwinding (launch/leave.py), after its exit handlers
atexit.register(lambda: print("ranks started with torch imported:", seen, file=sys.stderr))
from dlbench.__main__ import main
main()
"""


@pytest.mark.slow
@LINUX
def test_ranks_start_before_the_checks_and_a_failed_check_stops_them(data, tmp_path, db):
    """The ranks start before the command imports torch; the block check then fails: one line, exit 2,
    no rank left, nothing written or stored."""
    output = tmp_path / "p.zarr"
    args = [a if a != "4x16x16" else "4x64x8" for a in _run_args(data, output, "--db", db, "--gpus", "2")]
    proc = subprocess.Popen([sys.executable, "-c", RECORDING, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    *lines, seen = err.strip().splitlines()
    assert seen == "ranks started with torch imported: [False]"
    assert_user_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, "\n".join(lines)),
                      "block 4x64x8 is larger than the volume")
    assert not output.exists() and not Path(db).exists()
    # The ranks ran in a session of their own, and orphans would have left this process's tree.
    assert not [pid for pid in _all_pids() if f"dlbench-torchrun-{proc.pid}-" in _cmdline(pid)], "a rank outlived its run"


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and not _gone(int(p.name))]


@pytest.mark.slow
@LINUX
def test_ctrl_c_of_two_ranks_leaves_no_process(data, tmp_path, db):
    output = tmp_path / "stopped.zarr"
    proc = _started(_run_args(data, output, "--db", db, "--gpus", "2", "--readers", "1", "--writers", "1",
                              "--queue", "1", model=data["slower"]), output, blocks=2)
    pids = _descendants(proc.pid)
    assert len(pids) >= 3  # the launcher, two ranks
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    wait_gone(pids)
    with Store(db) as store:
        assert [r.status for r in store.results(workload="volume")] == ["interrupted"]


@pytest.mark.slow
def test_a_rank_that_dies_is_a_stored_error_with_its_output(data, tmp_path, db):
    """Rank 1 killed by the kernel partway (here: by the test): the run ends at once as an error
    that names the rank, with the ranks' output; rank 0 does not wait on in a collective."""
    output = tmp_path / "died.zarr"
    proc = _started(_run_args(data, output, "--db", db, "--gpus", "2", "--readers", "1", "--writers", "1",
                              "--queue", "1", model=data["slower"]), output, blocks=2)
    launcher = next(p for p in _descendants(proc.pid) if "dlbench.launch.ranks" in _cmdline(p))
    rank1 = next(p for p in _descendants(launcher) if _environ(p).get("RANK") == "1")
    os.kill(rank1, signal.SIGKILL)
    assert proc.wait(timeout=120) == 1
    with Store(db) as store:
        (result,) = store.results(workload="volume")
    assert result.status == "error"
    assert result.error == "2 processes returned no result: rank 1 died from SIGKILL; the other ranks were stopped"
    assert "rank 1 died from SIGKILL" in result.traces["stderr"]


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def _environ(pid: int) -> dict[str, str]:
    with contextlib.suppress(OSError):
        pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
    return {}
