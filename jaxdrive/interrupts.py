"""Ctrl-C on the command line: every interrupt reaches the command, and an interrupted command ends at once.

* An interrupt that lands in a garbage-collector callback (JAX registers one, ``_xla_gc_callback``) is printed by
  Python as "Exception ignored ... KeyboardInterrupt" and lost: the command ran on to its end and exited 0.
  ``deliver_swallowed_interrupts`` hands such an interrupt from ``sys.unraisablehook`` to a thread that interrupts
  the main thread again a moment later, once it has left the hook (an interrupt handled inside the hook would be
  lost the same way), so the KeyboardInterrupt is raised where the program resumes.
* Once the command has handled its interrupt (committed outputs kept, its message printed), ``exit_now`` ends the
  process without the interpreter's shutdown, which waited for the device computation the interrupt cut into (judge
  data's BEV rendering: a minute on a 2-core CPU) and then crashed in XLA's teardown (SIGSEGV: status -11, not 130).

Both are for the ``jaxdrive`` program itself (``cli.main()`` without arguments), never for a caller's process.
``held_until_done`` is for any caller: work that must be applied whole (a training step's updates) holds Ctrl-C until
it ends.
"""
from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import time
from typing import NoReturn


def _is_interrupt(unraisable) -> bool:
    return unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt)


REDELIVERY_DELAY_S = 0.05  # the hook has returned by then; if the interrupt lands in a callback again, it comes back


def _interrupt_main_soon() -> None:
    time.sleep(REDELIVERY_DELAY_S)
    _thread.interrupt_main(signal.SIGINT)


def deliver_swallowed_interrupts() -> None:
    """Installs a ``sys.unraisablehook`` that interrupts the main thread again for an interrupt Python could not
    raise (any other unraisable exception goes to the hook installed before). Installing it twice keeps one."""
    previous = sys.unraisablehook
    if getattr(previous, "redelivers_interrupts", False):
        return

    def hook(unraisable) -> None:
        if _is_interrupt(unraisable):
            threading.Thread(target=_interrupt_main_soon, name="jaxdrive-interrupt", daemon=True).start()
        else:
            previous(unraisable)

    hook.redelivers_interrupts = True
    sys.unraisablehook = hook


def exit_now(code: int) -> NoReturn:
    """Ends the process with ``code`` at once: the peers of a multi-process job are told that it failed (as at
    exit), stdout and stderr flushed, and no interpreter shutdown (``os._exit``)."""
    from jaxdrive import distributed

    distributed.announce_exit()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextlib.contextmanager
def held_until_done(note: str):
    """Ctrl-C inside the block is held until the block ends, then raised there as ``KeyboardInterrupt`` (``note``
    printed to stderr when it arrives), so the block's work is applied whole or, when the block raises, not at all;
    a second Ctrl-C raises at once. Outside the main thread (which alone receives signals) the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []

    def hold(signum, frame):
        if held:
            raise KeyboardInterrupt
        held.append(signum)
        print(note, file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt
