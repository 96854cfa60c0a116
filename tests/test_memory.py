"""The memory a process can take (measure/memory.py), from fake /proc and cgroup trees."""

from dlbench.measure.memory import available_memory

GB = 10**9


def fake(tmp_path, cgroup_lines, files):
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       {512 * GB // 1024} kB\nMemAvailable:   {400 * GB // 1024} kB\n")
    (proc / "self" / "cgroup").write_text("".join(line + "\n" for line in cgroup_lines))
    for name, text in files.items():
        path = cgroups / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return str(proc), str(cgroups)


def test_without_a_limit_the_system_memory_available_counts(tmp_path):
    proc, cgroups = fake(tmp_path, ["0::/"], {"memory.max": "max", "memory.current": str(3 * GB)})
    assert available_memory(proc, cgroups) == 400 * GB // 1024 * 1024


def test_a_batch_jobs_cgroup_v2_limit_counts_where_it_is_tighter(tmp_path):
    proc, cgroups = fake(tmp_path, ["0::/system.slice/slurmstepd.scope/job_42"],
                         {"system.slice/slurmstepd.scope/job_42/memory.max": str(64 * GB),
                          "system.slice/slurmstepd.scope/job_42/memory.current": str(10 * GB)})
    assert available_memory(proc, cgroups) == 54 * GB


def test_a_containers_cgroup_v1_limit_counts_and_no_limit_is_ignored(tmp_path):
    proc, cgroups = fake(tmp_path, ["4:memory:/docker/abc", "3:cpu:/docker/abc"],
                         {"memory/memory.limit_in_bytes": str(32 * GB), "memory/memory.usage_in_bytes": str(40 * GB),
                          "memory/docker/abc/memory.limit_in_bytes": "9223372036854771712",
                          "memory/docker/abc/memory.usage_in_bytes": str(GB)})
    assert available_memory(proc, cgroups) == 0  # over its limit: nothing left


def test_nothing_known_is_none(tmp_path):
    assert available_memory(str(tmp_path / "none"), str(tmp_path / "none")) is None
