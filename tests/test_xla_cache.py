"""The commands' persistent XLA cache: one folder per kind of host CPU (``jaxdrive.xla_cache``)."""

from __future__ import annotations

import jax
import pytest

from jaxdrive import xla_cache

AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n\nprocessor\t: 1\nflags\t\t: fpu\n"
AVX512 = "processor\t: 0\nflags\t\t: avx2 fpu avx512f avx512bw sse2 avx fma bmi2 avx512vl\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\nCPU implementer\t: 0x41\n"


def test_cpu_features_reads_the_first_flags_line_sorted():
    assert xla_cache.cpu_features(AVX2) == "avx avx2 bmi2 fma fpu sse2"
    assert xla_cache.cpu_features(ARM) == "aes asimd crc32 evtstrm fp pmull sha1 sha2"
    assert xla_cache.cpu_features("flags : b a a\n") == "a b"


def test_hosts_with_other_instruction_sets_get_other_folders():
    avx2 = xla_cache.host_fingerprint(xla_cache.cpu_features(AVX2))
    avx512 = xla_cache.host_fingerprint(xla_cache.cpu_features(AVX512))
    assert avx2 != avx512
    assert len(avx2) == 16 and int(avx2, 16) >= 0
    same = "flags : bmi2 fma avx2 avx sse2 fpu fpu\n"  # the same set in another order
    assert xla_cache.host_fingerprint(xla_cache.cpu_features(same)) == avx2
    assert xla_cache.host_fingerprint() == xla_cache.host_fingerprint()  # this host: stable


@pytest.fixture
def restore_cache_config():
    saved = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs,
             jax.config.jax_compilation_cache_max_size)
    yield
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[1])
    jax.config.update("jax_compilation_cache_max_size", saved[2])


def test_enable_uses_the_host_folder_unless_the_environment_names_one(tmp_path, monkeypatch, restore_cache_config):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    xla_cache.enable()
    want = tmp_path / ".cache" / "jaxdrive" / "xla" / xla_cache.host_fingerprint()
    assert jax.config.jax_compilation_cache_dir == str(want) == str(xla_cache.default_dir())
    assert jax.config.jax_persistent_cache_min_compile_time_secs == xla_cache.MIN_COMPILE_TIME_S

    jax.config.update("jax_compilation_cache_dir", None)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))  # jax reads it itself
    xla_cache.enable()
    assert jax.config.jax_compilation_cache_dir is None


_COMPILE = """
import sys
import jax, jax.numpy as jnp
from jaxdrive import xla_cache
if sys.argv[1] == "uncapped-by-hand":  # as an older jaxdrive did: the folder, no size cap
    jax.config.update("jax_compilation_cache_dir", str(xla_cache.default_dir()))
else:
    xla_cache.enable()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # every program is written
for n in range(int(sys.argv[2]), int(sys.argv[3])):
    jax.jit(lambda x: jnp.cumsum(jnp.sin(x) * n))(jnp.ones((n * 8,))).block_until_ready()
print(sum(p.stat().st_size for p in xla_cache.default_dir().iterdir() if p.name.endswith("-cache")))
"""


def _compile(home, mode: str, first: int, stop: int, **env) -> tuple[int, str]:
    """Bytes of compiled programs in ``home``'s cache folder after compiling programs ``first..stop-1`` in a fresh
    process (``mode``: "enable" or "uncapped-by-hand"), and its stderr."""
    import os
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items()
            if k not in ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE")}
    done = subprocess.run([sys.executable, "-c", _COMPILE, mode, str(first), str(stop)],
                          env={**base, "HOME": str(home), **env}, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1]), done.stderr


def test_the_compiled_program_cache_stays_under_its_cap(tmp_path):
    """``xla_cache.enable`` caps its folder at ``JAXDRIVE_CACHE_MAX_MB`` (JAX evicts the least recently used
    programs): eight small programs fill an uncapped folder past 30 KB, a folder capped at 30 KB stays under it."""
    cap = 30 * 1024
    assert _compile(tmp_path / "capped", "enable", 1, 9, JAXDRIVE_CACHE_MAX_MB=str(cap / 2**20))[0] <= cap
    assert _compile(tmp_path / "uncapped", "enable", 1, 9, JAXDRIVE_CACHE_MAX_MB="1000")[0] > cap


def test_a_cache_folder_written_without_a_cap_keeps_working_under_one(tmp_path):
    """Entries an older jaxdrive wrote have no last-use file; JAX's capped cache then fails to write new ones
    ("Error writing persistent compilation cache entry"). ``enable`` gives them one: new programs are written."""
    before, _ = _compile(tmp_path, "uncapped-by-hand", 1, 3)
    after, err = _compile(tmp_path, "enable", 3, 5)
    assert "Error writing persistent compilation cache" not in err, err
    assert after > before
    folder = next((tmp_path / ".cache" / "jaxdrive" / "xla").iterdir())
    entries = sorted(p.name[: -len("-cache")] for p in folder.glob("*-cache"))
    assert entries == sorted(p.name[: -len("-atime")] for p in folder.glob("*-atime"))


def test_traced_programs_beyond_the_cap_go_least_recently_used_first(tmp_path, monkeypatch):
    """``exported``: a reused entry counts as used now (its modification time kept), so when a new one takes the
    folder past ``JAXDRIVE_CACHE_MAX_MB`` the entry unused longest is removed, and the reused one stays."""
    import time

    import numpy as np

    from jaxdrive import exported

    monkeypatch.setenv("JAXDRIVE_EXPORT_CACHE", str(tmp_path))
    fn = lambda x: (x * 2.0,)
    exported.call_cached("f", fn, [np.ones(3, np.float32)])
    first = next(tmp_path.glob("f-*.bin"))
    mtime = first.stat().st_mtime_ns
    time.sleep(0.01)
    exported.call_cached("f", fn, [np.ones(4, np.float32)])
    second = (set(tmp_path.glob("f-*.bin")) - {first}).pop()
    time.sleep(0.01)
    np.testing.assert_array_equal(exported.call_cached("f", fn, [np.ones(3, np.float32)])[0], 2.0)  # reused
    assert first.stat().st_mtime_ns == mtime and first.stat().st_atime_ns > second.stat().st_atime_ns

    size = first.stat().st_size
    monkeypatch.setenv("JAXDRIVE_CACHE_MAX_MB", str(2.5 * size / 2**20))  # room for two entries
    exported.call_cached("f", fn, [np.ones(5, np.float32)])
    left = set(tmp_path.glob("f-*.bin"))
    assert first in left and second not in left and len(left) == 2


def test_a_traced_program_is_not_reused_under_other_trace_settings(tmp_path, monkeypatch):
    """``exported``: the environment jaxdrive reads while tracing (``TRACE_ENV``: the edge-tile kernel, the segment
    reductions) is part of the key, so a program traced under ``JAXDRIVE_SEGMENTS=scatter`` is not called back under
    ``scan`` (a run would silently have measured or used the other implementation)."""
    import os

    import numpy as np

    from jaxdrive import exported

    monkeypatch.setenv("JAXDRIVE_EXPORT_CACHE", str(tmp_path))
    def fn():  # a new function per call, as in a new process (jax reuses its traces of one function object)
        return lambda x: (x * (2.0 if os.environ.get("JAXDRIVE_SEGMENTS") == "scan" else 3.0),)

    monkeypatch.setenv("JAXDRIVE_SEGMENTS", "scatter")
    np.testing.assert_array_equal(exported.call_cached("f", fn(), [np.ones(3, np.float32)])[0], 3.0)
    monkeypatch.setenv("JAXDRIVE_SEGMENTS", "scan")
    np.testing.assert_array_equal(exported.call_cached("f", fn(), [np.ones(3, np.float32)])[0], 2.0)
    assert len(list(tmp_path.glob("f-*.bin"))) == 2


def test_cached_jit_reuses_loads_re_exports_a_corrupt_entry_and_traces_a_refused_program(tmp_path, monkeypatch):
    """``exported.cached_jit`` on a small sharded function of a pytree: the first call traces and exports it; in the
    same process it is reused (no trace, no read); a new process (nothing in memory) loads it without tracing;
    another key is another program; a corrupt entry is exported again; a program ``jax.export`` refuses is traced
    as a plain ``jax.jit`` (nothing stored). Every way gives the same outputs, and ``on_build`` runs once per caller."""
    import collections
    import shutil

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import export
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from jaxdrive import exported

    monkeypatch.setenv("JAXDRIVE_EXPORT_CACHE", str(tmp_path / "exp"))
    loads = []
    real_load = exported._load
    monkeypatch.setattr(exported, "_load", lambda path: loads.append(path) or real_load(path))
    mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
    data = NamedSharding(mesh, PartitionSpec("data"))
    out = {"sum": data, "max": NamedSharding(mesh, PartitionSpec())}
    traces, builds = [], []

    def fn(pair):
        traces.append(1)
        return {"sum": pair["x"] + pair["y"], "max": jnp.max(pair["x"])}

    x, y = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    programs = lambda: sorted((tmp_path / "exp").glob("t-*.bin"))

    def call(key="k", fresh=True):
        if fresh:
            monkeypatch.setattr(exported, "_IN_MEMORY", collections.OrderedDict())
        counts = len(traces), len(builds), len(loads)
        got = jax.device_get(exported.cached_jit("t", fn, key, data, out, on_build=lambda: builds.append(1))(
            {"x": x, "y": y}))
        np.testing.assert_array_equal(got["sum"], x + y)
        assert got["max"] == 7.0
        return len(traces) - counts[0], len(builds) - counts[1], len(loads) - counts[2], programs()

    first = call()
    assert first[:3] == (1, 1, 1) and len(first[3]) == 1  # looked for on disk, traced, exported
    assert call(fresh=False) == (0, 1, 0, first[3])  # reused in memory: not traced, not read
    maps = exported.memory_maps()
    assert maps is not None and 0 < maps[0] < maps[1]  # this Linux process's regions and the kernel's limit
    monkeypatch.setattr(exported, "memory_maps", lambda: (40_000, 65_530))  # over MAP_SHARE of the limit
    assert call()[:3] == (0, 1, 1) and not exported._IN_MEMORY  # loaded and called, kept nowhere
    assert call(fresh=False)[:3] == (0, 1, 1)  # so loaded again
    monkeypatch.setattr(exported, "memory_maps", lambda: None)  # no /proc: kept as before
    call()
    assert len(exported._IN_MEMORY) == 1
    exported.forget()
    assert not exported._IN_MEMORY
    assert call() == (0, 1, 1, first[3])  # a new process: loaded, not traced
    assert call(key="other")[:2] == (1, 1) and len(programs()) == 2  # other static options: another program
    first[3][0].write_bytes(b"garbage")
    corrupt = call()
    assert corrupt[:2] == (1, 1) and first[3][0].stat().st_size > 100  # exported again
    shutil.rmtree(tmp_path / "exp")
    monkeypatch.setattr(export, "export", lambda *a, **k: (_ for _ in ()).throw(ValueError("refused")))
    assert call()[:2] == (1, 1) and programs() == []  # traced as a plain jax.jit, nothing stored
