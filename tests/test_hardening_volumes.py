"""--resume checks what it skips, and damaged inputs and progress records end in one line naming the
file (and chunk): each case made for real on disk with tiny volumes, run through the command line."""

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import assert_user_error, cli, scripted
from dlbench.data.generate_volume import generate
from dlbench.results.store import Store

SHAPE = (8, 32, 32)  # 8 blocks of 4x16x16, one chunk each per channel-block


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "conv.pt"
    scripted(nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.Sigmoid())).save(str(path))
    return str(path)


def run_args(model: str, source, output, *extra, block: str = "4x16x16") -> tuple:
    return ("run", "volume", "--input", source, "--output", output, "--model", model, "--block", block,
            "--halo", "1x1x1", "--dtype", "uint8", "--device", "cpu", "--warmup", "1", *extra)


def chunks(output: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((output / "prediction").iterdir())}


def stored(db: Path) -> list:
    if not db.exists():
        return []
    with Store(db, read_only=True) as store:
        return store.results(workload="volume")


def error_line(proc) -> str:
    """The stored error of a failed run, as it reaches stderr: one `error:` line, no traceback."""
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    return line


@pytest.fixture
def finished(model, tmp_path):
    """An input and a finished output of it, with a copy of the output's chunks as they should be."""
    source = generate(tmp_path / "in.zarr", SHAPE, "zarr", chunks=(4, 16, 16), seed=1, labels=False)
    output = tmp_path / "out.zarr"
    proc = cli(*run_args(model, source, output, "--db", tmp_path / "r.db"))
    assert proc.returncode == 0, proc.stderr
    return source, output, chunks(output)


# ---------------------------------------------------------------- --resume checks what it skips


def test_an_intact_output_is_skipped_whole(model, finished, tmp_path):
    source, output, before = finished
    proc = cli(*run_args(model, source, output, "--resume", "--db", tmp_path / "r.db"))
    assert proc.returncode == 0, proc.stderr
    assert "(0 blocks, 8 already done)" in proc.stdout and "predicted again" not in proc.stdout
    assert chunks(output) == before


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_a_done_block_whose_chunk_is_gone_or_garbage_is_predicted_again(model, finished, tmp_path, damage):
    source, output, before = finished
    chunk = output / "prediction" / "0.1.0.1"  # block 5 (z 4-8, y 0-16, x 16-32)
    if damage == "deleted":
        chunk.unlink()
    else:
        chunk.write_bytes(b"not a blosc chunk at all")
    proc = cli(*run_args(model, source, output, "--resume", "--db", tmp_path / "r.db"))
    assert proc.returncode == 0, proc.stderr
    said = "is missing" if damage == "deleted" else "does not decode"
    assert "(1 blocks, 1 of them predicted again though marked done (block 5: chunk file" in proc.stdout
    assert f"{chunk}" in proc.stdout and said in proc.stdout and "7 already done" in proc.stdout
    assert chunks(output) == before  # the same bytes as the run that was never damaged


def test_an_input_regenerated_in_place_refuses_to_resume(model, finished, tmp_path):
    source, output, before = finished
    shutil.rmtree(source)
    generate(source, SHAPE, "zarr", chunks=(4, 16, 16), seed=2, labels=False)  # same path and shape, other data
    (output / "prediction" / "0.0.0.0").unlink()  # something left to do: completing would mix both inputs
    proc = cli(*run_args(model, source, output, "--resume", "--db", tmp_path / "r2.db"))
    assert_user_error(proc, "was predicted from another state of the input", "its contents", "--overwrite")
    assert not (output / "prediction" / "0.0.0.0").exists() and stored(tmp_path / "r2.db") == []


# ---------------------------------------------------------------- damaged progress records


@pytest.mark.parametrize("text, said", [
    ("[1, 2]", "it holds a JSON list, not an object"),
    ("{not json", "Expecting property name"),
    ('{"block": "abc"}', "it lacks input"),
    (None, "block = [0, 16, 16] cannot be right"),
    ("", "Expecting value"),
])
def test_a_hand_edited_progress_record_is_one_line_naming_it(model, finished, tmp_path, text, said):
    source, output, _ = finished
    record = output / ".dlbench" / "run.json"
    if text is None:
        text = json.dumps({**json.loads(record.read_text()), "block": [0, 16, 16]})
    record.write_text(text)
    proc = cli(*run_args(model, source, output, "--resume", "--db", tmp_path / "r2.db"))
    assert_user_error(proc, f"its progress record {record}", "is damaged", said, "--overwrite")
    assert stored(tmp_path / "r2.db") == []


def test_a_record_that_does_not_match_the_array_is_refused(model, finished, tmp_path):
    source, output, _ = finished
    record = output / ".dlbench" / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "block": [3, 16, 16]}))
    proc = cli(*run_args(model, source, output, "--resume", "--block", "3x16x16", "--db", tmp_path / "r2.db"))
    assert_user_error(proc, "does not match its progress record", "block 3x16x16", "--overwrite")


def test_damaged_array_metadata_of_the_output_is_one_line(model, finished, tmp_path):
    source, output, _ = finished
    (output / "prediction" / ".zarray").write_text("{")
    proc = cli(*run_args(model, source, output, "--resume", "--db", tmp_path / "r2.db"))
    assert_user_error(proc, "cannot be opened", f"{output / 'prediction' / '.zarray'}", "--overwrite")
    assert "tensorstore_spec" not in proc.stderr


# ---------------------------------------------------------------- damaged inputs


def _raw(shape=SHAPE, dtype=np.uint8) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, shape).astype(dtype)


def test_an_hdf5_dataset_in_a_missing_external_file_is_refused_before_the_run(model, tmp_path):
    source, data = tmp_path / "ext.h5", _raw()
    with h5py.File(source, "w") as f:
        f.create_dataset("volumes/raw", shape=data.shape, dtype=data.dtype,
                         external=[(str(tmp_path / "ext.raw"), 0, data.nbytes)])
    proc = cli(*run_args(model, source, tmp_path / "p.zarr", "--db", tmp_path / "r.db"))
    assert_user_error(proc, "keeps its data in external file", str(tmp_path / "ext.raw"), "does not exist")
    assert not (tmp_path / "p.zarr").exists() and stored(tmp_path / "r.db") == []


def test_a_virtual_dataset_whose_source_file_is_gone_is_refused(model, tmp_path):
    part = tmp_path / "part.h5"
    with h5py.File(part, "w") as f:
        f["raw"] = _raw()
    layout = h5py.VirtualLayout(shape=SHAPE, dtype=np.uint8)
    layout[:] = h5py.VirtualSource(str(part), "raw", shape=SHAPE)
    source = tmp_path / "virtual.h5"
    with h5py.File(source, "w") as f:
        f.create_virtual_dataset("volumes/raw", layout, fillvalue=0)
    part.unlink()  # read as zeros without a word, where nothing checked it
    proc = cli(*run_args(model, source, tmp_path / "p.zarr", "--db", tmp_path / "r.db"))
    assert_user_error(proc, "keeps its data in virtual source file", str(part))


def _corrupt_hdf5_chunk(path: Path, index: int) -> None:
    """Flip a byte inside one stored chunk (the file's checksum filter then refuses it)."""
    with h5py.File(path, "r") as f:
        info = f["volumes/raw"].id.get_chunk_info(index)
    data = bytearray(path.read_bytes())
    data[info.byte_offset + 10] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupted_checksummed_hdf5_chunk_is_a_stored_error_naming_file_and_chunk(model, tmp_path):
    source, db = tmp_path / "fletcher.h5", tmp_path / "r.db"
    # Chunk 0,7,7 is neither in the first tile nor among the boxes the input's fingerprint reads:
    # found while the run reads it, after blocks were written.
    with h5py.File(source, "w") as f:
        f.create_dataset("volumes/raw", data=_raw((16, 128, 128)), chunks=(4, 16, 16), fletcher32=True)
    _corrupt_hdf5_chunk(source, 7 * 8 + 7)
    line = error_line(cli(*run_args(model, source, tmp_path / "p.zarr", "--db", db, block="4x32x32")))
    assert f"{source}, chunk 0,7,7 (z 0-4, y 112-128, x 112-128) is damaged or missing" in line
    assert "blocks are written to" in line and "--resume completes it" in line
    (result,) = stored(db)
    assert result.status == "error" and "chunk 0,7,7" in result.error and "OSError" not in result.error


def test_a_corrupted_chunk_in_the_first_tile_is_not_blamed_on_the_model_file(model, tmp_path):
    source = tmp_path / "fletcher.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("volumes/raw", data=_raw(), chunks=(4, 16, 16), fletcher32=True)
    _corrupt_hdf5_chunk(source, 0)
    line = error_line(cli(*run_args(model, source, tmp_path / "p.zarr", "--db", tmp_path / "r.db")))
    assert f"{source}, chunk 0,0,0 (z 0-4, y 0-16, x 0-16)" in line and "model file" not in line


def test_a_corrupted_chunk_of_a_float_input_is_found_before_the_run(model, tmp_path):
    source = tmp_path / "floats.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("volumes/raw", data=_raw(dtype=np.float32), chunks=(4, 16, 16), fletcher32=True)
    _corrupt_hdf5_chunk(source, 0)  # in the corner looked at for NaN before the run
    proc = cli(*run_args(model, source, tmp_path / "p.zarr", "--db", tmp_path / "r.db"))
    assert_user_error(proc, f"{source}, chunk 0,0,0", "repair or regenerate the input")
    assert not (tmp_path / "p.zarr").exists()


def test_a_zarr_chunk_of_garbage_is_a_stored_error_naming_the_chunk_file(model, tmp_path):
    source, db = generate(tmp_path / "in.zarr", (16, 64, 64), "zarr", chunks=(4, 16, 16), labels=False), tmp_path / "r.db"
    chunk = source / "volumes" / "raw" / "3.3.3"
    chunk.write_bytes(b"garbage")
    line = error_line(cli(*run_args(model, source, tmp_path / "p.zarr", "--db", db)))
    assert f"chunk file {chunk.resolve()} is damaged or missing (Invalid blosc-compressed data" in line
    (result,) = stored(db)
    assert result.status == "error" and str(chunk.resolve()) in result.error and "ValueError" not in result.error
