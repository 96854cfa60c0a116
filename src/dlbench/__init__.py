"""dlbench: deep learning benchmarks for GPU machines."""

__version__ = "0.1.0"
