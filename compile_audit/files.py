"""Files the gate writes (the budgets file, reports) are replaced atomically: all or nothing."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    An interrupt or a full disk mid-write leaves the old file as it was: the budgets file holds
    hand-written notes that nothing can regenerate.
    """
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """:func:`write_text_atomic` for bytes (a gzipped file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, _mode_for(path))
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    """The file's own mode when it exists, else what a plain ``open`` would give (mkstemp makes its files 0600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def exclusive(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock across a read-modify-write of ``path``, so that concurrent runs on one machine (the
    shards of one selection) each add their part instead of the last writer winning.

    The lock is taken on the folder that holds ``path``: ``path`` itself is replaced by a rename (a lock on it would
    stay with the old file), and a lock file beside it would be left behind, since removing it races with a run
    that waits on it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(folder, fcntl.LOCK_UN)
    finally:
        os.close(folder)
