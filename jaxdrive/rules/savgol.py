"""Savitzky-Golay filters as fixed T x T matrices (scipy ``savgol_filter(..., mode='interp')`` semantics).

Every call ``y = savgol_filter(x, w, p, deriv=d, delta=dt, mode='interp')`` along a length-T axis is linear in ``x``, so
it equals ``y = R @ x`` for a fixed matrix ``R`` (``spec/epdms.md`` §7.1). The matrices are derived here in numpy
float64 from the least-squares definition (no scipy at run time) and reproduce scipy's conventions exactly:

* interior rows: the polynomial fitted to a window of ``w`` samples is evaluated (or differentiated) at the window's
  centre ``pos``; for an odd window the centre is sample ``i`` (window ``i-w//2 .. i+w//2``); for an **even** window
  scipy uses ``pos = w/2 - 0.5`` on the window ``i-(w//2-1) .. i+w//2``, i.e. the output at ``i`` is the fit at
  ``i + 0.5`` (a half-sample forward shift; window 8 covers ``i-3 .. i+4``);
* edges (``mode='interp'``): the first and last ``w//2`` outputs come from the polynomial fitted to the first / last
  ``w`` samples, evaluated at their own positions;
* derivatives are scaled by ``d! / dt**d`` (scipy's ``delta``).

The test-suite checks every matrix used by the comfort metrics against scipy on the identity (max |diff| ~1e-13).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from jaxdrive.errors import UserInputError


def _fit_weights(window: int, positions: np.ndarray, order: int, deriv: int, delta: float) -> np.ndarray:
    """Weights mapping ``window`` samples (at 0..window-1) to the ``deriv``-th derivative of their least-squares
    polynomial of degree ``order`` evaluated at ``positions`` (relative to the window start). Shape [len(positions),
    window]."""
    x = np.arange(window, dtype=np.float64)
    centre = 0.5 * (window - 1)  # centre the abscissa for conditioning; results do not depend on it
    design = (x[:, None] - centre) ** np.arange(order + 1)[None, :]  # [window, order+1]
    pinv = np.linalg.pinv(design)  # [order+1, window]: polynomial coefficients from samples
    ks = np.arange(order + 1)
    falling = np.array([math.perm(int(k), deriv) if k >= deriv else 0 for k in ks], np.float64)  # k!/(k-d)!
    powers = np.clip(ks - deriv, 0, None)
    rel = np.asarray(positions, np.float64)[:, None] - centre
    basis = falling[None, :] * rel ** powers[None, :]  # d^d/dx^d of x^k at the positions
    return basis @ pinv / delta**deriv


@functools.lru_cache(maxsize=None)
def savgol_matrix(length: int, window: int, order: int, deriv: int = 0, delta: float = 1.0) -> np.ndarray:
    """The [length, length] float64 matrix ``R`` with ``R @ x == scipy.signal.savgol_filter(x, min(window, length),
    order, deriv=deriv, delta=delta, mode='interp')`` for any signal ``x`` of ``length`` samples.

    Args:
      length: number of samples T.
      window: window length w (clipped to T, as NAVSIM does); must exceed ``order``.
      order: polynomial order p.
      deriv: derivative order d (0 = smoothing).
      delta: sample spacing (s) used to scale derivatives.
    """
    w = min(window, length)
    if not 0 <= order < w:
        raise UserInputError(f"savgol_matrix: expected 0 <= order < window, got order={order}, window={w}")
    if deriv < 0:
        raise UserInputError(f"savgol_matrix: expected deriv >= 0, got {deriv}")
    half = w // 2
    before = (w - 1) // 2  # samples before the output index in the interior window
    pos = half - 0.5 if w % 2 == 0 else float(half)
    out = np.zeros((length, length), np.float64)
    interior = _fit_weights(w, np.array([pos]), order, deriv, delta)[0]
    for i in range(half, length - half):
        out[i, i - before: i - before + w] = interior
    out[:half, :w] = _fit_weights(w, np.arange(half), order, deriv, delta)
    out[length - half:, length - w:] = _fit_weights(w, np.arange(w - half, w), order, deriv, delta)
    out.setflags(write=False)
    return out
