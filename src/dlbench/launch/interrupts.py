"""Ctrl-C (SIGINT), SIGTERM and SIGHUP, for every dlbench command: this module is their one owner.

`install()` runs first thing in a `dlbench` process (`dlbench.__main__`), before the command
line loads, so a signal pressed in the first second is answered too, and also where a shell
started dlbench with SIGINT ignored (a script's background job: `dlbench suite & … kill -INT`).

What a signal does (SIGHUP, a closed terminal or an ended SSH session, is a stop like SIGTERM, except
where the command was started under `nohup`, which asked that it go on):
- by default, KeyboardInterrupt in the main thread: the stage unwinds, `stop()` runs what is
  pending (the running benchmark stored as `interrupted`), says in one line what was kept
  (`kept()`), and exits with status 130;
- inside `Interrupts()` (a suite supervising its child process), the first signal only asks:
  the supervisor stops the child, stores it as interrupted and breaks off; a second one raises
  KeyboardInterrupt at once.
A main thread held in native code (one long convolution on a CPU) cannot take a Python signal
handler, so a watchdog thread hears the signal through the wakeup fd and, if the command has
not ended GRACE_S later, does the same stop from there.
A signal that lands while the main thread imports is held until the import is done: torch's
imports run Python inside C++ (pybind11), where a KeyboardInterrupt aborts the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 2.5  # after a signal that should stop the command, before the watchdog stops it
POLL_S = 0.02  # how often the watchdog looks whether a held signal's import is done
EXIT_STATUS = 130


class _Owner:
    def __init__(self) -> None:
        self.count = 0
        self.signal_name: str | None = None
        self.deferring = 0  # > 0 inside Interrupts(): the first signal only asks
        self.lock = threading.RLock()
        self.pending: list[Callable[[], None]] = []  # what to store if stopped now
        self.kept: list[Callable[[], str]] = []  # what the last line says was kept
        self.installed = False
        self.owned: list[int] = []  # the signals install() took over
        self.stopping = False
        self.ran_pending = False  # a stop stored what was running
        self.held: int | None = None  # a signal heard inside an import, to deliver again after it
        self.again = False  # the next signal is the held one, delivered again: not a new one

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.again:
            self.again = False
        else:
            self.count += 1
            self.signal_name = signal.Signals(signum).name
        if self.stopping or (self.deferring and self.count == 1):
            return
        if _importing(frame):
            self.held = signum
            return
        raise KeyboardInterrupt


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _deliver_held() -> bool:
    """Send the held signal to the main thread again once it is out of its import; True if sent."""
    main = threading.main_thread().ident
    if OWNER.held is None or main is None or _importing(sys._current_frames().get(main)):
        return False
    signum, OWNER.held, OWNER.again = OWNER.held, None, True
    signal.pthread_kill(main, signum)
    return True


OWNER = _Owner()


def install() -> None:
    """Own SIGINT, SIGTERM and SIGHUP in this (main) thread, whatever the shell left SIGINT as (a script's
    background job ignores it, yet `kill -INT` must stop dlbench); a SIGHUP ignored is left so: `nohup`."""
    if OWNER.installed or threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        signal.signal(sig, OWNER.handle)
        OWNER.owned.append(sig)
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(reader, writer), name="dlbench-interrupts", daemon=True).start()
    os.register_at_fork(after_in_child=_forget)
    OWNER.installed = True


def _forget() -> None:
    """In a forked child (a DataLoader worker): Python's own handling again. Its signals must not reach
    this process's watchdog through the wakeup socket the two would share, and stop the benchmark."""
    if not OWNER.installed:
        return
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
        for sig in OWNER.owned:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    OWNER.installed = False
    OWNER.pending.clear()
    OWNER.kept.clear()


def _watch(reader: socket.socket, writer: socket.socket) -> None:  # writer: kept open with the reader
    """The watchdog's loop. It never raises: a traceback from this thread would print beside the stop's
    one line (or after it), and a watchdog that died could no longer stop a command held in native code."""
    heard = 0
    deadline: float | None = None
    while True:
        try:
            got = _heard(reader, deadline)
            if got is None:
                if _deliver_held():
                    heard -= 1  # its byte comes through here again
                elif deadline is not None and time.monotonic() >= deadline:
                    stop(None)  # the main thread did not come back in time
                    return
                continue
            heard += got
            # The first signal inside Interrupts() is the supervisor's to act on; any other must stop the command.
            if heard and deadline is None and not (OWNER.deferring and heard == 1):
                deadline = time.monotonic() + GRACE_S
        except Exception:  # noqa: BLE001 - see above; wait a moment rather than spin on a failing socket
            time.sleep(POLL_S)


def _heard(reader: socket.socket, deadline: float | None) -> int | None:
    """How many stopping signals came through the wakeup socket; None where none came before the wait
    ended (the deadline, or a poll for a held signal)."""
    wait = None if deadline is None else deadline - time.monotonic()
    if OWNER.held is not None and (wait is None or wait > POLL_S):
        wait = POLL_S
    # Never a timeout of 0: that makes the socket non-blocking, and recv then raises BlockingIOError
    # (not socket.timeout) where no byte is waiting, as at a deadline just reached.
    reader.settimeout(None if wait is None else max(wait, 0.001))
    try:
        # One byte per signal, its number; other handlers' signals (torch's SIGCHLD for DataLoader
        # workers) come through here too and are none of the watchdog's business.
        return sum(byte in SIGNALS for byte in reader.recv(64))
    except (socket.timeout, BlockingIOError, InterruptedError):
        return None


class Interrupts:
    """A stage that takes the first signal as a request (it polls `count`); a second stops at once."""

    def __enter__(self) -> "Interrupts":
        OWNER.deferring += 1
        return self

    def __exit__(self, *exc) -> None:
        OWNER.deferring -= 1

    @property
    def count(self) -> int:
        return OWNER.count

    @property
    def signal_name(self) -> str | None:
        return OWNER.signal_name


def signalled() -> bool:
    return OWNER.count > 0


@contextlib.contextmanager
def pending(action: Callable[[], None]) -> Iterator[Callable[[], bool]]:
    """`action` (e.g. store the running benchmark as interrupted) runs if the command is stopped
    inside the block. Yields `settle()`, which drops the action; False if a stop already ran it."""
    with OWNER.lock:
        OWNER.pending.append(action)

    def settle() -> bool:
        with OWNER.lock:
            if action in OWNER.pending:
                OWNER.pending.remove(action)
                return True
            return False

    try:
        yield settle
    finally:
        if not signalled():  # else left for stop(), which may run while this unwinds
            settle()


@contextlib.contextmanager
def kept(say: Callable[[], str]) -> Iterator[None]:
    """While the block runs, a stop says `say()` (what the store kept, how to go on)."""
    OWNER.kept.append(say)
    try:
        yield
    finally:
        if not signalled():  # else what stop() says, when the command ends
            OWNER.kept.remove(say)


def stop(say: Callable[[str], None] | None) -> None:
    """Run what is pending, say in one line what was kept, and exit 130 (once, from any thread).
    `say` prints the line (the command's view); None: plain stderr."""
    with OWNER.lock:
        if OWNER.stopping:
            return
        OWNER.stopping = True
        OWNER.ran_pending = bool(OWNER.pending)
        for action in reversed(OWNER.pending):
            with contextlib.suppress(Exception):
                action()
        OWNER.pending.clear()
        line = "nothing was stored"
        with contextlib.suppress(Exception):
            line = OWNER.kept[-1]() if OWNER.kept else line
        line = f"interrupted: {line}"
        try:
            say(line) if say else print(line, file=sys.stderr)
        except Exception:  # noqa: BLE001 - the view may be mid-line in another thread
            with contextlib.suppress(Exception):  # after SIGHUP the terminal may be gone: exit all the same
                print(line, file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        # At once: the interpreter's teardown (torch's, worker threads still running) can take seconds.
        os._exit(EXIT_STATUS)


@contextlib.contextmanager
def answered(say: Callable[[str], None]) -> Iterator[None]:
    """The whole command: a signal anywhere inside ends in `stop(say)` (also where a library turned
    the KeyboardInterrupt into an exit status, as typer does)."""
    try:
        yield
    except KeyboardInterrupt:
        stop(say)
    if signalled() and not OWNER.deferring:
        stop(say)
