"""Trajectory text I/O in OpenREAD's answer format: ``"(x1, y1), (x2, y2), ..., (x6, y6)"``.

Six waypoints at 2 Hz over 3 s (point k at (k + 1) * 0.5 s), metres, in OpenREAD's *text frame*: the ego frame at
the current sample with x forward and y left (what ``gt_planning[:, :6, :2]`` of OmniDrive holds). The planning
metric's frame (x right, y forward) is ``planning.text_to_lidar`` of it, OpenREAD's own (a, b) -> (-b, a) map.

The public parser (``str_to_numpy``: regex ``[-+]?\\d*\\.\\d+|\\d+`` over the whole string, reshape to (6, 2)) drops the
sign of integers (``"(6.2, -3)"`` -> [6.2, 3]) and reads ``1e-2`` as two numbers. This one reads each parenthesised
(or bracketed) pair with a full float grammar (signs, integers, leading/trailing dots, exponents, a Unicode minus) and
returns None, never raising, when the text does not hold exactly the expected number of finite pairs.
"""
from __future__ import annotations

import re

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.eval.cot_format import extract_answer

NUM_POINTS = 6
STEP_SECONDS = 0.5
DECIMALS = 2

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_PAIR = re.compile(rf"[(\[]\s*({_NUM})\s*,\s*({_NUM})\s*[)\]]")
_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-"})


def format_trajectory(points, decimals: int = DECIMALS) -> str:
    """``"(x1, y1), ..., (xk, yk)"`` of ``points`` [k, 2] (text frame, metres), rounded to ``decimals`` as OpenREAD's
    GT strings are. Negative zero is written as 0."""
    pts = np.asarray(points, np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2:
        raise UserInputError(f"points: expected [k, 2], got shape {pts.shape}")
    if not np.isfinite(pts).all():
        raise UserInputError("points: non-finite coordinates")
    pts = np.round(pts, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return ", ".join(f"({x:.{decimals}f}, {y:.{decimals}f})" for x, y in pts)


def parse_trajectory(text: str | None, num_points: int = NUM_POINTS) -> np.ndarray | None:
    """The [num_points, 2] float64 waypoints written in ``text`` (the ``<answer>`` span if there is one), or None when
    the text does not contain exactly ``num_points`` ``(x, y)`` pairs of finite numbers."""
    if not isinstance(text, str):
        return None
    answer = extract_answer(text)
    body = (text if answer is None else answer).translate(_MINUS)
    pairs = _PAIR.findall(body)
    if len(pairs) != num_points:
        return None
    try:
        pts = np.asarray(pairs, np.float64)
    except (ValueError, OverflowError):
        return None
    return pts if np.isfinite(pts).all() else None
