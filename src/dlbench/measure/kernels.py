"""Classes of device work by name: what a kernel, a copy or (on a CPU) a host operator spends
the step on. Names are all the profiler gives; the patterns follow cuDNN's, cuBLAS's, CUTLASS's,
ATen's and Inductor's naming, and a matmul kernel that does not say whether it runs on tensor
cores is judged by the precision the step ran in.
"""

from __future__ import annotations

import re

# Ranked: where streams overlap, the instant goes to the first.
CLASSES = ("tensor_core", "matmul", "elementwise", "reduction", "other", "d2d", "h2d", "d2h", "communication", "idle")
LABELS = {
    "tensor_core": "tensor-core conv/matmul", "matmul": "other conv/matmul",
    "elementwise": "elementwise/normalisation/activation", "reduction": "reductions/pooling",
    "other": "other kernels", "d2d": "device copies and fills", "h2d": "host-to-device copies",
    "d2h": "device-to-host copies", "communication": "communication (NCCL)", "idle": "GPU idle",
}
CPU_IDLE_LABEL = "outside operators (Python, dispatch, views)"

_TENSOR_CORE = re.compile(r"h884|h1688|h16816|s1688|s16816|i8816|hmma|wgmma|gmma|tensorop|tf32|bf16|f16|fp16|"
                          r"_16x8x16|e4m3|e5m2")
_PLAIN_MATMUL = re.compile(r"sgemm|dgemm|simt|winograd|fft|f32f32_f32f32|ffma")
# nvjet: cuBLAS's Hopper GEMM kernels (nvjet_sm90_tst_256x128_...), whose names give no type.
# "conv" but not "convert" or nvjpeg's "RGBAToRGBConversion" (a colour conversion, elementwise).
_MATMUL = re.compile(r"gemm|conv(?!ert|ersion)|winograd|fft|xmma|cutlass|cublas|cudnn_infer|wgrad|dgrad|fprop|"
                     r"implicit|matmul|splitk|triton_tem|_mm_|_bmm_|\bmm\b|addmm|linear|gemv|nvjet")
_NORMALISE = re.compile(r"norm|bn_|welford")
_REDUCE = re.compile(r"reduce|pool|softmax|argmax|argmin|cub::|scan|sort|topk|bincount|histogram|triton_red|"
                     r"triton_per|\bsum\b|\bmean\b|\bmax\b|\bmin\b|nll_loss|cross_entropy")
# Host operators that only make views or allocate: on a CPU their time is framework overhead.
_NO_WORK = re.compile(r"^aten::(view|_?reshape|_unsafe_view|empty.*|as_strided_?|t|transpose|expand|detach|"
                      r"resize_|flatten|unsqueeze|squeeze|permute|select|slice|alias|lift_fresh|to|"
                      r"contiguous|set_|result_type|item|_local_scalar_dense|zeros?_?like|ones_like)$|^detach")


def classify_kernel(name: str, tensor_cores_likely: bool = False) -> str:
    """A GPU kernel's class from its name. A matmul kernel whose name says neither way is taken as
    tensor-core when the precision makes that likely (autocast to a half type, TF32 on)."""
    lower = name.lower()
    if "nccl" in lower:
        return "communication"
    # Inductor's and ATen's own kinds first: their names also list the operators fused in
    # (triton_poi_fused_convolution_relu is the convolution's bias and ReLU, not a convolution).
    if lower.startswith(("triton_poi", "triton_red", "triton_per")):
        return "elementwise" if lower.startswith("triton_poi") else "reduction"
    if "elementwise_kernel" in lower:
        return "elementwise"
    if _MATMUL.search(lower) and not _NORMALISE.search(lower):
        if _TENSOR_CORE.search(lower):
            return "tensor_core"
        if _PLAIN_MATMUL.search(lower):
            return "matmul"
        return "tensor_core" if tensor_cores_likely else "matmul"
    if _NORMALISE.search(lower):
        return "elementwise"
    if _REDUCE.search(lower):
        return "reduction"
    return "elementwise"


def classify_copy(name: str) -> str:
    """A memcpy or memset on the device timeline (Kineto names: 'Memcpy HtoD (Pinned -> Device)')."""
    if "HtoD" in name:
        return "h2d"
    if "DtoH" in name:
        return "d2h"
    return "d2d"


def classify_operator(name: str) -> str:
    """A host operator's class, for runs on the CPU (no kernels there; the innermost operator works)."""
    lower = name.lower()
    if re.search(r"gloo|nccl|c10d|all_?reduce|allgather|broadcast", lower):
        return "communication"
    if _NO_WORK.search(lower):
        return "idle"
    if re.search(r"copy|clone", lower):
        return "d2d"
    if re.search(r"conv|mm\b|addmm|bmm|matmul|linear|baddbmm|mkldnn", lower):
        return "matmul"
    if _NORMALISE.search(lower):
        return "elementwise"
    if _REDUCE.search(lower) or "pool" in lower:
        return "reduction"
    return "elementwise"
