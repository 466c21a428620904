"""Transparent huge pages for XLA's CPU buffers (glibc ``malloc``).

Every call of a jitted program on CPU allocates its temporary buffers afresh, and glibc maps the large ones as new
4 KiB pages: the scorer's step takes ~50,000 minor page faults per 4,096 proposals (``resource.getrusage``), ~25% of
its CPU time spent in the kernel (docs/scoring-at-scale.md). With ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``
(glibc >= 2.35) malloc advises transparent huge pages on what it maps, the faults drop to ~600 per step and the
step's results are unchanged (the same program on the same inputs). Tunables are read when a process starts, so a
command line entry point re-executes itself with the tunable set (``reexec_with_huge_pages``); elsewhere, set it in
the environment before starting Python. Without glibc, or with the kernel's THP mode "never", it does nothing.
"""

from __future__ import annotations

import os
import platform
import sys

TUNABLE = "glibc.malloc.hugetlb"
OPT_OUT = "JAXDRIVE_HUGE_PAGES"  # "0": never re-execute


def with_huge_pages(env: dict[str, str]) -> dict[str, str] | None:
    """``env`` with ``glibc.malloc.hugetlb=1`` added to ``GLIBC_TUNABLES``; None if there is nothing to do (already
    set, opted out with ``JAXDRIVE_HUGE_PAGES=0``, or not Linux with glibc)."""
    if env.get(OPT_OUT) == "0" or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    if any(t.split("=")[0] == TUNABLE for t in tunables):
        return None
    return {**env, "GLIBC_TUNABLES": ":".join(tunables + [f"{TUNABLE}=1"])}


def reexec_with_huge_pages() -> None:
    """Replace this process by the same command line with huge pages enabled (``with_huge_pages``), if needed.

    Call it first thing in a program's entry point (nothing is lost but the interpreter's start-up); it returns only
    when there is nothing to do.
    """
    env = with_huge_pages(dict(os.environ))
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, list(sys.orig_argv), env)
