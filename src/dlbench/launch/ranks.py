"""`python -m dlbench.launch.ranks N ARGS...`: N processes of `python ARGS...` on this host, one
per GPU, each with the environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...).

What `torchrun --standalone` does on one host, without its agent: the agent's own import of torch
and its rendezvous before the ranks start, and its exit barrier after they end, are time a user
waits for nothing (docs/journal.md, 2026-11-26, gives the seconds). This process imports no torch; rank 0
hosts the process group's store on a free port (the env:// rendezvous).

The guarantees are torchrun's:
- the ranks run in this process's process group, so a supervisor that kills the group (a stop,
  a timeout) kills every rank;
- a rank that fails (a status other than 0, a signal) ends the others, SIGTERM then SIGKILL, and
  this process exits with a status other than 0 after one line on stderr saying which rank;
- this process dies with its parent, and each rank with this process (PR_SET_PDEATHSIG).

One thing differs: a rank that has finished says so (`said_done`, as it leaves) before the
seconds in which the operating system and the driver release its pinned memory and GPU, and this
process ends once every rank has said it or ended. The result is on disk by then; the rest of the
ranks' end is no time the user waits for (docs/journal.md, 2026-11-26, last).

Multi-node runs still go through torchrun (launch/torchrun.py `command` with a rendezvous).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time

STOP_GRACE_S = 2.0  # after SIGTERM, before SIGKILL, for the ranks left when one failed
DONE_FD = "DLBENCH_RANK_DONE_FD"  # where a rank says it has finished: the write end of this process's pipe


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(rank: int, world: int, port: int, done_fd: int | None = None) -> dict[str, str]:
    """Rank `rank`'s environment, as torchrun sets it for one node of `world` processes, and where it
    says it has finished."""
    env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
           "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(rank),
           "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "DLBENCH_RANKS": str(os.getpid())}
    if done_fd is not None:
        env[DONE_FD] = str(done_fd)
    # torchrun's default for several processes, kept so that runs measure as they did under it
    env.setdefault("OMP_NUM_THREADS", "1")
    if os.path.exists("/sys/class/net/lo"):  # gloo connects the ranks of this one host over loopback, not over
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # whatever address the host name resolves to
    return env


def _die_with_parent() -> None:
    """Be killed when the process that started this one dies (a supervisor killed with SIGKILL).
    In a rank it runs between fork and exec, and holds across the exec."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _why(rank: int, code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        return f"rank {rank} died from {name}"
    return f"rank {rank} exited with status {code}"


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def said_done(code: int) -> None:
    """In a rank started here: tell this process the rank has finished with `code` (its result
    written, its output flushed) and only its end is left. Elsewhere (torchrun, alone): nothing."""
    fd = os.environ.get(DONE_FD)
    if fd is None or os.environ.get("DLBENCH_RANKS") != str(os.getppid()):  # a process a rank started: not asked
        return
    with contextlib.suppress(OSError, ValueError):  # the launcher gone: nobody is left to tell
        os.write(int(fd), f"{os.environ.get('RANK', '0')} {code}\n".encode())


def run(world: int, args: list[str]) -> int:
    """Start the ranks, wait until each has said it finished or has ended; the exit status (0 when
    every rank finished with 0)."""
    port = free_port()
    said, done_fd = os.pipe()
    procs = [subprocess.Popen([sys.executable, *args], stdin=subprocess.DEVNULL,
                              env=environment(rank, world, port, done_fd), pass_fds=(done_fd,),
                              preexec_fn=_die_with_parent)  # noqa: PLW1509 - this process has no threads
             for rank in range(world)]
    os.close(done_fd)
    running = {proc.pid: (rank, proc) for rank, proc in enumerate(procs)}
    finished: set[int] = set()  # the ranks that said they finished with 0
    try:
        while len(finished) < world:
            for rank, code in _news(said, running):
                if rank in finished:  # what a rank does after it said it finished is its own end
                    continue
                if code != 0:
                    _stop([p for r, p in running.values() if r != rank])
                    print(f"{_why(rank, code)}; the other ranks were stopped", file=sys.stderr, flush=True)
                    return code if code > 0 else 128 - code
                finished.add(rank)
    finally:
        os.close(said)
    return 0


def _news(said: int, running: dict[int, tuple[int, subprocess.Popen]]) -> list[tuple[int, int]]:
    """(rank, exit status) of the ranks that said they finished or that ended, waiting up to 50 ms
    for the first; a rank's status is what it said, or how its process ended."""
    news = []
    if select.select([said], [], [], 0.05)[0]:
        for line in os.read(said, 4096).decode().splitlines():
            rank, code = line.split()
            news.append((int(rank), int(code)))
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        if pid in running:
            rank, proc = running.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            news.append((rank, proc.returncode))
    return news


def main(argv: list[str]) -> int:
    _die_with_parent()
    for sig in (signal.SIGINT, signal.SIGTERM):  # a stop ends this process quietly; the ranks get it too
        signal.signal(sig, signal.SIG_DFL)
    if len(argv) < 2 or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: python -m dlbench.launch.ranks N ARGS...", file=sys.stderr)
        return 2
    return run(int(argv[0]), argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
