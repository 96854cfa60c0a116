"""Fused inference kernels: Triton kernels that do in one pass what PyTorch does in more.

- Convolution bias + ReLU. PyTorch adds a convolution's bias in a pass of its own over cuDNN's
  output, and the ReLU that follows is another pass; on large 3D tiles these passes cost a third
  of the model's time.
  Each convolution followed by a ReLU in an nn.Sequential runs without its bias, then one kernel
  adds the bias and applies the ReLU in place. The bias is rounded to the output's type and
  added in fp32, as PyTorch's addition does, and ReLU commutes with the rounding, so where
  PyTorch adds the bias in a pass of its own (cuDNN) the output is the same to the bit.
- 2x2x2 max pooling. PyTorch's 3D max pooling on a GPU also writes the index of each maximum
  (int64, 8 bytes for each 2-byte output value), which inference never reads. The kernel reads
  the eight values of each window (channels-last-3d inputs) and writes their maximum; a NaN in
  the window gives NaN, as in PyTorch.
- Transposed convolution bias + concatenation (the 3D U-Net's UpJoin): the bias is added while
  the upsampled tensor and the skip connection are written into the concatenation, instead of in
  a pass of its own before it; rounded as PyTorch rounds it.

`fuse(model)` returns the model with these layers replaced (modules on the way shallow-copied,
parameters shared) and how many were. The kernels are operators of their own (`dlbench::...`),
so torch.compile and FLOP counting see one opaque call each. Triton runs on CUDA GPUs (and on
the CPU in its interpreter, TRITON_INTERPRET=1, which the tests use).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.models.replace import replace
from dlbench.models.unet3d import UpJoin, fit

BLOCK = 4096  # elements per program: wide enough to stream memory at full speed


def available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


_kernels: dict[str, Callable] = {}


def _kernel(name: str) -> Callable:
    """The Triton kernels, defined on first use (importing triton is slow and it may be absent)."""
    if not _kernels:
        import triton
        import triton.language as tl

        @triton.jit
        def bias_relu(x_ptr, y_ptr, b_ptr, n, inner, channels, BLOCK: tl.constexpr):
            offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            x = tl.load(x_ptr + offsets, mask=mask)
            b = tl.load(b_ptr + (offsets // inner) % channels, mask=mask)
            y = (x.to(tl.float32) + b.to(tl.float32)).to(x.dtype)
            tl.store(y_ptr + offsets, tl.where(y < 0, tl.zeros_like(y), y), mask=mask)  # NaN stays NaN

        @triton.jit
        def max_pool2(x_ptr, y_ptr, n, channels, d_out, h_out, w_out, s_n, s_d, s_h, s_w, BLOCK: tl.constexpr):
            offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            c = offsets % channels  # the output is channels-last-3d: channels fastest
            rest = offsets // channels
            w = rest % w_out
            rest = rest // w_out
            h = rest % h_out
            rest = rest // h_out
            d = rest % d_out
            batch = rest // d_out
            base = x_ptr + batch * s_n + 2 * d * s_d + 2 * h * s_h + 2 * w * s_w + c
            y = tl.load(base, mask=mask)
            for step in tl.static_range(1, 8):
                value = tl.load(base + (step // 4) * s_d + (step // 2 % 2) * s_h + (step % 2) * s_w, mask=mask)
                y = tl.maximum(y, value, propagate_nan=tl.PropagateNan.ALL)
            tl.store(y_ptr + offsets, y, mask=mask)

        @triton.jit
        def bias_cat(up_ptr, b_ptr, skip_ptr, out_ptr, n, c_up, c_skip, BLOCK: tl.constexpr):
            offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            c = offsets % (c_up + c_skip)  # all three are channels-last: channels fastest
            voxel = offsets // (c_up + c_skip)
            first = c < c_up
            up = tl.load(up_ptr + voxel * c_up + c, mask=mask & first)
            b = tl.load(b_ptr + c, mask=mask & first)
            skip = tl.load(skip_ptr + voxel * c_skip + c - c_up, mask=mask & ~first)
            y = tl.where(first, (up.to(tl.float32) + b.to(tl.float32)).to(up.dtype), skip)
            tl.store(out_ptr + offsets, y, mask=mask)

        _kernels.update(bias_relu=bias_relu, max_pool2=max_pool2, bias_cat=bias_cat)
    return _kernels[name]


def _grid(n: int) -> tuple[int]:
    return (-(-n // BLOCK),)


# The operators are defined through torch.library.Library rather than torch.library.custom_op: a
# custom_op's kernel imports torch._dynamo at its first call, a wait at every run's start, where a
# Library kernel is the plain function. Each gets a fake for shapes (torch.compile, FLOP counting).
_LIBRARY = torch.library.Library("dlbench", "DEF")


def _operator(schema: str, fake: Callable) -> Callable[[Callable], Callable]:
    """Define dlbench::NAME from `schema`; the decorated function is its kernel on CUDA and on the
    CPU (Triton's interpreter, TRITON_INTERPRET=1)."""
    name = schema.split("(", 1)[0]

    def define(kernel: Callable) -> Callable:
        _LIBRARY.define(schema)
        for device in ("CUDA", "CPU"):
            _LIBRARY.impl(name, kernel, device)
        torch.library.register_fake(f"dlbench::{name}", fake, lib=_LIBRARY)
        return kernel
    return define


def _nothing(*_: torch.Tensor) -> None:
    return None


@_operator("bias_relu_(Tensor(a!) x, Tensor bias) -> ()", _nothing)
def bias_relu_(x: torch.Tensor, bias: torch.Tensor) -> None:
    """x = relu(x + bias) over channel dim 1, in place; x dense in channels-last or contiguous layout."""
    _bias_relu(x, bias, x)


@_operator("bias_relu_into(Tensor x, Tensor bias, Tensor(a!) out) -> ()", _nothing)
def bias_relu_into(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    """out = relu(x + bias), x and out dense in the same layout (out a depth slab of a larger tensor, say)."""
    _bias_relu(x, bias, out)


def _bias_relu(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    inner = 1 if x.stride(1) == 1 else x.stride(1)  # channels-last: channels innermost
    _kernel("bias_relu")[_grid(x.numel())](x, out, bias.to(x.dtype).contiguous(), x.numel(), inner, x.shape[1],
                                           BLOCK=BLOCK)


def _pooled(x: torch.Tensor) -> torch.Tensor:
    n, c, d, h, w = x.shape
    return torch.empty((n, c, d // 2, h // 2, w // 2), dtype=x.dtype, device=x.device,
                       memory_format=torch.channels_last_3d)


@_operator("max_pool2(Tensor x) -> Tensor", _pooled)
def max_pool2(x: torch.Tensor) -> torch.Tensor:
    """2x2x2 max pooling, stride 2, of a channels-last-3d tensor [N, C, D, H, W] (odd sizes floored)."""
    n, c, d, h, w = x.shape
    y = _pooled(x)
    s = x.stride()
    _kernel("max_pool2")[_grid(y.numel())](x, y, y.numel(), c, d // 2, h // 2, w // 2, s[0], s[2], s[3], s[4],
                                           BLOCK=BLOCK)
    return y


def _joined(up: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
    return torch.empty((up.shape[0], up.shape[1] + skip.shape[1], *up.shape[2:]), dtype=up.dtype, device=up.device,
                       memory_format=torch.channels_last_3d)


@_operator("bias_cat(Tensor up, Tensor bias, Tensor skip) -> Tensor", lambda up, bias, skip: _joined(up, skip))
def bias_cat(up: torch.Tensor, bias: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
    """[up + bias, skip] along channels, all channels-last-3d of one dtype and spatial shape."""
    out = _joined(up, skip)
    _bias_cat(up, bias, skip, out)
    return out


@_operator("bias_cat_into(Tensor up, Tensor bias, Tensor skip, Tensor(a!) out) -> ()", _nothing)
def bias_cat_into(up: torch.Tensor, bias: torch.Tensor, skip: torch.Tensor, out: torch.Tensor) -> None:
    """bias_cat written into `out` (a depth slab of a larger tensor, say), dense channels-last-3d."""
    _bias_cat(up, bias, skip, out)


def _bias_cat(up: torch.Tensor, bias: torch.Tensor, skip: torch.Tensor, out: torch.Tensor) -> None:
    _kernel("bias_cat")[_grid(out.numel())](up, bias.to(up.dtype).contiguous(), skip, out, out.numel(), up.shape[1],
                                            skip.shape[1], BLOCK=BLOCK)


def _dense(x: torch.Tensor) -> bool:
    """Laid out contiguously or channels-last, the two layouts the bias kernel indexes."""
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


class MaxPool2(nn.Module):
    """nn.MaxPool3d(2) without the indices, for channels-last-3d inputs (others go to PyTorch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 5 or not x.is_contiguous(memory_format=torch.channels_last_3d):
            return F.max_pool3d(x, 2)
        return torch.ops.dlbench.max_pool2(x)


class FusedUpJoin(nn.Module):
    """UpJoin with the transposed convolution's bias added while concatenating: one pass less."""

    def __init__(self, join: UpJoin) -> None:
        super().__init__()
        self.join = join

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        c = self.join.conv
        up = F.conv_transpose3d(x, c.weight, None, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
        if not joinable(up, skip):  # odd sizes, mixed types: PyTorch's passes
            return torch.cat([fit(up + c.bias.to(up.dtype).view(1, -1, 1, 1, 1), skip), skip], dim=1)
        return torch.ops.dlbench.bias_cat(up, c.bias, skip)


def joinable(up: torch.Tensor, skip: torch.Tensor) -> bool:
    """Whether the concatenation kernel indexes these two: one shape, one type, both channels-last-3d."""
    cl = torch.channels_last_3d
    return (up.shape[2:] == skip.shape[2:] and up.dtype == skip.dtype and up.is_contiguous(memory_format=cl)
            and skip.is_contiguous(memory_format=cl))


def _fusable(conv: nn.Module, act: nn.Module) -> bool:
    return (isinstance(conv, (nn.Conv2d, nn.Conv3d)) and conv.bias is not None and conv.padding_mode == "zeros"
            and isinstance(act, nn.ReLU))


def _poolable(pool: nn.Module) -> bool:
    def cube(v) -> bool:
        return v in (2, (2, 2, 2))

    return (type(pool) is nn.MaxPool3d and cube(pool.kernel_size) and cube(pool.stride or pool.kernel_size)
            and pool.padding in (0, (0, 0, 0)) and pool.dilation in (1, (1, 1, 1)) and not pool.ceil_mode
            and not pool.return_indices)


def fuse(model: nn.Module) -> tuple[nn.Module, int]:
    """`model` with its fusable layers replaced, and how many were: a shallow copy of each module
    on the way to a replaced layer (parameters shared), the rest as it is."""
    return replace(model, _fused)


def _fused(layer: nn.Module) -> tuple[nn.Module, int] | None:
    if _poolable(layer):
        return MaxPool2(), 1
    if type(layer) is UpJoin and layer.conv.bias is not None:
        return FusedUpJoin(layer), 1
    if isinstance(layer, nn.Sequential):
        return _fuse_sequential(layer)
    return None


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
