"""A process that runs one spec: `python -m dlbench.launch.worker SPEC.json RESULT.json`.

Used for isolated runs and, under torchrun, once per rank. Only rank 0 writes the result,
atomically (a temporary file renamed into place), so a reader never sees half a record.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dlbench.results.record import Result


def write_result(result: Result, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_dict()), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    from dlbench.errors import UserError
    from dlbench.spec import BenchmarkSpec
    from dlbench.system.info import fingerprint
    from dlbench.workloads import execute

    spec_path, result_path = Path(argv[0]), Path(argv[1])
    job = json.loads(spec_path.read_text(encoding="utf-8"))
    try:
        spec = BenchmarkSpec.from_dict(job["spec"])
        result = execute(spec, fingerprint(), suite=job.get("suite"), tag=job.get("tag"))
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:
        write_result(result, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
