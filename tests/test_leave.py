"""A process that started CUDA ends without CUDA's teardown, yet runs its exit handlers and says
everything it wrote; one that did not exits as usual."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, os, sys, torch
    from dlbench.launch.leave import leave
    torch.cuda.is_initialized = lambda: {started}
    atexit.register(lambda: open(sys.argv[1], "w").write("handlers ran"))
    class Buffer:  # stands for a pinned buffer, freed by the interpreter's own teardown
        def __del__(self, write=os.write):  # the module's names may be gone by then
            write(2, b"freed one by one")
    kept = Buffer()
    sys.stdout.write("unflushed line, no newline")
    leave(3)
""")


@pytest.mark.parametrize("started", [True, False])
def test_leave_runs_the_exit_handlers_and_flushes(tmp_path, started):
    marker = tmp_path / "marker"
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(started=started), str(marker)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert done.stdout == "unflushed line, no newline"
    assert marker.read_text() == "handlers ran"
    assert ("freed one by one" in done.stderr) is not started
