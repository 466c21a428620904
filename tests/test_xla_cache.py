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
    saved = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    yield
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[1])


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
