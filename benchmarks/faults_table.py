"""The table of benchmarks/faults.sh: for each injected fault (a run's tag), what `dlbench doctor
--format json` said: the verdict, the comparison and the first cause with its share of the step.

    python3 benchmarks/faults_table.py doctor.json
"""

import json
import sys

EXPECTED = {  # tag -> the first cause the doctor must name ('' for a clean control: none)
    "clean": "", "clean-fwdbwd": "", "gpu-neighbour": "another process on the GPU",
    "gpu-neighbour-profiled": "another process on the GPU", "jpeg-cpu-contention-profiled": "CPU contention",
    "nccl-sockets": "degraded all-reduce path", "jpeg-cpu-contention": "CPU contention",
    "jpeg-few-workers": "too few loader workers", "small-batch": "launch-bound",
}


def ratio(d: dict) -> str:
    c = d.get("comparison") or {}
    if c.get("ratio") is None:
        return "-"
    what = "of 1 GPU" if c.get("kind") == "one GPU" else "of its best run" if c.get("kind") == "history" else "of ref."
    return f"{c['ratio']:.2f}x {what}"


def main(path: str) -> int:
    diagnoses = json.load(open(path))["diagnoses"]
    newest = {}
    for d in diagnoses:
        if d.get("tag") and (d["tag"] not in newest or d["started"] >= newest[d["tag"]]["started"]):
            newest[d["tag"]] = d
    print("| run (tag) | figure | verdict | compared | first cause | share of step | right? |")
    print("| --- | ---: | --- | --- | --- | ---: | --- |")
    wrong = 0
    for tag, d in newest.items():
        # the first measured cause (machine findings such as a low matmul ceiling carry no share)
        first = next((c for c in d["causes"] if c.get("share_of_step") is not None), {})
        name, share = first.get("name", ""), first.get("share_of_step")
        want = EXPECTED.get(tag)
        right = "-" if want is None else ("yes" if name == want or (want and name.startswith(want)) else "no")
        wrong += right == "no"
        figure = f"{d['figure']['value']:,.0f} {d['figure']['unit']}" if d["figure"]["value"] else "-"
        print(f"| {tag} | {figure} | {d['verdict']} | {ratio(d)} | {name or 'none'} | "
              f"{'-' if share is None else f'{share:.0%}'} | {right} |")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
