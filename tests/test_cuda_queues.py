"""Benchmark processes raise CUDA's hardware queues before any CUDA context exists, unless the
user chose; importing dlbench alone changes nothing."""

import os
import subprocess
import sys

IMPORTED = "import dlbench.cli, dlbench.workloads, os; print(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS'))"
PREPARED = "from dlbench.launch.environment import prepare; import os; prepare(); print(os.environ['CUDA_DEVICE_MAX_CONNECTIONS'])"


def _printed(code: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _unset() -> dict:
    return {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}


def test_import_has_no_side_effect():
    assert _printed(IMPORTED, _unset()) == "None"


def test_prepare_sets_32_queues():
    assert _printed(PREPARED, _unset()) == "32"


def test_the_users_setting_wins():
    assert _printed(PREPARED, {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "4"}) == "4"


def test_the_command_line_prepares_its_process():
    code = ("import os, sys\nfrom dlbench import cli\nsys.argv = ['dlbench', 'models']\ntry:\n    cli.main()\n"
            "except SystemExit:\n    pass\nprint(os.environ['CUDA_DEVICE_MAX_CONNECTIONS'])")
    assert _printed(code, _unset()).splitlines()[-1] == "32"
