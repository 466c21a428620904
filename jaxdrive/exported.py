"""Traced programs kept on disk (``jax.export``), so a short command skips tracing on every run after the first.

The persistent XLA cache (``jax_compilation_cache_dir``) saves compiling, but a jitted function is still traced and
lowered before the cache is consulted: for the full EPDMS scorer that is most of a one-scene preview. Here the
lowered program itself is serialised, keyed by the argument shapes, the jax version and a hash of jaxdrive's
sources, and called back without tracing. Functions of flat array tuples only (pytrees are flattened around them).
"""
from __future__ import annotations

import collections
import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np

from jaxdrive import atomic
from jaxdrive.errors import UserInputError

_SOURCES_HASH: str | None = None
# Environment variables that jaxdrive reads while tracing a program (the edge-tile kernel, the broad phase's
# segment reductions): part of every key, so a program traced under other settings is never called back.
TRACE_ENV = ("JAXDRIVE_KERNELS", "JAXDRIVE_SEGMENTS")
# Programs ``cached_jit`` built in this process, by key (the on-disk key): a later run in the same process (a
# notebook, a Python loop over score_source calls, a test suite) calls the compiled program again instead of
# loading and compiling it anew. The IN_MEMORY_PROGRAMS most recently used are kept.
IN_MEMORY_PROGRAMS = 8
_IN_MEMORY: collections.OrderedDict = collections.OrderedDict()  # digest -> (jitted program, [its on_build hook])
# XLA:CPU maps each compiled program's machine code in its own memory regions (~2,000 for the EPDMS scorer); past
# Linux's per-process limit (vm.max_map_count, 65,530 by default) the next compile or load crashes the process
# (SIGSEGV inside backend_compile_and_load). No program is kept in memory while the process holds more than this
# share of the limit.
MAP_SHARE = 0.5


def forget() -> None:
    """Drops the compiled programs kept in memory (``IN_MEMORY_PROGRAMS``): their memory and machine code are freed
    once nothing else holds them; the next ``cached_jit`` call loads its program from disk."""
    _IN_MEMORY.clear()


def memory_maps() -> tuple[int, int] | None:
    """(memory regions this process maps, the kernel's limit ``vm.max_map_count``), or None where ``/proc`` does not
    tell (not Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open(f"/proc/{os.getpid()}/maps", "rb") as f:
            return sum(1 for _ in f), limit
    except (OSError, ValueError):
        return None


def files_hash(files: Sequence[Path], root: Path) -> str:
    """16 hex digits of ``files`` (their paths relative to ``root``, in the order given, and their bytes)."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _sources_hash() -> str:
    """A hash of jaxdrive's Python sources: a changed kernel never runs from a stale program."""
    global _SOURCES_HASH
    if _SOURCES_HASH is None:
        root = Path(__file__).resolve().parent
        _SOURCES_HASH = files_hash(sorted(root.rglob("*.py")), root)
    return _SOURCES_HASH


def _trace_env() -> str:
    return ",".join(f"{name}={os.environ.get(name, '')}" for name in TRACE_ENV)


def cache_dir() -> Path:
    return Path(os.environ.get("JAXDRIVE_EXPORT_CACHE", Path.home() / ".cache" / "jaxdrive" / "exported"))


def cache_max_bytes() -> int:
    """The most each of jaxdrive's on-disk caches (traced programs here, compiled ones in ``xla_cache``) may hold:
    ``JAXDRIVE_CACHE_MAX_MB`` (default 2048) MiB; the least recently used entries go first."""
    return int(float(os.environ.get("JAXDRIVE_CACHE_MAX_MB", "2048")) * 2**20)


def _load(path: Path):
    """The export stored at ``path``, or None when it is missing or unreadable (a truncated or foreign file). A hit
    is marked used (access time now, modification time kept) for ``prune``."""
    from jax import export

    try:
        exp = export.deserialize(bytearray(path.read_bytes()))
    except Exception:  # missing, truncated, or written by another jax: export again
        return None
    try:
        os.utime(path, ns=(time.time_ns(), path.stat().st_mtime_ns))
    except OSError:
        pass
    return exp


def prune(directory: Path, max_bytes: int) -> list[Path]:
    """Remove the least recently used entries (``*.bin``, by access time) of ``directory`` until they hold at most
    ``max_bytes``; returns those removed. Entries another process removes meanwhile are skipped."""
    entries = []
    for path in directory.glob("*.bin"):
        try:
            st = path.stat()
        except OSError:
            continue
        entries.append((st.st_atime_ns, st.st_size, path))
    total = sum(size for _, size, _ in entries)
    removed = []
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        removed.append(path)
    return removed


def _store(path: Path, exp) -> None:
    """Write ``exp`` to ``path`` atomically (a reader never sees half a file), then ``prune`` the folder to
    ``cache_max_bytes()``; an unwritable cache is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(path, exp.serialize())
        prune(path.parent, cache_max_bytes())
    except OSError:
        pass


def call_cached(name: str, fn: Callable[..., Sequence[jax.Array]], leaves: Sequence[np.ndarray]) -> list[jax.Array]:
    """``fn(*leaves)`` (a function of arrays returning a tuple of arrays) through a serialised export of it.

    The first call for a (name, shapes, dtypes, jax version, sources, ``TRACE_ENV``) key traces, exports and stores
    the program; later calls (other processes too) deserialise it and run it. An unreadable entry is re-exported."""
    from jax import export

    sig = "|".join(f"{np.shape(x)}:{np.asarray(x).dtype}" for x in leaves)
    key = hashlib.sha256(
        f"{name}|{sig}|{jax.__version__}|{jax.default_backend()}|{_sources_hash()}|{_trace_env()}".encode())
    path = cache_dir() / f"{name}-{key.hexdigest()[:24]}.bin"
    exp = _load(path)
    if exp is None:
        exp = export.export(jax.jit(fn))(*[jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in leaves])
        _store(path, exp)
    return list(exp.call(*leaves))


def cached_jit(name: str, fn: Callable, key: str, in_sharding: jax.sharding.Sharding, out_shardings,
               on_build: Callable[[], None] | None = None) -> Callable:
    """``jax.jit(fn)`` with every input leaf at ``in_sharding`` and the outputs at ``out_shardings`` (a pytree of
    shardings with the structure of ``fn``'s output), traced once per machine rather than once per process.

    The lowered program is kept on disk (``jax.export``), keyed by ``name``, ``key`` (the caller's static options:
    everything besides the inputs that changes the program), the inputs' tree, shapes, dtypes and sharding, the
    device count and kind, the jax version, jaxdrive's sources and ``TRACE_ENV``; a later process calls it without
    tracing (XLA's persistent cache then saves the compile); a later call in the same process reuses the compiled
    program (``IN_MEMORY_PROGRAMS``). ``on_build()`` runs each time a caller gets a program: traced, loaded or
    reused (once per input signature of the returned function). In a multi-process run, or when ``fn`` cannot be
    exported, it is the plain ``jax.jit``.
    """
    out_leaves, out_tree = jax.tree_util.tree_flatten(out_shardings)

    def counted(*args):
        if on_build is not None:
            on_build()  # runs only while tracing
        return fn(*args)

    plain = jax.jit(counted, in_shardings=in_sharding, out_shardings=out_shardings)
    if jax.process_count() > 1:
        return plain
    programs: dict = {}

    def call(*args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        sig = (tree, tuple((np.shape(x), np.dtype(x.dtype)) for x in leaves))
        if sig not in programs:
            programs[sig] = _program(tree, leaves)
        return jax.tree_util.tree_unflatten(out_tree, programs[sig](*leaves))

    def _program(tree, leaves) -> Callable:
        from jax import export

        ins = (in_sharding,) * len(leaves)
        outs = tuple(out_leaves)
        devices = in_sharding.device_set
        text = "|".join([name, key, str(tree), ";".join(f"{np.shape(x)}:{np.dtype(x.dtype)}" for x in leaves),
                         repr(in_sharding), f"{len(devices)}x{next(iter(devices)).device_kind}",
                         f"x64={jax.config.jax_enable_x64}", f"matmul={jax.config.jax_default_matmul_precision}",
                         jax.__version__, jax.default_backend(), _sources_hash(), _trace_env()])
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        if digest in _IN_MEMORY:
            _IN_MEMORY.move_to_end(digest)
            program, hook = _IN_MEMORY[digest]
            hook[0] = on_build  # a retrace (none expected: the key holds the shapes) counts for the current caller
            if on_build is not None:
                on_build()
            return program
        path = cache_dir() / f"{name}-{digest}.bin"
        exp = _load(path)
        if exp is None:
            def flat(*flat_leaves):
                out = fn(*jax.tree_util.tree_unflatten(tree, flat_leaves))
                got, got_tree = jax.tree_util.tree_flatten(out)
                if got_tree != out_tree:
                    raise UserInputError(f"cached_jit({name!r}): output {got_tree} does not match out_shardings {out_tree}")
                return tuple(got)

            try:
                exp = export.export(jax.jit(flat, in_shardings=ins, out_shardings=outs))(
                    *[jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=in_sharding) for x in leaves])
            except Exception:  # e.g. a custom call jax.export does not allow: trace in every process instead
                return lambda *flat_leaves: jax.tree_util.tree_leaves(plain(*jax.tree_util.tree_unflatten(tree,
                                                                                                          flat_leaves)))
            _store(path, exp)

        hook = [on_build]

        def run(*flat_leaves):
            if hook[0] is not None:
                hook[0]()  # runs only while tracing
            return exp.call(*flat_leaves)

        program = jax.jit(run, in_shardings=ins, out_shardings=outs)
        maps = memory_maps()
        if maps is not None and maps[0] > MAP_SHARE * maps[1]:
            forget()  # near the kernel's limit: keep nothing (the programs are on disk)
        else:
            _IN_MEMORY[digest] = (program, hook)
        while len(_IN_MEMORY) > IN_MEMORY_PROGRAMS:
            _IN_MEMORY.popitem(last=False)
        return program

    return call
