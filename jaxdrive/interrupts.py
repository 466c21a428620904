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
"""
from __future__ import annotations

import _thread
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
