"""Ctrl-C as the ``jaxdrive`` program (``jaxdrive.interrupts``): each case runs ``cli.main()`` in a subprocess."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from jaxdrive.cli import EXIT_INTERRUPTED

# `eval tps` parses without reading anything; the interrupt comes where the command starts (xla_cache.enable)
_PROGRAM = textwrap.dedent("""
    import atexit, gc, sys, time
    import jaxdrive.cli as cli

    atexit.register(lambda: print("interpreter shutdown", flush=True))
    fired = []

    def in_gc_callback(phase, info):  # as JAX's _xla_gc_callback would be when Ctrl-C lands in it
        if not fired:
            fired.append(phase)
            raise KeyboardInterrupt

    def start(how=sys.argv[1]):
        if how == "plain":
            raise KeyboardInterrupt
        gc.callbacks.append(in_gc_callback)
        gc.collect()
        end = time.monotonic() + 20  # the command's work
        while time.monotonic() < end:
            pass
        print("ran on after the interrupt", flush=True)

    cli.xla_cache.enable = start
    sys.argv = ["jaxdrive", "eval", "tps", "--predictions", "p.parquet"]
    sys.exit(cli.main())
""")


def _run(how: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROGRAM, how], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


def test_an_interrupted_command_ends_without_the_interpreters_shutdown(tmp_path):
    """judge data interrupted in its BEV rendering waited a minute in the interpreter's shutdown and then crashed in
    XLA's teardown (SIGSEGV, status -11): an interrupted command now ends at once, after its message."""
    proc = _run("plain", tmp_path)
    assert proc.returncode == EXIT_INTERRUPTED, proc.stderr
    assert "jaxdrive eval: interrupted" in proc.stderr
    assert "interpreter shutdown" not in proc.stdout


def test_an_interrupt_swallowed_in_a_gc_callback_still_interrupts(tmp_path):
    """Python prints "Exception ignored" for a KeyboardInterrupt raised in a garbage-collector callback and goes on:
    scenes from-navsim, vocab and data build ran to their end and exited 0 after a Ctrl-C."""
    proc = _run("gc", tmp_path)
    assert proc.returncode == EXIT_INTERRUPTED, (proc.stdout, proc.stderr)
    assert "ran on after the interrupt" not in proc.stdout
    assert "jaxdrive eval: interrupted" in proc.stderr
