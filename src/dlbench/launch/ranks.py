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
Multi-node runs still go through torchrun (launch/torchrun.py `command` with a rendezvous).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

STOP_GRACE_S = 2.0  # after SIGTERM, before SIGKILL, for the ranks left when one failed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(rank: int, world: int, port: int) -> dict[str, str]:
    """Rank `rank`'s environment, as torchrun sets it for one node of `world` processes."""
    env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
           "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(rank),
           "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "DLBENCH_RANKS": str(os.getpid())}
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


def run(world: int, args: list[str]) -> int:
    """Start the ranks, wait for all of them; the exit status (0 when every rank ended with 0)."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, *args], stdin=subprocess.DEVNULL, env=environment(rank, world, port),
                              preexec_fn=_die_with_parent)  # noqa: PLW1509 - this process has no threads
             for rank in range(world)]
    running = {proc.pid: (rank, proc) for rank, proc in enumerate(procs)}
    while running:
        pid, status = os.wait()  # whichever rank ends first, at once
        if pid not in running:
            continue
        rank, proc = running.pop(pid)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            _stop([p for _, p in running.values()])
            print(f"{_why(rank, code)}; the other ranks were stopped", file=sys.stderr, flush=True)
            return code if code > 0 else 128 - code
    return 0


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
