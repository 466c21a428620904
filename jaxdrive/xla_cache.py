"""The persistent XLA compilation cache of jaxdrive's commands, one folder per kind of host CPU.

XLA:CPU compiles for the host's instruction set (AVX2, AVX-512, ...) and its cache entries are machine code. A home
directory shared by different machines (a login node and compute nodes on NFS, VMs moved between hosts) would
otherwise hand one machine's programs to another: code for a narrower CPU runs without its wider vectors, and code for
a wider one must not run at all (XLA's loader compares the compile machine's features with the host's and logs an
error on a mismatch; jax-ml/jax#38445 quotes it). So ``~/.cache/jaxdrive/xla/<host>/``, where ``<host>`` hashes the machine type, the CPU's feature flags and the
jaxlib version. ``JAX_COMPILATION_CACHE_DIR`` set in the environment is used as it is.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

from jaxdrive import atomic

MIN_COMPILE_TIME_S = 1.0  # programs that compile faster are not written


def cpu_features(cpuinfo: str | None = None) -> str:
    """The host CPU's feature flags, sorted and space-separated (Linux: the first ``flags`` / ``Features`` line of
    /proc/cpuinfo; elsewhere the processor's name). ``cpuinfo``: the text of /proc/cpuinfo, for tests."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return platform.processor()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return " ".join(sorted(set(value.split())))
    return platform.processor()


def host_fingerprint(features: str | None = None) -> str:
    """16 hex digits naming this kind of host: machine type, CPU features (``cpu_features``), jaxlib version."""
    import jaxlib

    text = "\n".join([platform.machine(), cpu_features() if features is None else features, jaxlib.__version__])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_dir() -> Path:
    """``~/.cache/jaxdrive/xla/<host_fingerprint()>``."""
    return Path.home() / ".cache" / "jaxdrive" / "xla" / host_fingerprint()


def enable() -> None:
    """Reuse compiled XLA programs across runs (the scorer compiles in seconds; a rerun then starts at once), in
    ``default_dir()`` unless ``JAX_COMPILATION_CACHE_DIR`` is set. That folder is kept to
    ``jaxdrive.exported.cache_max_bytes()`` (JAX's own least-recently-used eviction) unless
    ``JAX_COMPILATION_CACHE_MAX_SIZE`` says otherwise; a folder the environment names is left as JAX's settings say."""
    import jax

    from jaxdrive.exported import cache_max_bytes

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", str(default_dir()))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
        if not os.environ.get("JAX_COMPILATION_CACHE_MAX_SIZE"):
            add_missing_use_times(default_dir())
            jax.config.update("jax_compilation_cache_max_size", cache_max_bytes())


def add_missing_use_times(folder: Path) -> None:
    """Give every entry of ``folder`` that lacks one the last-use file (``<key>-atime``: 8 bytes, little-endian
    nanoseconds) of JAX's size-capped cache, set to the entry's modification time. Entries written before the cap was
    set (an older jaxdrive) have none, and with a cap JAX fails to write any new entry while one is missing."""
    if not folder.is_dir():
        return
    for entry in folder.glob("*-cache"):
        use = entry.with_name(entry.name[: -len("-cache")] + "-atime")
        if use.exists():
            continue
        try:
            atomic.write_bytes(use, entry.stat().st_mtime_ns.to_bytes(8, "little"))
        except OSError:  # removed meanwhile, or a read-only cache: JAX reports what it cannot do
            pass
