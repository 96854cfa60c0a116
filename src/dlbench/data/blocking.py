"""Split a volume into output blocks with a halo; read reflect-padded input tiles.

Blocks start at multiples of the block shape and the last block along an axis is cut at
the volume's far border, so the blocks cover every voxel exactly once. Every input tile has
the same shape, block + 2 x halo, even for cut blocks: voxels outside the volume are its
reflection (numpy's 'reflect' mode: the border voxel is not repeated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from dlbench.errors import UserError

Box = tuple[slice, ...]


@dataclass(frozen=True)
class Block:
    index: int
    begin: tuple[int, ...]  # first output voxel
    end: tuple[int, ...]  # one past the last output voxel (cut at the volume border)

    @property
    def box(self) -> Box:
        return tuple(slice(b, e) for b, e in zip(self.begin, self.end))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(e - b for b, e in zip(self.begin, self.end))


@dataclass(frozen=True)
class Blocking:
    shape: tuple[int, ...]
    block: tuple[int, ...]
    halo: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (len(self.shape) == len(self.block) == len(self.halo)):
            raise UserError(f"block {_fmt(self.block)} and halo {_fmt(self.halo)} need {len(self.shape)} sizes "
                            f"like the volume {_fmt(self.shape)}")
        if any(b > s for b, s in zip(self.block, self.shape)):
            raise UserError(f"block {_fmt(self.block)} is larger than the volume {_fmt(self.shape)}")
        if any(h < 0 for h in self.halo) or any(h >= s for h, s in zip(self.halo, self.shape)):
            raise UserError(f"halo {_fmt(self.halo)} must be ≥ 0 and smaller than the volume {_fmt(self.shape)} "
                            f"in every dimension")

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // b) for s, b in zip(self.shape, self.block))

    @property
    def tile(self) -> tuple[int, ...]:
        return tuple(b + 2 * h for b, h in zip(self.block, self.halo))

    def __len__(self) -> int:
        return int(np.prod(self.grid))

    def __getitem__(self, index: int) -> Block:
        position = np.unravel_index(index, self.grid)
        begin = tuple(int(p) * b for p, b in zip(position, self.block))
        end = tuple(min(b0 + b, s) for b0, b, s in zip(begin, self.block, self.shape))
        return Block(index, begin, end)

    def __iter__(self) -> Iterator[Block]:
        return (self[i] for i in range(len(self)))

    @property
    def fill(self) -> float:
        """The share of the blocks' voxels inside the volume: below 1 where the far border cuts
        blocks, whose tiles cost the model as much as whole ones."""
        return float(np.prod(self.shape) / (len(self) * np.prod(self.block)))

    @property
    def kept(self) -> float:
        """The share of the voxels the model computes that end up in the output (halo and cut blocks lost)."""
        return float(np.prod(self.shape) / (len(self) * np.prod(self.tile)))

    def crop(self, block: Block) -> Box:
        """Where the block's output lies inside the model's output for its tile."""
        return tuple(slice(h, h + n) for h, n in zip(self.halo, block.shape))

    def read_tile_into(self, read: Callable[[Box], np.ndarray], block: Block, out: np.ndarray,
                       read_into: Callable[[Box, np.ndarray, Box], None] | None = None) -> None:
        """The input tile for `block` written into `out` (the tile's shape), reflected where the tile
        leaves the volume (numpy's 'reflect'). Where one reflection of the part inside the volume
        covers the tile, that part is read to its place (by `read_into(box, out, place)` where
        given: no array in between) and reflected there a slab at a time; a tile that needs more
        (halo wider than what is inside) gathers every index, ten times slower on large tiles.
        np.pad's new array and a copy of it into pinned memory cost about as much as the read
        itself on large tiles."""
        inside, pads = self._inside(block)
        if not _one_reflection(inside, pads):
            out[...] = self._gather(read, block)
            return
        place = tuple(slice(lo, t - hi) for (lo, hi), t in zip(pads, self.tile))
        if read_into is not None:
            read_into(inside, out, place)
        else:
            out[place] = read(inside)
        for axis, (lo, hi) in enumerate(pads):  # numpy's 'reflect', one axis at a time (it is separable)
            moved = np.moveaxis(out, axis, 0)
            end = moved.shape[0] - hi
            if lo:
                moved[:lo] = moved[lo + 1:2 * lo + 1][::-1]
            if hi:
                moved[end:] = moved[end - 1 - hi:end - 1][::-1]

    def _inside(self, block: Block) -> tuple[Box, list[tuple[int, int]]]:
        """The part of the block's tile inside the volume, and the tile's reflected planes on each side."""
        begins = [b - h for b, h in zip(block.begin, self.halo)]
        inside = tuple(slice(max(lo, 0), min(lo + t, s)) for lo, t, s in zip(begins, self.tile, self.shape))
        return inside, [(part.start - lo, lo + t - part.stop) for part, lo, t in zip(inside, begins, self.tile)]

    def _gather(self, read: Callable[[Box], np.ndarray], block: Block) -> np.ndarray:
        begins = [b - h for b, h in zip(block.begin, self.halo)]
        indices = [_reflect(np.arange(lo, lo + t), s) for lo, t, s in zip(begins, self.tile, self.shape)]
        lows = [int(i.min()) for i in indices]
        region = read(tuple(slice(lo, int(i.max()) + 1) for lo, i in zip(lows, indices)))
        return region[np.ix_(*[i - lo for i, lo in zip(indices, lows)])]


def _one_reflection(inside: Box, pads: list[tuple[int, int]]) -> bool:
    """Whether each side's padding is a reflection of the part inside (no wider than it, less one)."""
    return all(max(pad) < part.stop - part.start for pad, part in zip(pads, inside))


def _reflect(index: np.ndarray, size: int) -> np.ndarray:
    if size == 1:
        return np.zeros_like(index)
    period = 2 * (size - 1)
    index = np.abs(index) % period
    return np.where(index >= size, period - index, index)


def _fmt(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))

