"""Where a spec runs, decided once: in one process (this one, or one of its own), or on torchrun's
ranks, one process per GPU (`--gpus N`; on the CPU, N processes). The launchers ask a spec's
`Placement` and none reads its GPU count itself; a result names the count once, `Run.processes`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.errors import UserError


@dataclass(frozen=True)
class Placement:
    processes: int
    device: str

    @property
    def ranks(self) -> bool:
        """Whether torchrun starts the run's processes; else one process runs it."""
        return self.processes > 1

    def mode(self, isolated: bool) -> str:
        """The launch as a result's traces name it."""
        return "torchrun" if self.ranks else "isolated" if isolated else "in-process"

    def fingerprint(self) -> dict[str, Any]:
        """The machine's fingerprint as the process that starts the run takes it. Before ranks it
        starts no CUDA: the ranks measure, and a context here would hold memory on their first GPU."""
        from dlbench.system.info import fingerprint, launcher_fingerprint

        return launcher_fingerprint() if self.ranks else fingerprint()

    def command(self, spec_file: Path, result_file: Path) -> list[str]:
        """The command of a run in processes of its own (launch/worker.py, under torchrun for ranks)."""
        if self.ranks:
            from dlbench.launch import torchrun

            return torchrun.command(spec_file, result_file, self.processes)
        return [sys.executable, "-m", "dlbench.launch.worker", str(spec_file), str(result_file)]

    def check(self) -> None:
        """The device must exist; ranks need a GPU each (any number of them on the CPU)."""
        import torch

        from dlbench.workloads.runtime import resolve_device

        device = resolve_device(self.device)
        if self.ranks and self.device != "cpu":
            present = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if self.processes > present:
                raise UserError(f"--gpus {self.processes} asked for, but this machine has {present} GPU(s)"
                                f"{'' if present else ' (use --device cpu to run the processes on the CPU)'}")
        if self.ranks and device.type == "cuda" and device.index not in (None, 0):
            raise UserError("--gpus uses GPUs 0..N-1; pick visible GPUs with CUDA_VISIBLE_DEVICES instead of --device cuda:N")


def of(spec) -> Placement:
    return Placement(spec.gpus, spec.device)
