"""The one exception type of jaxdrive's own input checks.

``UserInputError`` (a ``ValueError``, so callers that catch ``ValueError`` keep working) is raised wherever jaxdrive
checks what a user gave it (command-line arguments, scene files, stores, predictions, gates, labels, configs) and
refuses it with a message naming the input, what was expected and what was given. The command line turns exactly
these into one line on stderr and exit status 2; any other exception (a ``ValueError`` from numpy or JAX included) is
a bug in jaxdrive or a problem of its environment: exit status 1, with the traceback and a request to report it.
"""

from __future__ import annotations


class UserInputError(ValueError):
    """An input (argument, file, config value) that jaxdrive's checks refuse; the message says which and why."""
