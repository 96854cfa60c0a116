"""Token ids for the language-model workloads (workloads/lm.py): generated on the device, or read from
a user's token file, both through one `TokenSource` that cuts random windows out of a flat stream.

Generated ids follow a Zipf-like frequency (the n-th most frequent id is drawn in proportion to
n^-zipf, the ids shuffled so that the frequent ones are not the small ones) and are never 0: a stream
made once on the device, so a batch costs one gather. A token file is nanoGPT's format: the ids of a
tokenized corpus as flat little-endian uint16 (`train.bin`), memory-mapped, each batch read on the
host and copied to the device. `open_tokens` checks a file before anything runs, each fault in one
line: missing, not a file, empty, an odd number of bytes, too short for one sequence, an id beyond
the model's vocabulary.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch

from dlbench.errors import UserError
from dlbench.measure.timer import NullTimer

TOKEN_BYTES = 2  # nanoGPT's .bin files hold uint16 ids
SCAN_TOKENS = 1 << 25  # ids checked per read when a file is scanned for ids beyond the vocabulary
GENERATED_TOKENS = 1 << 20  # the generated stream has at least this many ids, and 4 batches' worth


def token_path(text: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(text))))


def open_tokens(text: str, vocab: int, length: int, scan: bool = True) -> np.ndarray:
    """The token file `text`, memory-mapped, after its checks: it holds at least `length` ids (one
    sequence) and, with `scan`, no id of `vocab` or more (a scan reads the whole file)."""
    path = token_path(text)
    where = f"--data {text}"
    if not path.exists():
        raise UserError(f"{where}: no such file (give a token file: nanoGPT's flat uint16 .bin, e.g. train.bin)")
    if not path.is_file():
        raise UserError(f"{where} is not a file: give a token file (nanoGPT's flat uint16 .bin, e.g. train.bin)")
    size = path.stat().st_size
    if size == 0:
        raise UserError(f"{where} is empty: a token file holds 2-byte (uint16) token ids")
    if size % TOKEN_BYTES:
        raise UserError(f"{where} is {size:,} bytes, an odd number: a token file holds 2-byte (uint16) token ids, "
                        "so this is not one (or it was cut short)")
    count = size // TOKEN_BYTES
    if count < length:
        raise UserError(f"{where} holds {count:,} tokens; one sequence here needs {length:,}")
    try:
        tokens = np.memmap(path, dtype="<u2", mode="r")
    except OSError as error:
        raise UserError(f"{where}: cannot read it ({error.strerror or error})") from None
    if scan:
        check_ids(tokens, vocab, where)
    return tokens


def check_ids(tokens: np.ndarray, vocab: int, where: str, offset: int = 0) -> None:
    """A UserError naming the first id of `vocab` or more in `tokens` (at `offset` in its file)."""
    for start in range(0, len(tokens), SCAN_TOKENS):
        chunk = np.asarray(tokens[start:start + SCAN_TOKENS])
        if int(chunk.max()) >= vocab:
            at = int(np.argmax(chunk >= vocab))
            raise UserError(f"{where} holds token id {int(chunk[at]):,} at position {offset + start + at:,}, beyond "
                            f"the model's vocabulary of {vocab:,} (ids 0 to {vocab - 1:,}): the file was made by "
                            "another tokenizer, or the model needs a larger vocab (e.g. --model gpt2:vocab=65536)")


def zipf_stream(count: int, vocab: int, exponent: float, device: torch.device, seed: int) -> torch.Tensor:
    """`count` ids in 1..vocab-1 (int64, on `device`), the n-th most frequent drawn in proportion to n^-exponent."""
    generator = torch.Generator(device=device).manual_seed(seed)
    ranks = torch.arange(1, vocab, device=device, dtype=torch.float64)
    cdf = torch.cumsum(ranks.pow(-exponent), 0)
    cdf = (cdf / cdf[-1]).float()
    drawn = torch.searchsorted(cdf, torch.rand(count, device=device, generator=generator)).clamp_max(vocab - 2)
    ids = torch.randperm(vocab - 1, device=device, generator=generator) + 1  # rank -> id, never 0
    return ids[drawn]


class TokenSource:
    """Random windows of a flat stream of ids as (batch, length) int64 tensors on `device`. The
    stream is a tensor on the device (generated) or a memory-mapped file on the host (read, checked
    against the vocabulary window by window, and copied). `host_waits`: the host's seconds in each
    measured take, as the image workloads' feeder records them."""

    def __init__(self, stream: torch.Tensor | np.ndarray, device: torch.device, seed: int, vocab: int,
                 where: str = "") -> None:
        self.stream, self.device, self.vocab, self.where = stream, device, vocab, where
        self.on_device = isinstance(stream, torch.Tensor)
        self.generator = torch.Generator(device=device if self.on_device else "cpu").manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.host_waits: list[float] = []
        self._offsets: dict[int, torch.Tensor] = {}

    @property
    def kind(self) -> str:
        return "generated" if self.on_device else "file"

    def __len__(self) -> int:
        return len(self.stream)

    def take(self, batch: int, length: int, timer=None, h2d_phase: bool = True) -> torch.Tensor:
        """`batch` windows of `length` ids. With a timer, the wait for them is marked `data` and the copy
        to the device `h2d` (without `h2d_phase`, both are `data`)."""
        timer = timer or NullTimer()
        start = time.perf_counter()
        if self.on_device:
            firsts = torch.randint(0, len(self.stream) - length + 1, (batch, 1), device=self.device,
                                   generator=self.generator)
            if length not in self._offsets:
                self._offsets[length] = torch.arange(length, device=self.device)
            windows = self.stream[firsts + self._offsets[length]]
        else:
            firsts = self.rng.integers(0, len(self.stream) - length + 1, batch)
            host = np.stack([self.stream[i:i + length] for i in firsts])
            if int(host.max()) >= self.vocab:
                row = int(np.argmax((host >= self.vocab).any(axis=1)))
                check_ids(host[row], self.vocab, self.where, int(firsts[row]))
            windows = torch.from_numpy(host.astype(np.int64))
        if not isinstance(timer, NullTimer):
            self.host_waits.append(time.perf_counter() - start)
        if h2d_phase:
            timer.mark("data")
        if not self.on_device:
            if self.device.type == "cuda":
                windows = windows.pin_memory().to(self.device, non_blocking=True)
            else:
                windows = windows.to(self.device)
        timer.mark("h2d" if h2d_phase else "data")
        return windows


def source(data: str | None, vocab: int, length: int, batch: int, device: torch.device, seed: int, rank: int = 0,
           zipf: float = 1.0) -> TokenSource:
    """The token source a run asks for: `data` a token file (checked, without the whole-file scan
    the run's preflight made), else ids generated on `device` (`seed` the same on every rank, each
    rank's windows its own)."""
    draws = seed * 1000 + rank
    if data:
        return TokenSource(open_tokens(data, vocab, length, scan=False), device, draws, vocab, f"--data {data}")
    count = max(GENERATED_TOKENS, 4 * batch * length, length)
    return TokenSource(zipf_stream(count, vocab, zipf, device, seed), device, draws, vocab)
