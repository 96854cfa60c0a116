"""How the host's cores are shared out: one rule for the image loader, which follows it, and the
doctor, whose fix for a starved loader repeats it."""


def per_process(cores: int, processes: int) -> int:
    """The cores of one process where `processes` share the host."""
    return max(1, cores // max(1, processes))


def decoding_workers(cores: int, processes: int) -> int:
    """Loader workers that decode JPEGs get every core of their process's share but one, which the
    training loop needs to launch its kernels (docs/performance.md, "The CPU path on every core")."""
    return max(1, per_process(cores, processes) - 1)
