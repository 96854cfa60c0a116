"""A dlbench plug-in (DLBENCH_PLUGINS=dlbench_testmodels) with models that misbehave on
their first forward pass, to test that suites survive them. When $DLBENCH_TEST_MARKER
names a file, a misbehaving model creates it first, so a test knows where the run is."""

import os
import signal
import time

import torch
import torch.nn as nn

from dlbench.models.registry import ModelEntry, register


class Tiny(nn.Module):
    def __init__(self, before=None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 10)
        self.before = before

    def forward(self, x):
        if self.before:
            self.before()
        return self.fc(self.conv(x).mean(dim=(2, 3)))


def _reached() -> None:
    marker = os.environ.get("DLBENCH_TEST_MARKER")
    if marker:
        open(marker, "a").close()


def _abort() -> None:
    _reached()
    os.abort()


def _oom() -> None:
    _reached()
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 GiB")


def _cuda_error() -> None:
    _reached()
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def _hang() -> None:
    _reached()
    time.sleep(3600)


def _stubborn() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _reached()
    time.sleep(3600)


def _native() -> None:
    """Held in one long native call, where no Python signal handler can run (a long convolution on a CPU)."""
    import hashlib

    _reached()
    hashlib.pbkdf2_hmac("sha256", b"dlbench", b"salt", int(os.environ.get("DLBENCH_TEST_ROUNDS", "50000000")))


def _sleep() -> None:
    _reached()
    time.sleep(float(os.environ.get("DLBENCH_TEST_SLEEP", "0")))


for name, before in [("tiny-model", None), ("abort-model", _abort), ("oom-model", _oom),
                     ("cudaerror-model", _cuda_error), ("hang-model", _hang), ("stubborn-model", _stubborn),
                     ("sleep-model", _sleep), ("native-model", _native)]:
    register(ModelEntry(name, name, lambda before=before: Tiny(before), (3, 8, 8)))
