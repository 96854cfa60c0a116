"""Convolution epilogues in one pass: bias and ReLU after cuDNN's convolution as one Triton kernel.

PyTorch adds a convolution's bias in a pass of its own over cuDNN's output, and the ReLU that
follows is another pass. On large 3D tiles these passes cost a third of the model's time (H200,
`unet3d` fp16 on 136x744x640 tiles: bias additions 24 %, ReLU 7 %, convolutions 61 %).
`fuse(model)` returns a copy of the model, sharing its parameters, in which every convolution
followed by a ReLU in an nn.Sequential runs without its bias, then bias and ReLU in one pass,
in place. Where PyTorch adds the bias in a pass of its own (cuDNN) the output is the same to the
bit: the bias is rounded to the output's type and added in fp32, as PyTorch's addition does, and
ReLU commutes with the rounding.

The kernel is an operator of its own (`dlbench::bias_relu_`), so torch.compile and FLOP
counting see one opaque call. Triton runs on CUDA GPUs (and on the CPU in its interpreter,
TRITON_INTERPRET=1, which the tests use).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

BLOCK = 4096  # elements per program: wide enough to stream memory at full speed


def available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


_kernel = None


def _compiled():
    """The Triton kernel, defined on first use (importing triton is slow and may be absent)."""
    global _kernel
    if _kernel is None:
        import triton
        import triton.language as tl

        @triton.jit
        def bias_relu(x_ptr, b_ptr, n, inner, channels, BLOCK: tl.constexpr):
            offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            x = tl.load(x_ptr + offsets, mask=mask)
            b = tl.load(b_ptr + (offsets // inner) % channels, mask=mask)
            y = (x.to(tl.float32) + b.to(tl.float32)).to(x.dtype)
            tl.store(x_ptr + offsets, tl.where(y < 0, tl.zeros_like(y), y), mask=mask)  # NaN stays NaN

        _kernel = bias_relu
    return _kernel


@torch.library.custom_op("dlbench::bias_relu_", mutates_args=("x",))
def bias_relu_(x: torch.Tensor, bias: torch.Tensor) -> None:
    """x = relu(x + bias) over channel dim 1, in place; x dense in channels-last or contiguous layout."""
    channels = x.shape[1]
    inner = 1 if x.stride(1) == 1 else x.stride(1)  # channels-last: channels innermost
    n = x.numel()
    _compiled()[(-(-n // BLOCK),)](x, bias.to(x.dtype).contiguous(), n, inner, channels, BLOCK=BLOCK)


@bias_relu_.register_fake
def _(x: torch.Tensor, bias: torch.Tensor) -> None:
    return None


def _dense(x: torch.Tensor) -> bool:
    """Laid out contiguously or channels-last, the two layouts the kernel indexes."""
    formats = (torch.contiguous_format, torch.channels_last_3d if x.dim() == 5 else torch.channels_last)
    return x.dim() in (4, 5) and any(x.is_contiguous(memory_format=f) for f in formats)


class ConvBiasReLU(nn.Module):
    """A convolution, its bias and the ReLU after it: the convolution without bias, then one pass."""

    def __init__(self, conv: nn.Conv2d | nn.Conv3d) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        out = c._conv_forward(x, c.weight, None)
        if not _dense(out):  # a layout the kernel does not index: the two passes of eager
            return torch.relu_(out + c.bias.to(out.dtype).view(1, -1, *[1] * (out.dim() - 2)))
        torch.ops.dlbench.bias_relu_(out, c.bias)
        return out


def _fusable(conv: nn.Module, act: nn.Module) -> bool:
    return (isinstance(conv, (nn.Conv2d, nn.Conv3d)) and conv.bias is not None and conv.padding_mode == "zeros"
            and isinstance(act, nn.ReLU))


def fuse(model: nn.Module) -> tuple[nn.Module, int]:
    """`model` with each convolution + ReLU of an nn.Sequential fused, and how many pairs were: a
    shallow copy of each module on the way to a fused pair (parameters shared), the rest as it is."""
    replaced, count = {}, 0
    for name, child in model.named_children():
        new, n = _fuse_sequential(child) if isinstance(child, nn.Sequential) else fuse(child)
        if n:
            replaced[name], count = new, count + n
    if not count:
        return model, 0
    fused = copy.copy(model)
    fused._modules = {**model._modules, **replaced}
    return fused, count


def _fuse_sequential(seq: nn.Sequential) -> tuple[nn.Module, int]:
    layers, count, children = [], 0, list(seq.children())
    i = 0
    while i < len(children):
        if i + 1 < len(children) and _fusable(children[i], children[i + 1]):
            layers.append(ConvBiasReLU(children[i]))
            count, i = count + 1, i + 2
            continue
        child, n = fuse(children[i])
        layers.append(child)
        count, i = count + n, i + 1
    return (nn.Sequential(*layers), count) if count else (seq, 0)
