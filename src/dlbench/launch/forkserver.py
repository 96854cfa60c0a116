"""Benchmark processes forked from one that has imported torch already.

Every isolated benchmark runs in a fresh process (DESIGN.md), and a fresh Python spends seconds
importing torch, torchvision and the workloads before it can start: 5 s a benchmark on two CPU
cores, more than the smoke suite's steps take. So a suite starts one server process that imports
them once, runs nothing, and forks a child for each benchmark. A child is as fresh as a new
process for what is measured: its own CUDA context (the server never touches CUDA), its own
session, output, environment and working directory, nothing run before; only the imports are
shared, as pages copied when written.

The protocol: a request is one line of JSON on the server's standard input (argv for
`launch/worker.py`, environment, working directory, and the run's folder). The child writes its
pid into the folder's `pid` file once it leads a session of its own (so a known pid always names a
process group to signal), and the server its exit status (as `subprocess` gives it: negative for
a signal) into `exit` once reaped; `Forked` reads them as `subprocess.Popen`'s
`poll` and `wait` would. A request whose folder is gone (the run was stopped before it began) is
skipped. The server ends with the process that started it, and its children with it.

`DLBENCH_FORKSERVER=0` (internal, for measurements) makes every benchmark a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, NoReturn

ENV = "DLBENCH_FORKSERVER"
PRELOAD = ("torch", "torch.distributed", "torchvision.models", "dlbench.launch.worker", "dlbench.launch.execute",
           "dlbench.workloads.builtin", "dlbench.workloads.train", "dlbench.workloads.infer",
           "dlbench.workloads.fwdbwd", "dlbench.data.images")
PID, EXIT = "pid", "exit"
POLL_S = 0.02


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() != "0"


class Server:
    """The server process, started now; its preloading runs on while the caller goes on."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "dlbench.launch.forkserver"], stdin=subprocess.PIPE,
                                         stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, argv: list[str], env: dict[str, str], folder: Path, log: Path) -> "Forked":
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "folder": str(folder), "log": str(log)}
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # the server is gone: the child reads as killed
            pass
        return Forked(self, folder)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its children die with it (worker.py `_die_with_parent`)
        self.proc.wait()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


class Forked:
    """A child of the server, read as `subprocess.Popen` reads its own: `pid`, `poll`, `wait`,
    `returncode`. Until the server has forked it, `pid` is None and `poll` says it runs."""

    def __init__(self, server: Server, folder: Path) -> None:
        self.server, self.folder = server, folder
        self.returncode: int | None = None
        self._pid: int | None = None
        self.abandoned = False

    @property
    def pid(self) -> int | None:
        if self._pid is None:
            self._pid = _read_int(self.folder / PID)
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is None:
            code = _read_int(self.folder / EXIT)
            if code is None and not self.server.alive():
                code = -signal.SIGKILL  # the server's end took its children with it
            if code is None and self.abandoned and self.pid is None:
                code = -signal.SIGKILL  # stopped before it was forked: it never runs (see `_handle`)
            self.returncode = code
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(POLL_S)
        return self.returncode

    def kill(self, sig: signal.Signals) -> None:
        if self.pid is None:
            self.abandoned = True
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def serving(env: dict[str, str], log: Path) -> Iterator[Server]:
    server = Server(env, log)
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------- the server process


def main() -> NoReturn:
    from dlbench.launch.environment import prepare
    from dlbench.launch.worker import _die_with_parent

    _die_with_parent()
    prepare()
    for name in PRELOAD:
        with contextlib.suppress(Exception):  # a child that needs it imports it itself, and says what failed
            __import__(name)
    children: dict[int, Path] = {}
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.05)
        if ready:
            data = os.read(0, 65536)
            if not data:  # the suite closed its end: nothing more will be asked
                break
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _handle(json.loads(line), children)
        _reap(children)
    while children:
        _reap(children)
        time.sleep(POLL_S)
    os._exit(0)


def _handle(request: dict, children: dict[int, Path]) -> None:
    folder = Path(request["folder"])
    if not folder.is_dir():  # stopped before it began
        return
    pid = os.fork()
    if pid == 0:
        _child(request)
    children[pid] = folder


def _reap(children: dict[int, Path]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        folder = children.pop(pid, None)
        if folder is not None and folder.is_dir():
            _write(folder / EXIT, os.waitstatus_to_exitcode(status))


def _write(path: Path, number: int) -> None:
    from dlbench.launch.worker import write_json

    with contextlib.suppress(OSError):  # the folder removed meanwhile: nobody reads it
        write_json(number, path)


def _child(request: dict) -> NoReturn:
    """What `python -m dlbench.launch.worker` does, in the forked child; never returns to the server."""
    code = 1
    try:
        os.setsid()  # a session of its own, as isolated.py starts its workers
        # published only now: a pid read before the session existed named no group to stop it by
        _write(Path(request["folder"]) / PID, os.getpid())
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
        _fresh_random_state()
        from dlbench.launch.leave import leave
        from dlbench.launch.ranks import said_done
        from dlbench.launch.worker import main as worker_main

        code = worker_main(request["argv"])
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 1
    except BaseException:  # noqa: BLE001 - said in the run's output, as an uncaught error in a worker is
        import traceback

        traceback.print_exc()
        code = 1
    try:
        leave(code, said_done)
    finally:
        os._exit(code)


def _fresh_random_state() -> None:
    # numpy's global generator was seeded once, at the server's import: a fresh process would have its own
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()


if __name__ == "__main__":
    main()
