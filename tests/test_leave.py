"""A process that imported torch ends without the teardown of its buffers and modules, yet runs its
exit handlers and says everything it wrote; one that did not exits as usual."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, os, sys
    {imports}
    from dlbench.launch.leave import leave
    atexit.register(lambda: open(sys.argv[1], "w").write("handlers ran"))
    class Buffer:  # stands for a pinned buffer, freed by the interpreter's own teardown
        def __del__(self, write=os.write):  # the module's names may be gone by then
            write(2, b"freed one by one")
    kept = Buffer()
    sys.stdout.write("unflushed line, no newline")
    leave(3)
""")


@pytest.mark.parametrize("torch", [True, False])
def test_leave_runs_the_exit_handlers_and_flushes(tmp_path, torch):
    marker = tmp_path / "marker"
    script = SCRIPT.format(imports="import torch" if torch else "")
    done = subprocess.run([sys.executable, "-c", script, str(marker)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert done.stdout == "unflushed line, no newline"
    assert marker.read_text() == "handlers ran"
    assert ("freed one by one" in done.stderr) is not torch
