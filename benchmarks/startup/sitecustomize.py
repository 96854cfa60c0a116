"""Where a command's fixed costs go, child processes included.

With this folder first on PYTHONPATH and DLBENCH_STARTUP_PROFILE=DIR set, every Python process
that starts (the command, suite workers, torchrun and its ranks) profiles its main thread with
cProfile and at exit writes DIR/<pid>.prof and one line to DIR/processes.tsv: pid, start time,
wall seconds, command line. `python benchmarks/startup/summary.py DIR` prints them.
"""
import os

if os.environ.get("DLBENCH_STARTUP_PROFILE"):
    import atexit
    import cProfile
    import sys
    import time

    _folder = os.environ["DLBENCH_STARTUP_PROFILE"]
    os.makedirs(_folder, exist_ok=True)
    _start = time.time()
    _profile = cProfile.Profile()
    _profile.enable()

    def _write() -> None:
        _profile.disable()
        pid = os.getpid()
        _profile.dump_stats(os.path.join(_folder, f"{pid}.prof"))
        with open(os.path.join(_folder, "processes.tsv"), "a", encoding="utf-8") as out:
            out.write(f"{pid}\t{_start:.3f}\t{time.time() - _start:.3f}\t{' '.join(sys.argv)[:300]}\n")

    atexit.register(_write)
