"""Suite-wide setup: 8 forced host CPU devices so sharding tests build meshes like (data=4, tensor=2) on one CPU."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One persistent XLA compilation cache for the whole run (tests and the CLI subprocesses they start): the EPDMS scorer
# and the tiny models compile once per shape instead of once per test.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "jaxdrive-test-xla"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


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
