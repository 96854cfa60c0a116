"""dlbench: deep learning benchmarks for GPU machines."""

import os

__version__ = "0.1.0"

# dlbench feeds the GPU from side streams (JPEG decoding, deformation, volume copies). CUDA
# funnels all streams through CUDA_DEVICE_MAX_CONNECTIONS hardware queues, 8 by default, and
# a side stream that shares a queue with the training stream waits behind the work queued
# there: nvjpeg calls of 15 ms took 100-150 ms beside ResNet-50 training on an H200 (see
# docs/performance.md). 32 is the most CUDA allows. It takes effect only if set before the
# process creates its CUDA context, so here, at import; a value the user set wins.
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
