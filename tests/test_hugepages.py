"""``jaxdrive.hugepages``: the glibc tunable that puts XLA's CPU buffers on transparent huge pages."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from jaxdrive.hugepages import OPT_OUT, TUNABLE, with_huge_pages

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="the tunable is glibc's")


@glibc
def test_tunable_is_added_once_and_kept_with_others():
    env = with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "X": "1"})
    assert env == {"GLIBC_TUNABLES": f"glibc.malloc.arena_max=2:{TUNABLE}=1", "X": "1"}
    assert with_huge_pages(env) is None  # already set: nothing to do
    assert with_huge_pages({"GLIBC_TUNABLES": f"{TUNABLE}=0"}) is None  # the user's choice stands
    assert with_huge_pages({OPT_OUT: "0"}) is None
    assert with_huge_pages({})["GLIBC_TUNABLES"] == f"{TUNABLE}=1"


@glibc
def test_reexec_keeps_the_command_line_and_sets_the_tunable_once():
    code = ("import json, os, sys; from jaxdrive.hugepages import reexec_with_huge_pages; "
            "print('start', flush=True); reexec_with_huge_pages(); "
            "print(json.dumps([sys.argv[1:], os.environ['GLIBC_TUNABLES']]))")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT)}
    out = subprocess.run([sys.executable, "-c", code, "a", "--b"], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[:2] == ["start", "start"]  # one re-execution, then the program runs on
    assert json.loads(out[2]) == [["a", "--b"], f"{TUNABLE}=1"]
    env[OPT_OUT] = "0"
    out = subprocess.run([sys.executable, "-c", code.replace("os.environ['GLIBC_TUNABLES']", "'-'")], env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["start", '[[], "-"]']
