"""Replacing a file atomically: write it beside its final path under a temporary name, then ``os.replace`` it there.

A reader (another process, a resumed run, a cache lookup) sees the old file or the new one, never half of one; a
writer killed midway leaves at most a ``*.tmp`` file beside it. The temporary name carries the process id, so
processes writing the same path at once do not write into each other's file.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

TMP_SUFFIX = ".tmp"  # every temporary name ends with it (a run directory removes stale ones on start)


def temporary_name(path: Path) -> Path:
    """``<name>.<pid>.tmp`` beside ``path``."""
    return path.with_name(f"{path.name}.{os.getpid()}{TMP_SUFFIX}")


@contextlib.contextmanager
def replacing(path: str | os.PathLike, *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on a normal exit move it onto ``path`` (first flushing it to
    disk when ``fsync``), on an exception remove it and re-raise."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        yield tmp
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically (``replacing``)."""
    with replacing(path, fsync=fsync) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str, *, fsync: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically (``replacing``)."""
    write_bytes(path, text.encode(), fsync=fsync)
