"""The tables of benchmarks/faults.sh, from what `dlbench doctor --format json` said: for the clean
repeats (tags starting `clean`), every run's verdict, their spread and CV; for each injected fault
(a run's tag), the verdict, the comparison and the first cause with its share of the step.

    python3 benchmarks/faults_table.py doctor.json
"""

import collections
import json
import statistics
import sys

EXPECTED = {  # tag -> the first cause the doctor must name
    "gpu-neighbour": "another process on the GPU", "gpu-neighbour-profiled": "another process on the GPU",
    "gpu1-neighbour": "another process on the GPU", "cpu-spin-synthetic": "CPU contention",
    "cuda-connections-1": "changed environment", "jpeg-cpu-contention-profiled": "CPU contention",
    "nccl-sockets": "degraded all-reduce path", "jpeg-cpu-contention": "CPU contention",
    "held-two-cores": "held to", "jpeg-few-workers": "too few loader workers", "small-batch": "launch-bound",
}
CV_GPU_BOUND = 0.01


def ratio(d: dict) -> str:
    c = d.get("comparison") or {}
    if c.get("ratio") is None:
        return "-"
    what = "of 1 GPU" if c.get("kind") == "one GPU" else "of its median run" if c.get("kind") == "history" else "of ref."
    runs = (c.get("between_runs") or {}).get("runs")
    return f"{c['ratio']:.2f}x {what}" + (f" ({runs} runs)" if runs else "")


def repeats(diagnoses: list[dict]) -> int:
    """Clean repeats: how many runs, their figures' spread and CV, and the verdicts they got; a
    'slower' verdict, or a GPU-bound set spread beyond CV_GPU_BOUND, is wrong."""
    runs = collections.defaultdict(list)
    for d in diagnoses:
        if (d.get("tag") or "").startswith("clean"):
            runs[d["tag"]].append(d)
    print("| clean repeats (tag) | runs | figure min–max | CV | verdicts | right? |")
    print("| --- | ---: | --- | ---: | --- | --- |")
    wrong = 0
    for tag, found in runs.items():
        figures = [d["figure"]["value"] for d in found if d["figure"]["value"]]
        cv = statistics.stdev(figures) / statistics.fmean(figures) if len(figures) > 1 else None
        verdicts = collections.Counter(d["verdict"] for d in found)
        bad = any(v.startswith("slower") for v in verdicts) or (tag == "clean-gpu-bound" and (cv or 0) > CV_GPU_BOUND)
        wrong += bad
        unit = found[0]["figure"]["unit"]
        print(f"| {tag} | {len(found)} | {min(figures):,.0f}–{max(figures):,.0f} {unit} | "
              f"{'-' if cv is None else f'{cv:.1%}'} | "
              f"{'; '.join(f'{n} {v}' for v, n in verdicts.items())} | {'no' if bad else 'yes'} |")
    return wrong


def main(path: str) -> int:
    diagnoses = json.load(open(path))["diagnoses"]
    wrong = repeats(diagnoses)
    print()
    newest = {}
    for d in diagnoses:
        if d.get("tag") and not d["tag"].startswith("clean") and \
                (d["tag"] not in newest or d["started"] >= newest[d["tag"]]["started"]):
            newest[d["tag"]] = d
    print("| run (tag) | figure | verdict | compared | first cause | share of step | right? |")
    print("| --- | ---: | --- | --- | --- | ---: | --- |")
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
