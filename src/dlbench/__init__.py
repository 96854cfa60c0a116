"""dlbench: deep learning benchmarks for GPU machines."""

__version__ = "0.1.0"

# When the `dlbench` command began (`__main__.main` sets it; None where dlbench is used from Python):
# a run's estimate, said after torch and the checks have loaded, says how long those took.
command_started: float | None = None
