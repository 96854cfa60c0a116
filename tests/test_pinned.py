"""Page-locked buffers (data/pinned.py): touched in chunks, registered, unregistered before freed."""

import gc

import pytest
import torch

from dlbench.data import pinned


def test_a_buffer_is_touched_in_chunks_by_threads_and_holds_zeros(monkeypatch):
    monkeypatch.setattr(pinned, "TOUCH_CHUNK", 1000)
    threads = set()
    zero = torch.Tensor.zero_

    def spy(chunk):
        import threading

        threads.add(threading.current_thread().name)
        return zero(chunk)

    monkeypatch.setattr(torch.Tensor, "zero_", spy)
    buffer = pinned._touched(2500, torch.float32)  # 10,000 bytes: ten chunks
    assert buffer.shape == (2500,) and buffer.dtype == torch.float32 and not buffer.any()
    assert threads and all(name.startswith("dlbench-touch") for name in threads)


def test_registered_buffers_are_kept_and_unregistered_when_their_owner_goes(monkeypatch):
    registered, unregistered = [], []
    monkeypatch.setattr(pinned, "_register", lambda buffer: registered.append(buffer.data_ptr()) or True)
    monkeypatch.setattr(pinned, "_unregister", lambda device, buffers: unregistered.extend(
        b.data_ptr() for b in buffers))
    owner = pinned.Pinned(torch.device("cuda", 0))  # its finalizer was bound to the patched _unregister
    a, b = owner.empty(10, torch.uint8), owner.empty(3, torch.int16)
    assert a.numel() == 10 and b.dtype == torch.int16 and registered == [a.data_ptr(), b.data_ptr()]
    assert not unregistered
    del owner
    gc.collect()
    assert unregistered == registered


def test_a_failed_registration_falls_back_to_cuda_host_alloc(monkeypatch):
    monkeypatch.setattr(pinned, "_register", lambda buffer: False)
    asked = []
    real_empty = torch.empty

    def empty(*shape, **kwargs):
        asked.append(kwargs.get("pin_memory", False))
        kwargs.pop("pin_memory", None)
        return real_empty(*shape, **kwargs)

    monkeypatch.setattr(pinned.torch, "empty", empty)
    owner = pinned.Pinned(torch.device("cuda", 0))
    assert owner.empty(8, torch.uint8).numel() == 8
    assert asked == [False, True]  # the plain buffer, then the pinned one made instead
    assert not owner._registered


def test_the_process_exit_does_not_unregister():
    assert pinned.Pinned(torch.device("cuda", 0))._end.atexit is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the path without a GPU")
def test_registering_without_a_gpu_fails_without_raising():
    assert pinned._register(torch.zeros(16, dtype=torch.uint8)) is False
