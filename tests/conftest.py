"""Suite-wide setup: 8 forced host CPU devices so sharding tests build meshes like (data=4, tensor=2) on one CPU."""
import os

# XLA:CPU's older loop emitters instead of its fusion emitters: compiling, two thirds of the suite's time, is ~40%
# faster (the EPDMS scorer: 11.7 -> 6.9 s) and the runtime-heavy tests run no slower (PDM-Closed on every fixture,
# segment scans, NAVSIM parity: 167 -> 129 s together). Users run the fusion emitters (XLA's default): the tests of
# what holds bit for bit, and NAVSIM parity on every fixture proposal, compile with PRODUCT_CODEGEN.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_cpu_use_fusion_emitters=false")
PRODUCT_CODEGEN = {"xla_cpu_use_fusion_emitters": True}  # jax.jit(..., compiler_options=): the code users run
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One XLA compilation cache for this run's CLI subprocesses (the EPDMS scorer and the tiny models compile once per
# shape instead of once per subprocess), in a fresh folder removed at exit: a run never reads what an earlier run
# (perhaps killed mid-write) left, as on a fresh machine. The pytest process itself keeps its executables in memory
# and never deserializes one: CI died twice with SIGSEGV inside JAX's cache read (deserialize_executable) there.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _xla_cache = tempfile.mkdtemp(prefix="jaxdrive-test-xla-")
    atexit.register(shutil.rmtree, _xla_cache, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _xla_cache
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")
# Likewise for traced programs kept on disk (jaxdrive.exported): a fresh folder per run, never the user's cache.
if "JAXDRIVE_EXPORT_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _export_cache = tempfile.mkdtemp(prefix="jaxdrive-test-export-")
    atexit.register(shutil.rmtree, _export_cache, ignore_errors=True)
    os.environ["JAXDRIVE_EXPORT_CACHE"] = _export_cache

from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)  # this process only; its subprocesses read the env above


@pytest.fixture(autouse=True)
def _memory_maps_below_the_kernels_limit():
    """After each test, a worker holding more than ``exported.MAP_SHARE`` of the kernel's limit on memory regions
    (vm.max_map_count) drops its compiled programs (jax's caches, ``exported``'s in-memory ones). XLA:CPU maps every
    program's machine code in regions of its own; a worker that compiles the suite's hundreds of programs reached
    35,000 regions, and at the limit (65,530 here) the next compile crashed with SIGSEGV (CI: three workers in three
    runs, inside backend_compile_and_load)."""
    import gc
    import warnings

    from jaxdrive import exported

    yield
    maps = exported.memory_maps()
    if maps is not None and maps[0] > exported.MAP_SHARE * maps[1]:
        exported.forget()
        jax.clear_caches()
        gc.collect()
        warnings.warn(f"compiled programs dropped at {maps[0]} memory regions (limit {maps[1]}): "
                      f"{exported.memory_maps()[0]} after", UserWarning)


def locate_shared(conftest: Path = Path(__file__)) -> Path:
    """``shared/`` beside the checkout (``<repo>/../shared``), found from this file's location; ``JAXDRIVE_SHARED``
    overrides it. The one place the suite looks for the fixtures: no absolute path anywhere in the tests."""
    if os.environ.get("JAXDRIVE_SHARED"):
        return Path(os.environ["JAXDRIVE_SHARED"]).resolve()
    return conftest.resolve().parent.parent.parent / "shared"


SHARED = locate_shared()
EPDMS_FIXTURES = SHARED / "fixtures" / "epdms"


def pytest_configure(config):
    if not (SHARED / "fixtures").is_dir():
        raise pytest.UsageError(f"the shared fixtures are not at {SHARED}: the suite expects shared/ beside the "
                                "checkout (or JAXDRIVE_SHARED=/path/to/shared)")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``shared/`` (specs, fixtures, vendored sources) beside the checkout."""
    return SHARED
