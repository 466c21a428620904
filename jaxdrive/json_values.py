"""Checks on values read from JSON (files, configs, model tool calls) before they are used as numbers.

JSON has one number type, which Python reads as ``int`` or ``float``; three of its values trip a plain
``isinstance(v, (int, float))`` test: ``true`` / ``false`` (``bool`` is an ``int`` subclass), ``NaN`` / ``Infinity``
(Python's reader accepts them), and an integer literal beyond the float64 range (``1e400`` reads as ``inf``, but
``1000...0`` with 400 digits as an exact ``int``, on which ``math.isfinite`` raises ``OverflowError``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def is_finite_number(v: Any, *, numpy_scalars: bool = False) -> bool:
    """Whether ``v`` is a number finite in float64: an ``int`` or ``float``, not a ``bool``, not NaN or infinite,
    and (for an ``int``) within the float64 range.

    ``numpy_scalars``: numpy integer and floating scalars (``np.float32``, ``np.int64``; what a Python caller may
    pass, never what JSON reads) count as numbers too. ``np.float64`` is a ``float`` and always counts."""
    kinds = (int, float, np.integer, np.floating) if numpy_scalars else (int, float)
    if isinstance(v, bool) or not isinstance(v, kinds):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond float64
        return False
