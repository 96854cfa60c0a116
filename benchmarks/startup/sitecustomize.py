"""Where a command's fixed costs go, child processes included.

With this folder first on PYTHONPATH and DLBENCH_STARTUP_PROFILE=DIR set, every Python process
that starts (the command, suite workers, torchrun and its ranks) profiles its main thread with
cProfile and at exit writes DIR/<pid>.prof and one line to DIR/processes.tsv: pid, start time,
wall seconds, command line. A daemon thread also samples every thread's stack each
DLBENCH_STARTUP_INTERVAL seconds (default 0.01) and writes them to DIR/<pid>.samples, one JSON
line each: {"t": seconds since start, "thread": name, "stack": ["module:function", ...]},
outermost first, so waits on other threads and the order of phases show too.
`python benchmarks/startup/summary.py DIR [--timeline]` prints them.
"""
import os

if os.environ.get("DLBENCH_STARTUP_PROFILE"):
    import atexit
    import cProfile
    import sys
    import threading
    import time

    _folder = os.environ["DLBENCH_STARTUP_PROFILE"]
    os.makedirs(_folder, exist_ok=True)
    _start = time.time()
    _clock = time.perf_counter()
    # DLBENCH_STARTUP_CPROFILE=0: the samples alone (cProfile slows every Python call)
    _profile = cProfile.Profile() if os.environ.get("DLBENCH_STARTUP_CPROFILE", "1") != "0" else None
    if _profile is not None:
        _profile.enable()
    _samples: list = []  # (seconds, thread name, stack tuple)

    def _sample(interval: float) -> None:
        # id(code) -> (code, "module:function"): a frame formatted once; by id, as hashing a code
        # object hashes its constants, and the code kept so that its id stays its own.
        names: dict = {}
        stacks: dict = {}  # one tuple per distinct stack: idle threads repeat theirs every sample
        me = threading.get_ident()
        while True:
            time.sleep(interval)
            now = time.perf_counter() - _clock
            threads = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack = []
                while frame is not None:
                    code = frame.f_code
                    known = names.get(id(code))
                    if known is None:
                        known = names[id(code)] = code, f"{frame.f_globals.get('__name__', '?')}:{code.co_qualname}"
                    stack.append(known[1])
                    frame = frame.f_back
                stack.reverse()
                stack = tuple(stack)
                _samples.append((now, threads.get(ident, f"thread-{ident}"), stacks.setdefault(stack, stack)))

    threading.Thread(
        target=_sample,
        args=(float(os.environ.get("DLBENCH_STARTUP_INTERVAL", "0.01")),),
        name="dlbench-startup-sampler",
        daemon=True,
    ).start()

    def _write() -> None:
        import json  # here, not at start, so the command's own imports are as without the profile

        pid = os.getpid()
        if _profile is not None:
            _profile.disable()
            _profile.dump_stats(os.path.join(_folder, f"{pid}.prof"))
        with open(os.path.join(_folder, f"{pid}.samples"), "w", encoding="utf-8") as out:
            for t, thread, stack in list(_samples):
                out.write(json.dumps({"t": round(t, 4), "thread": thread, "stack": stack}) + "\n")
        with open(os.path.join(_folder, "processes.tsv"), "a", encoding="utf-8") as out:
            out.write(f"{pid}\t{_start:.3f}\t{time.time() - _start:.3f}\t{' '.join(sys.argv)[:300]}\n")

    atexit.register(_write)
