"""Under several ranks the run builds and warms its model while the process group is still being
made on early's thread: the group is waited for at the first collective, and left at the end even
where the run never used it."""

import pytest
import torch
import torch.distributed as dist

from dlbench.workloads import distributed, early


def _ranks(monkeypatch, calls):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(early, "joined", lambda: calls.append("joined") or True)  # early made the group
    monkeypatch.setattr(dist, "is_initialized", lambda: "joined" in calls)
    monkeypatch.setattr(dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append("left"))


def test_the_group_is_joined_at_the_first_collective(monkeypatch):
    calls = []
    _ranks(monkeypatch, calls)
    with distributed.process_group(torch.device("cpu")) as group:
        assert (group.rank, group.world) == (1, 2)
        assert calls == []  # the model is built and warmed here, the group still in the making
        group.barrier()
        assert calls == ["joined", "barrier"]
        group.barrier()
    assert calls == ["joined", "barrier", "barrier", "left"]


def test_a_group_made_early_and_never_used_is_still_left(monkeypatch):
    calls = []
    _ranks(monkeypatch, calls)
    with distributed.process_group(torch.device("cpu")):
        pass
    assert calls == ["joined", "left"]


def test_a_run_that_fails_before_its_first_collective_makes_no_group_to_leave(monkeypatch):
    calls = []
    _ranks(monkeypatch, calls)
    monkeypatch.setattr(early, "joined", lambda: calls.append("joined") or False)  # early made none
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: calls.append("made"))
    with pytest.raises(ValueError), distributed.process_group(torch.device("cpu")):
        raise ValueError("the model failed to build")
    assert calls == ["joined"]  # no group made at the end only to be left, no rendezvous to hang in


def test_a_workload_that_exchanges_only_objects_gets_a_host_group(monkeypatch):
    """Volume's ranks share out blocks and gather figures, never GPU tensors: gloo, without NCCL's seconds
    of connecting the GPUs; training's gradients go through NCCL. Early's thread and the run's own join agree."""
    from dlbench.workloads import builtin  # noqa: F401 - the built-in workloads registered
    from dlbench.workloads import get

    assert get("volume").host_group and not get("train").host_group
    cuda = torch.device("cuda", 0)
    assert distributed.backend(cuda) == "nccl" and distributed.backend(cuda, host=True) == "gloo"
    assert distributed.backend(torch.device("cpu")) == "gloo"
    calls = []
    _ranks(monkeypatch, calls)
    monkeypatch.setattr(early, "joined", lambda: calls.append("joined") or False)
    monkeypatch.setattr(dist, "init_process_group", lambda kind, **k: calls.append(kind))
    monkeypatch.setattr(dist, "is_initialized", lambda: "gloo" in calls)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    with distributed.process_group(cuda, host=True) as group:
        group.barrier()
    assert calls == ["joined", "gloo", "barrier", "left"]


def test_early_makes_a_host_group_without_binding_it_to_the_gpu(monkeypatch):
    made = []
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr("dlbench.workloads.runtime.resolve_device", lambda name: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "init", lambda: None)  # no GPU here: CUDA's start is not what is tested
    monkeypatch.setattr(torch, "empty", lambda *a, **k: None)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda kind, device_id=None: made.append((kind, device_id)))
    monkeypatch.setattr(dist, "barrier", lambda: made.append("barrier"))
    try:
        early._begin("cuda", True)
        early._begin("cuda", False)
    finally:
        early._made.clear()
    assert made == [("gloo", None), "barrier", ("nccl", torch.device("cuda", 0)), "barrier"]


def test_a_gpu_ranks_all_reduce_facts(monkeypatch):
    """The facts a multi-GPU training result records, on the GPU path (the CPU path runs for real in
    test_two_processes_store_one_merged_result): the machine's answers stubbed, the record typed."""
    from dlbench.measure import nvml

    calls = []
    _ranks(monkeypatch, calls)
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.setattr(dist, "get_backend", lambda: "nccl")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: True)
    monkeypatch.setattr(nvml, "all_device_facts", lambda indices: ([{"nvlinks_active": 18} for _ in indices], None))
    group = distributed.Group(1, 2, torch.device("cuda", 1), join=lambda: None)
    facts = distributed.communication_facts(group, torch.nn.Linear(10, 3))
    assert facts.stored() == {"gradient_bytes": 4 * 33, "nccl_settings": {"NCCL_P2P_DISABLE": "1"}, "backend": "nccl",
                              "nccl_version": "2.27.3", "peer_access": True, "nvlinks_active": [18, 18]}
    assert distributed.communication_facts(distributed.Group(0, 1, torch.device("cpu")), torch.nn.Linear(1, 1)) is None
