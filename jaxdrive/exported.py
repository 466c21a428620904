"""Traced programs kept on disk (``jax.export``), so a short command skips tracing on every run after the first.

The persistent XLA cache (``jax_compilation_cache_dir``) saves compiling, but a jitted function is still traced and
lowered before the cache is consulted: for the full EPDMS scorer that is most of a one-scene preview. Here the
lowered program itself is serialised, keyed by the argument shapes, the jax version and a hash of jaxdrive's
sources, and called back without tracing. Functions of flat array tuples only (pytrees are flattened around them).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np

_SOURCES_HASH: str | None = None


def _sources_hash() -> str:
    """A hash of jaxdrive's Python sources: a changed kernel never runs from a stale program."""
    global _SOURCES_HASH
    if _SOURCES_HASH is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
        _SOURCES_HASH = h.hexdigest()[:16]
    return _SOURCES_HASH


def cache_dir() -> Path:
    return Path(os.environ.get("JAXDRIVE_EXPORT_CACHE", Path.home() / ".cache" / "jaxdrive" / "exported"))


def call_cached(name: str, fn: Callable[..., Sequence[jax.Array]], leaves: Sequence[np.ndarray]) -> list[jax.Array]:
    """``fn(*leaves)`` (a function of arrays returning a tuple of arrays) through a serialised export of it.

    The first call for a (name, shapes, dtypes, jax version, sources) key traces, exports and stores the program;
    later calls (other processes too) deserialise it and run it. An unreadable entry is re-exported."""
    from jax import export

    sig = "|".join(f"{np.shape(x)}:{np.asarray(x).dtype}" for x in leaves)
    key = hashlib.sha256(f"{name}|{sig}|{jax.__version__}|{jax.default_backend()}|{_sources_hash()}".encode())
    path = cache_dir() / f"{name}-{key.hexdigest()[:24]}.bin"
    exp = None
    if path.exists():
        try:
            exp = export.deserialize(bytearray(path.read_bytes()))
        except Exception:  # a truncated or foreign file: export again
            exp = None
    if exp is None:
        exp = export.export(jax.jit(fn))(*[jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in leaves])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(exp.serialize())
        os.replace(tmp, path)
    return list(exp.call(*leaves))
