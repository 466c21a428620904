"""glibc ``malloc`` settings under which XLA:CPU reuses its buffers instead of faulting fresh pages on every call.

Every call of a jitted program on CPU allocates its temporary buffers afresh and frees them at the end. By default
glibc serves the large ones with ``mmap`` and unmaps them on ``free``; XLA allocates from its worker threads, whose
malloc arenas are capped at 64 MiB, so that happens whatever the dynamic threshold learns. The next call faults the
same memory in again, zero-filled by the kernel: ~38,000 minor page faults and 70 ms of kernel time per scoring step
of 4,096 proposals here, more than a third of the step (docs/scoring-at-scale.md).

The settings (``GLIBC_TUNABLES``): one arena for all threads (``arena_max=1``: the main heap, which has no size cap),
no ``mmap`` below 4 GiB (``mmap_threshold``) and no returning of the heap's top to the system below 4 GiB
(``trim_threshold``). Freed buffers stay in the process and the next call reuses them: after the first batches a
step takes no page faults. The cost is memory that stays resident at its peak (~1.7-1.9 GB instead of ~1.3-1.6 GB for
a 2-core scoring job at K = 1,024) and a slower cold XLA compile (one arena for LLVM's compile threads: +2-3 s for
the scorer, paid once per program and host with ``jaxdrive.xla_cache``). Results are unchanged (the same program on
the same inputs). ``jaxdrive score`` and ``jaxdrive vocab`` apply them.

Tunables are read when a process starts, so a command line entry point re-executes itself with them
(``reexec_with_malloc_tunables``); a program that calls ``jaxdrive.score`` in its own loop should be started with
``GLIBC_TUNABLES`` set (to ``tunables_env({})["GLIBC_TUNABLES"]``). A setting the user already chose is kept.
Without glibc it does nothing; ``JAXDRIVE_MALLOC_TUNABLES=0`` (or ``false`` / ``no`` / ``off``) opts out.
"""

from __future__ import annotations

import os
import platform
import sys

from jaxdrive.errors import UserInputError

TUNABLES = {"glibc.malloc.arena_max": "1", "glibc.malloc.mmap_threshold": str(4 << 30),
            "glibc.malloc.trim_threshold": str(4 << 30)}
OPT_OUT = "JAXDRIVE_MALLOC_TUNABLES"  # "0" / "false" / "no" / "off": never re-execute
_OFF, _ON = ("0", "false", "no", "off"), ("", "1", "true", "yes", "on")


def _opted_out(env: dict[str, str]) -> bool:
    value = env.get(OPT_OUT, "").strip().lower()
    if value not in _OFF + _ON:
        raise UserInputError(f"{OPT_OUT}: expected 0 / false / no / off (opt out of the malloc settings) or "
                         f"1 / true / yes / on, got {env[OPT_OUT]!r}")
    return value in _OFF


def tunables_env(env: dict[str, str]) -> dict[str, str] | None:
    """``env`` with every one of ``TUNABLES`` it does not set added to ``GLIBC_TUNABLES``; None if there is nothing
    to do (all set, whatever their values; opted out with ``JAXDRIVE_MALLOC_TUNABLES=0``; not Linux with glibc).
    An unrecognised ``JAXDRIVE_MALLOC_TUNABLES`` value is a ValueError naming it."""
    if _opted_out(env) or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    chosen = {t.split("=")[0] for t in tunables}
    missing = [f"{name}={value}" for name, value in TUNABLES.items() if name not in chosen]
    if not missing:
        return None
    return {**env, "GLIBC_TUNABLES": ":".join(tunables + missing)}


def reexec_with_malloc_tunables() -> None:
    """Replace this process by the same command line with ``TUNABLES`` set (``tunables_env``), if needed.

    Call it first thing in a program's entry point (nothing is lost but the interpreter's start-up); it returns only
    when there is nothing to do.
    """
    env = tunables_env(dict(os.environ))
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, list(sys.orig_argv), env)
