"""``jaxdrive.malloc_tunables``: the glibc malloc settings under which XLA:CPU reuses its buffers."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxdrive.malloc_tunables import OPT_OUT, TUNABLES, tunables_env

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="the tunables are glibc's")
OURS = ":".join(f"{k}={v}" for k, v in TUNABLES.items())


@glibc
def test_missing_tunables_are_added_once_and_the_users_are_kept():
    env = tunables_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=4", "X": "1"})
    assert env["X"] == "1"
    assert env["GLIBC_TUNABLES"] == ("glibc.malloc.hugetlb=1:glibc.malloc.arena_max=4:"
                                     "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296")
    assert tunables_env(env) is None  # all set (arena_max=4 is the user's choice and stands)
    assert tunables_env({OPT_OUT: "0"}) is None
    assert tunables_env({})["GLIBC_TUNABLES"] == OURS


@glibc
@pytest.mark.parametrize("value", ["0", "false", "No", " OFF "])
def test_opt_out_spellings(value):
    assert tunables_env({OPT_OUT: value}) is None


@glibc
@pytest.mark.parametrize("value", ["", "1", "true", "Yes", "on"])
def test_opt_in_spellings(value):
    assert tunables_env({OPT_OUT: value})["GLIBC_TUNABLES"] == OURS


def test_an_unrecognised_opt_out_value_is_an_error_naming_it():
    with pytest.raises(ValueError, match="JAXDRIVE_MALLOC_TUNABLES.*'maybe'"):
        tunables_env({OPT_OUT: "maybe"})
    env = {**os.environ, OPT_OUT: "maybe"}
    done = subprocess.run([sys.executable, "-m", "jaxdrive.cli", "score", "--count", "1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "jaxdrive score: JAXDRIVE_MALLOC_TUNABLES: expected 0 / false / no / off (opt out of the malloc settings) or "
        "1 / true / yes / on, got 'maybe'"]


@glibc
def test_reexec_keeps_the_command_line_and_sets_the_tunables_once():
    code = ("import json, os, sys; from jaxdrive.malloc_tunables import reexec_with_malloc_tunables; "
            "print('start', flush=True); reexec_with_malloc_tunables(); "
            "print(json.dumps([sys.argv[1:], os.environ['GLIBC_TUNABLES']]))")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT)}
    out = subprocess.run([sys.executable, "-c", code, "a", "--b"], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[:2] == ["start", "start"]  # one re-execution, then the program runs on
    assert json.loads(out[2]) == [["a", "--b"], OURS]
    env[OPT_OUT] = "0"
    out = subprocess.run([sys.executable, "-c", code.replace("os.environ['GLIBC_TUNABLES']", "'-'")], env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["start", '[[], "-"]']


# A worker thread allocates, fills and frees a 96 MiB buffer (as XLA's threads do with a program's temporaries) a few
# times; prints the minor page faults of the calls after the first.
_CYCLES = textwrap.dedent("""
    import ctypes, resource, threading
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    size = 96 << 20
    faults = []
    def cycles():
        for i in range(4):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            p = libc.malloc(size)
            ctypes.memset(p, 1, size)
            libc.free(p)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    t = threading.Thread(target=cycles)
    t.start()
    t.join()
    print(sum(faults[1:]))
""")


@glibc
def test_a_threads_freed_buffer_is_reused_without_page_faults():
    """The mechanism itself: by default every call faults its 96 MiB in again (mmap / munmap); with the tunables the
    memory stays in the heap and later calls fault nothing in."""
    base = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT)}

    def later_faults(env):
        return int(subprocess.run([sys.executable, "-c", _CYCLES], env=env, capture_output=True, text=True,
                                  check=True).stdout)

    pages = (96 << 20) // os.sysconf("SC_PAGE_SIZE")
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not (thp.exists() and "[always]" in thp.read_text()):  # THP "always" maps huge pages: fewer faults
        assert later_faults(base) >= 3 * pages // 2  # 3 later calls, each faulting the buffer in again
    assert later_faults({**base, "GLIBC_TUNABLES": OURS}) < pages // 20
