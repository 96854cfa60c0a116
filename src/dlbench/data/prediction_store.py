"""The output of blockwise prediction: a chunked zarr or N5 array plus a completion record.

Each output block is a whole number of chunks (channels first), so concurrent writers never
share a chunk; a block of more than CHUNK_VOXELS is cut in halves along its longest axes, so that
tensorstore encodes one block's chunks in parallel (one large chunk is encoded by one thread,
and after the last tile the whole run waits for it).
The completion record lives inside the output (`.dlbench/`): `run.json` holds the settings
the output was made with, `done/<block>` marks a block whose chunks are on disk. A block is
marked only after its write committed, so `--resume` redoes exactly the unfinished blocks
and the bytes equal an uninterrupted run's. `run.json` also keeps a fingerprint of the input
(`volumes.fingerprint`): --resume refuses an input that changed since, and predicts again any block
marked done whose chunks are missing or do not decode.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from pathlib import Path

import numpy as np

from dlbench.data.blocking import Block
from dlbench.data.volumes import DamagedVolume, Volume, fingerprint, split_path_key
from dlbench.errors import UserError
from dlbench.paths import check_folder_of, check_new_folder, overlap, remove, too_large, write_failure

OUTPUT_KEY = "prediction"
DTYPES = ("uint8", "float16")
# Settings of how the blocks were computed, not of what they hold: kept so that --resume computes the
# rest alike (at the speed the first run chose), never a reason to refuse it.
HOW = ("channels_last",)
FINGERPRINT = "input_fingerprint"  # compared by check_new, which says what changed
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")  # what an output can have been predicted in
CHECKED_AT_ONCE = 8  # done blocks read together when --resume checks them (each is held in memory)
SUFFIXES = {".zarr": "zarr", ".n5": "n5"}
CHUNK_VOXELS = 2**24  # a chunk holds at most this many voxels where halving the block allows


def chunks_for(block: tuple[int, ...], most: int | None = None) -> tuple[int, ...]:
    """Chunks that tile `block` exactly: the block halved along its longest even axis until a chunk
    holds at most `most` (CHUNK_VOXELS) voxels, or no axis halves."""
    most = most or CHUNK_VOXELS
    chunk = list(block)
    while math.prod(chunk) > most:
        even = [i for i, n in enumerate(chunk) if n % 2 == 0]
        if not even:
            break
        longest = max(even, key=lambda i: chunk[i])
        chunk[longest] //= 2
    return tuple(chunk)


def check_output_name(path_key: str) -> None:
    """The output names a format this store writes. Blocks are written concurrently, whole chunks
    each, which HDF5 files do not allow, so an .h5 name is refused rather than quietly
    becoming a zarr folder."""
    path, _ = split_path_key(path_key, OUTPUT_KEY)
    if path.suffix.lower() in (".json", ".jsonl"):  # the results file, as --output once named it
        raise UserError(f"--output {path}: --output is where the prediction goes (.zarr or .n5); the results file "
                        f"is --results-file: give --results-file {path_key}")
    if path.suffix.lower() not in SUFFIXES:
        raise UserError(f"--output {path}: prediction output is written as zarr or N5; name it .zarr or .n5 "
                        f"(convert to HDF5 afterwards if you need it)")


def _sizes(value, least: int) -> bool:
    return isinstance(value, list) and len(value) == 3 and all(type(v) is int and v >= least for v in value)


# What each setting of a completion record must be; a record edited by hand is refused before the run.
_FIELDS = {"input": lambda v: isinstance(v, str), "model": lambda v: isinstance(v, str),
           "seed": lambda v: type(v) is int, "precision": lambda v: v in PRECISIONS,
           "channels": lambda v: type(v) is int and v >= 1, "dtype": lambda v: v in DTYPES,
           "input_shape": lambda v: _sizes(v, 1), "block": lambda v: _sizes(v, 1), "halo": lambda v: _sizes(v, 0),
           "channels_last": lambda v: isinstance(v, bool), FINGERPRINT: lambda v: isinstance(v, dict)}
_OPTIONAL = ("channels_last", FINGERPRINT)  # records written before them lack them


def _record_problem(record) -> str | None:
    if not isinstance(record, dict):
        return f"it holds a JSON {type(record).__name__}, not an object"
    missing = [k for k in _FIELDS if k not in record and k not in _OPTIONAL]
    if missing:
        return f"it lacks {', '.join(missing)}"
    bad = [k for k, valid in _FIELDS.items() if k in record and not valid(record[k])]
    return f"{', '.join(f'{k} = {json.dumps(record[k])[:40]}' for k in bad)} cannot be right" if bad else None


def _input_changes(stored: dict, now: dict) -> list[str]:
    """How the input differs from the one an output was predicted from, in words."""
    said = {"path": f"it was {stored.get('path')}", "shape": "its shape", "dtype": "its type",
            "size": "its size", "mtime_ns": "its modification time", "sample_sha256": "its contents"}
    return [words for key, words in said.items() if stored.get(key) != now.get(key)]


def _chunk_problem(text: str) -> str:
    """tensorstore's error for a chunk, in words that name its file."""
    named = re.search(r'local file "([^"]+)"', text)
    if not named:
        return text
    if text.startswith("NOT_FOUND"):
        return f"chunk file {named.group(1)} is missing"
    return f"chunk file {named.group(1)} does not decode ({text[named.end():].strip(chr(34) + ': ')})"


def _spec(path: Path, key: str, fmt: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str) -> dict:
    kvstore = {"driver": "file", "path": str((path / key).resolve())}
    blosc = {"cname": "lz4", "clevel": 5, "shuffle": 1}
    if fmt == "n5":
        metadata = {"dimensions": list(shape), "blockSize": list(chunks), "dataType": dtype,
                    "compression": {"type": "blosc", **blosc, "blocksize": 0}}
        return {"driver": "n5", "kvstore": kvstore, "metadata": metadata}
    metadata = {"shape": list(shape), "chunks": list(chunks), "dtype": np.dtype(dtype).str,
                "compressor": {"id": "blosc", **blosc}, "fill_value": 0}
    return {"driver": "zarr", "kvstore": kvstore, "metadata": metadata}


class PredictionStore:
    def __init__(self, path_key: str) -> None:
        self.path, self.key = split_path_key(path_key, OUTPUT_KEY)
        self.format = SUFFIXES.get(self.path.suffix.lower(), "zarr")
        self.record = self.path / ".dlbench"
        self.array = None

    @property
    def name(self) -> str:
        return f"{self.path}:{self.key}"

    def exists(self) -> bool:
        return self.path.exists()

    def check_new(self, resume: bool, overwrite: bool, source: Volume | None = None) -> None:
        """Refuse to touch an existing output unless the user said how, and any output that shares
        its place on disk with the volume it is predicted from (`source`)."""
        if source is not None:
            self.check_apart(source)
        if resume and overwrite:
            raise UserError("--resume and --overwrite exclude each other")
        if self.exists() and not (resume or overwrite):
            raise UserError(f"output {self.path} already exists: pass --resume to complete it or --overwrite to replace it")
        if self.exists() and resume and not (self.record / "run.json").exists():
            raise UserError(f"output {self.path} exists but holds no dlbench completion record: cannot --resume it "
                            f"(use --overwrite to replace it)")
        if self.exists() and resume:
            check_new_folder(self.path, "output")  # blocks are added to it
            self.check_resumable(source)
        else:
            check_folder_of(self.path, "output")  # it is made, or removed and made again

    def check_apart(self, source: Volume) -> None:
        """The output (the folder it makes, or removes and makes again for --overwrite) is never the
        input, never holds it and never lies inside it, whatever the names: a prediction written
        there would destroy the data it is read from, partway through the read."""
        relation = overlap(self.path, source.location)
        if relation is None:
            return
        where = {"same": "is the input", "contains": "holds the input", "inside": "lies inside the input"}[relation]
        real = os.path.realpath(self.path)
        named = f" (that is {real})" if real != os.path.abspath(self.path) else ""
        raise UserError(f"--output {self.name}: {self.path}{named} {where} {source.name}; a prediction never "
                        f"writes where it reads: give another output path")

    def check_resumable(self, source: Volume | None) -> None:
        """Before --resume adds to an output: its record reads as one this store wrote, the array
        matches it, and the input is the one it was predicted from (where the record says which)."""
        record = self.settings(checked=True)
        self._check_array(record)
        stored = record.get(FINGERPRINT)
        if source is None or stored is None:
            return
        try:
            changes = _input_changes(stored, fingerprint(source))
        except DamagedVolume as error:
            raise UserError(str(error)) from None
        if changes:
            raise UserError(f"output {self.path} was predicted from another state of the input {source.name} "
                            f"({', '.join(changes)} changed since): completing it would mix both; use --overwrite "
                            f"to predict it again")

    def _check_array(self, record: dict) -> None:
        """The array holds what the record says, in whole chunks of a block: else blocks would be
        written over each other's chunks, or the output read as something else."""
        import tensorstore as ts

        try:
            array = ts.open(self._open_spec(), read=True).result()
        except ValueError as error:
            text = re.sub(r"\s*\[tensorstore_spec=.*", "", str(error).splitlines()[0])  # the spec says nothing new
            raise UserError(f"output {self.name} cannot be opened ({text}): use --overwrite to predict it again") from None
        chunk = array.chunk_layout.read_chunk.shape
        fits = (tuple(array.shape) == (record["channels"], *record["input_shape"])
                and np.dtype(array.dtype.numpy_dtype) == np.dtype(record["dtype"]) and chunk[0] == record["channels"]
                and all(b % c == 0 for b, c in zip(record["block"], chunk[1:])))
        if not fits:
            raise UserError(f"output {self.name} (shape {'x'.join(map(str, array.shape))}, chunks "
                            f"{'x'.join(map(str, chunk))}) does not match its progress record {self.record / 'run.json'} "
                            f"(channels {record['channels']}, input {'x'.join(map(str, record['input_shape']))}, block "
                            f"{'x'.join(map(str, record['block']))}): use --overwrite to predict it again")

    def settings(self, checked: bool = False) -> dict | None:
        """The settings an existing output was written with (None: no completion record). `checked`:
        a record that cannot be read or is not one this store writes is the user's error, naming it."""
        file = self.record / "run.json"
        try:
            record = json.loads(file.read_text(encoding="utf-8"))
            problem = _record_problem(record)
        except (OSError, ValueError) as error:
            record, problem = None, str(error).splitlines()[0] if str(error) else type(error).__name__
        if problem and checked:
            raise UserError(f"output {self.path}: its progress record {file} is damaged ({problem}): use --overwrite "
                            f"to predict it again")
        return None if problem else record

    def create(self, settings: dict, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str,
               resume: bool, overwrite: bool) -> None:
        """Make (or, for --resume, check and reopen) the output; call on one process only."""
        import tensorstore as ts

        if self.exists() and overwrite:
            remove(self.path)
        if self.exists() and resume:
            stored = self.settings() or {}
            changed = sorted(k for k in set(stored) | set(settings)
                             if k not in (*HOW, FINGERPRINT) and stored.get(k) != settings.get(k))
            if changed:
                raise UserError(f"output {self.path} was written with other settings ({', '.join(changed)} differ): "
                                f"rerun with the same settings or --overwrite")
            return
        try:
            self._make_groups()
            (self.record / "done").mkdir(parents=True, exist_ok=True)
            ts.open(_spec(self.path, self.key, self.format, shape, chunks, dtype), create=True,
                    delete_existing=True).result()
            tmp = self.record / "run.json.tmp"
            tmp.write_text(json.dumps(settings, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.record / "run.json")
        except OSError as error:
            raise UserError(f"cannot create output {write_failure(self.path, error)}") from None

    def _make_groups(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if self.format == "n5":
            (self.path / "attributes.json").write_text('{"n5": "2.0.0"}')
            return
        for group in [self.path, *[self.path / p for p in Path(self.key).parents if str(p) != "."]]:
            group.mkdir(parents=True, exist_ok=True)
            (group / ".zgroup").write_text('{"zarr_format": 2}')

    def _open_spec(self) -> dict:
        return {"driver": self.format, "kvstore": {"driver": "file", "path": str((self.path / self.key).resolve())}}

    def open(self) -> None:
        import tensorstore as ts

        self.array = ts.open(self._open_spec(), read=True, write=True).result()

    def check_done(self, blocks: list[Block]) -> tuple[set[int], list[str]]:
        """The blocks marked done whose chunks are all on disk and decode, and why each other one is
        not: its mark is removed, so it is predicted again (a marked block whose chunk was deleted
        would read as zeros, one overwritten as an error). Each block is read once."""
        import tensorstore as ts

        # A missing chunk is an error here, not the fill value.
        array = ts.open({**self._open_spec(), "fill_missing_data_reads": False}, read=True).result()
        marked = self.done()
        todo = [b for b in blocks if b.index in marked]
        good, bad = set(), []
        for start in range(0, len(todo), CHECKED_AT_ONCE):
            batch = todo[start:start + CHECKED_AT_ONCE]
            reads = [array[(slice(None), *b.box)].read() for b in batch]
            for block, read in zip(batch, reads):
                try:
                    read.result()
                    good.add(block.index)
                except ValueError as error:
                    bad.append(f"block {block.index}: {_chunk_problem(str(error).splitlines()[0])}")
                    (self.record / "done" / str(block.index)).unlink(missing_ok=True)
        return good, bad

    def done(self) -> set[int]:
        folder = self.record / "done"
        return {int(name) for name in os.listdir(folder) if name.isdigit()} if folder.is_dir() else set()

    def write_block(self, index: int, box: tuple[slice, ...], data: np.ndarray) -> None:
        """Write one block's chunks, then mark it done; raises OSError when the disk fails."""
        try:
            self.array[(slice(None), *box)].write(data).result()
        except ValueError as error:  # tensorstore reports I/O failures as ValueError, naming the file in its text
            text = str(error).splitlines()[0]
            named = re.search(r'local file "([^"]+)"', text)
            raise OSError(errno.EFBIG if too_large(text) else None,
                          write_failure(named.group(1), text) if named else text) from None
        marker = self.record / "done" / str(index)
        with open(marker, "w", encoding="utf-8"):
            pass

    def read(self) -> np.ndarray:
        return self.array.read().result()
