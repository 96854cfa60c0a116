"""Checks on the paths dlbench writes, made before any work so that a mistyped or read-only
path costs nothing and leaves nothing half-written.

Write permission is judged from the permission bits as well as `os.access`: root passes
every `os.access` check, but a file or folder that nobody may write (`chmod a-w`, an
archive) is treated as read-only for root too, and so is anything on a read-only mount.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import stat
from pathlib import Path
from typing import IO, Iterator

from dlbench.errors import UserError


def read_only_reason(path: Path) -> str | None:
    """Why the existing file or folder `path` cannot be written, or None when it can."""
    try:
        mode = path.stat().st_mode
        mounted_read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError as error:
        return error.strerror or str(error)
    if mounted_read_only:
        return "it is on a read-only file system"
    if not stat.S_IMODE(mode) & 0o222 or not os.access(path, os.W_OK):
        return "it has no write permission"
    return None


def check_folder_of(path: str | os.PathLike, what: str) -> None:
    """The folder that `path` goes into exists and is writable (enough to create `path`, or
    to remove and create it again)."""
    path = Path(path)
    folder = path.absolute().parent
    if not folder.is_dir():
        problem = "does not exist" if not folder.exists() else "is not a folder"
        raise UserError(f"cannot write {what} {path}: folder {folder} {problem}")
    reason = read_only_reason(folder)
    if reason:
        raise UserError(f"cannot write {what} {path}: folder {folder} is read-only ({reason})")


def check_new_file(path: str | os.PathLike, what: str) -> None:
    """`path` can be created or replaced as a file; a UserError saying why not otherwise."""
    _check_target(Path(path), what, folder=False)


def check_new_folder(path: str | os.PathLike, what: str) -> None:
    """`path` is a folder dlbench may write into, or one it can create (its parent exists)."""
    _check_target(Path(path), what, folder=True)


def _check_target(path: Path, what: str, folder: bool) -> None:
    if not path.exists():
        check_folder_of(path, what)
        return
    if path.is_dir() != folder:
        problem = "it is a folder; give a file name" if path.is_dir() else "it exists and is not a folder"
        raise UserError(f"cannot write {what} {path}: {problem}")
    reason = read_only_reason(path)
    if reason:
        raise UserError(f"cannot write {what} {path}: {reason}")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def overlap(first: str | os.PathLike, second: str | os.PathLike) -> str | None:
    """How two paths share what is on disk, however each is named (another spelling, a symbolic
    link, a bind mount, a hard link): 'same', 'contains' (`first` is a folder that holds `second`),
    'inside' (`first` lies inside `second`), or None. Judged by device and inode, not by text."""
    first, second = Path(os.path.realpath(first)), Path(os.path.realpath(second))
    one, other = _identity(first), _identity(second)
    if one is not None and one == other:
        return "same"
    if one is not None and one in {_identity(p) for p in second.parents}:
        return "contains"
    if other is not None and other in {_identity(p) for p in first.parents}:
        return "inside"
    return None


def size_limit() -> int | None:
    """The largest file this process may write, in bytes (`ulimit -f`); None without a limit."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _kib(size: int) -> str:
    return f"{size / 1024:g} KiB" if size < 2**20 else f"{size / 2**20:g} MiB"


def too_large(error: OSError | str) -> bool:
    """Whether a write failed on the file-size limit (EFBIG; tensorstore says it in its text)."""
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return True
    return "File too large" in str(error) or "os_error_code='27'" in str(error)


def write_failure(path: str | os.PathLike, error: OSError | str) -> str:
    """Why `path` could not be written, in a few words: past the file-size limit (which is not the
    disk's fault: `ulimit -f`, a batch system's limit), else the system's reason."""
    limit = size_limit()
    if too_large(error) and limit is not None:
        return f"{path}: it would pass this process's file-size limit of {_kib(limit)} (ulimit -f)"
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return f"{path}: {reason}"


def remove(path: Path) -> None:
    """Remove the file or the folder tree at `path`, if there is one (a zarr or N5 volume is a folder,
    an HDF5 one a file)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[IO[str]]:
    """A text file written whole or not at all: into a hidden file beside `path`, moved over it once
    complete. A write that fails (a full disk, the file-size limit) leaves `path` as it was, nothing
    half-written, and ends in one line naming it. A device or pipe (/dev/stdout) is written as it is."""
    path = Path(path)
    direct = path.exists() and not path.is_file()
    target = path if direct else path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with open(target, "w", encoding="utf-8", newline="") as f:
            yield f
        if not direct:
            os.replace(target, path)
    except OSError as error:
        if not direct:
            target.unlink(missing_ok=True)
        raise UserError(f"cannot write {write_failure(path, error)}") from None
    except BaseException:
        if not direct:
            target.unlink(missing_ok=True)
        raise


def data_folder() -> Path:
    """dlbench's folder in this user's data directory, where what every run on the machine shares
    lives (the result store): $XDG_DATA_HOME/dlbench, else ~/.local/share/dlbench; on macOS
    ~/Library/Application Support/dlbench, on Windows %LOCALAPPDATA%\\dlbench. Not made here."""
    import sys

    home = Path(os.path.expanduser("~"))
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "dlbench"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local", "dlbench")
    given = os.environ.get("XDG_DATA_HOME", "")
    # the XDG rule: a relative path is to be ignored
    return Path(given if os.path.isabs(given) else home / ".local" / "share", "dlbench")


CACHE_ENV = "DLBENCH_CACHE"


def cache_folder(*parts: str) -> Path:
    """A folder under dlbench's cache, made if missing: what outlives a run and may be rebuilt
    (compiled kernels, compiler logs). $DLBENCH_CACHE, else $XDG_CACHE_HOME/dlbench, else
    ~/.cache/dlbench; where that cannot be written, a folder of this user's in the system's
    temporary folder."""
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "dlbench")
    folder = Path(base, *parts)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = read_only_reason(folder) is None
    except OSError:
        writable = False
    if not writable:
        import tempfile

        folder = Path(tempfile.gettempdir(), f"dlbench-cache-uid{os.getuid()}", *parts)
        folder.mkdir(parents=True, exist_ok=True)
    return folder
