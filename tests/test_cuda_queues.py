"""dlbench raises CUDA's hardware queues before any CUDA context exists, unless the user chose."""

import os
import subprocess
import sys

PRINT = "import dlbench, os; print(os.environ['CUDA_DEVICE_MAX_CONNECTIONS'])"


def _imported_value(env: dict) -> str:
    done = subprocess.run([sys.executable, "-c", PRINT], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_import_sets_32_queues():
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    assert _imported_value(env) == "32"


def test_the_users_setting_wins():
    assert _imported_value({**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "4"}) == "4"
