"""History comfort (HC) and two-frame extended comfort (EC): NAVSIM's ``pdm_comfort_metrics`` as matrix products.

``spec/epdms.md`` §3.8, §3.9, §7.1 and §11 items 8-10. Both metrics filter per-step signals with Savitzky-Golay
operators (``jaxdrive.rules.savgol``), round each filter output to 8 decimals (``np.round(., 8)``) as NAVSIM does, and
compare against fixed bounds: HC strictly (``lo < x < hi`` at every sample), EC non-strictly (``rms <= threshold``).

Precision. NAVSIM computes in float64 and rounds to 1e-8, a resolution float32 does not have (float32 carries ~7
significant digits, so a 1e-8 rounding is a no-op and filter round-off of ~1e-6 decides near-threshold cases). The
kernels therefore compute in **float64 on the device** by default, inside a scoped ``jax.enable_x64`` block (the rest
of the program stays float32), so the rounding and the strict/non-strict comparisons happen exactly where NAVSIM has
them. The inputs are the float32 proposal states; their representation error (~1e-7 relative) is the only remaining
difference from NAVSIM, so a boolean can differ only if a filtered signal lies within ~1e-5 of a bound. Heading
derivatives are taken of the unwrapped heading relative to its first sample (exact for a derivative, and it keeps
magnitudes small). Pass ``precision="float32"`` on devices without float64 support (TPUs); the result then agrees
except for signals within ~1e-4 of a bound.

Exact ties. Inputs on a decimal grid (``epdms-scene/1`` files store 4 decimals) can tie with a bound exactly: an
interior yaw acceleration is (integer) x 1e-4 / 0.07 rad/s^2, which equals 1.93 in public fixture scene_0039
(proposal ``wrong_way``, sample 40; NAVSIM's strict test fails there). From float32 inputs the same value is
1.9299993 and passes; the fixture's HC is still reproduced because that proposal fails other samples too. A tie is
reproduced only from float64 inputs: with ``jax_enable_x64`` on and float64 states the kernels follow NAVSIM's
float64 arithmetic: signals equal scipy's to 1e-12, except at exact 8-decimal rounding midpoints (frequent for the
window-8 smoothing of 4-decimal data, whose weights have power-of-two denominators), where the summation order picks
the rounding direction: +-1e-8 (tested). Re-rounding float32 inputs to a presumed grid is not done: hand-made files
use other grids, and wrapped history headings leave any grid.

``comfort_v1`` is PDMS v1.1's comfort C (41 states, its own windows). All kernels are written for ONE scene
(K proposals) and are batched with ``jax.vmap``.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxdrive.errors import UserInputError
from jaxdrive.geometry import EGO_REAR_AXLE_TO_CENTER
from jaxdrive.rules.savgol import savgol_matrix
from jaxdrive.scene import DT, StateIndex

# nuPlan comfort bounds (pdm_comfort_metrics.py), strict.
MIN_LON_ACCEL, MAX_LON_ACCEL = -4.05, 2.40  # m/s^2
MAX_ABS_LAT_ACCEL = 4.89  # m/s^2
MAX_ABS_MAG_JERK = 8.37  # m/s^3
MAX_ABS_LON_JERK = 4.13  # m/s^3
MAX_ABS_YAW_ACCEL = 1.93  # rad/s^2
MAX_ABS_YAW_RATE = 0.95  # rad/s
# Extended-comfort RMS thresholds, non-strict.
EC_ACCEL, EC_JERK, EC_YAW_RATE, EC_YAW_ACCEL = 0.7, 0.5, 0.1, 0.1

EC_OVERLAP = 36  # current states[0:36] vs previous states[5:41] (t0 .. t0 + 3.5 s)
EC_SHIFT = 5  # previous plan starts 0.5 s earlier
DECIMALS = 8

HC_CHECKS = ("lon_acceleration", "lat_acceleration", "jerk_magnitude", "lon_jerk", "yaw_acceleration", "yaw_rate")


def _delta(length: int) -> float:
    """NAVSIM's derivative spacing ``mean(diff(arange(T) * 0.1))`` (not exactly 0.1 in float64)."""
    return float(np.diff(np.arange(length) * DT).mean())


class _Filters(NamedTuple):
    smooth: np.ndarray  # S_8: acceleration smoothing
    jerk: np.ndarray  # D_{15,2,1}
    yaw_rate: np.ndarray  # D_{5,2,1}
    yaw_accel: np.ndarray  # D_{5,3,2} (HC) or D_{5,2,2} (EC)


def _filters(length: int, yaw_accel_order: int) -> _Filters:
    d = _delta(length)
    return _Filters(savgol_matrix(length, 8, 2, 0, 1.0), savgol_matrix(length, 15, 2, 1, d),
                    savgol_matrix(length, 5, 2, 1, d), savgol_matrix(length, 5, yaw_accel_order, 2, d))


PRECISIONS = ("float64", "float32")  # comfort_precision: scoped x64 (NAVSIM parity) or float32 (no float64 device)


@contextlib.contextmanager
def _compute_dtype(precision: str):
    if precision == "float64":
        with jax.enable_x64(True):
            yield jnp.float64
    elif precision == "float32":
        yield jnp.float32
    else:
        raise UserInputError(f"comfort precision: expected one of {PRECISIONS}, got {precision!r}")


def _apply(matrix: np.ndarray, x: Float[Array, "*b T"]) -> Float[Array, "*b T"]:
    """``round(matrix @ x, 8)`` along the last axis (one NAVSIM filter call)."""
    m = jnp.asarray(matrix, x.dtype)
    y = jnp.einsum("ij,...j->...i", m, x, precision=jax.lax.Precision.HIGHEST)
    return jnp.round(y, DECIMALS)


def _unwrapped_heading(heading: Float[Array, "*b T"]) -> Float[Array, "*b T"]:
    """NAVSIM ``_phase_unwrap`` (psi_j - 2 pi cumsum(round(diff / 2 pi))), returned relative to the first sample."""
    two_pi = 2.0 * math.pi
    steps = jnp.round(jnp.diff(heading, axis=-1) / two_pi)
    adjust = jnp.concatenate([jnp.zeros_like(heading[..., :1]), jnp.cumsum(steps, axis=-1)], axis=-1)
    unwrapped = heading - two_pi * adjust
    return unwrapped - unwrapped[..., :1]


def _lon_accel(states: Float[Array, "*b T 11"]) -> Float[Array, "*b T"]:
    """NAVSIM's "centre-shifted" longitudinal acceleration as coded: ax + r (omega^2 + alpha)."""
    w = states[..., StateIndex.ANGULAR_VELOCITY]
    return states[..., StateIndex.ACCELERATION_X] + EGO_REAR_AXLE_TO_CENTER * (
        w * w + states[..., StateIndex.ANGULAR_ACCELERATION])


def _accel_magnitude(states: Float[Array, "*b T 11"]) -> Float[Array, "*b T"]:
    return jnp.hypot(states[..., StateIndex.ACCELERATION_X], states[..., StateIndex.ACCELERATION_Y])


def history_comfort_signals(history_padded: Float[Array, "14 11"], states: Float[Array, "K 41 11"], *,
                            precision: str = "float64") -> Float[Array, "K 6 55"]:
    """HC's six filtered, rounded signals per proposal over the 55 samples, in ``HC_CHECKS`` order, in the compute
    dtype (call under ``jax.enable_x64`` to receive float64): lon/lat acceleration (m/s^2), jerk magnitude and lon
    jerk (m/s^3), yaw acceleration (rad/s^2), yaw rate (rad/s).

    Args:
      history_padded: NAVSIM's 14 interpolated history states (-1.5 .. -0.2 s), ``Scene.history_padded``.
      states: proposal rear-axle states at 0 .. 4 s.
      precision: "float64" (default; scoped x64, NAVSIM parity) or "float32".
    """
    k = states.shape[0]
    hist = jnp.broadcast_to(history_padded[None], (k,) + history_padded.shape)
    f = _filters(hist.shape[1] + states.shape[1], yaw_accel_order=3)
    with _compute_dtype(precision) as dtype:
        seq = jnp.concatenate([hist, states], axis=1).astype(dtype)
        heading = _unwrapped_heading(seq[..., StateIndex.HEADING])
        lon = _apply(f.smooth, _lon_accel(seq))
        return jnp.stack([
            lon,
            _apply(f.smooth, seq[..., StateIndex.ACCELERATION_Y]),
            _apply(f.jerk, _apply(f.smooth, _accel_magnitude(seq))),
            _apply(f.jerk, lon),
            _apply(f.yaw_accel, heading),
            _apply(f.yaw_rate, heading),
        ], axis=1)


def _within_bounds(sig: Float[Array, "K 6 T"]) -> Bool[Array, "K 6"]:
    """Strict bound checks of the six signals (``HC_CHECKS`` order) at every sample."""
    lo = jnp.asarray([MIN_LON_ACCEL, -MAX_ABS_LAT_ACCEL, -MAX_ABS_MAG_JERK, -MAX_ABS_LON_JERK, -MAX_ABS_YAW_ACCEL,
                      -MAX_ABS_YAW_RATE], sig.dtype)[:, None]
    hi = jnp.asarray([MAX_LON_ACCEL, MAX_ABS_LAT_ACCEL, MAX_ABS_MAG_JERK, MAX_ABS_LON_JERK, MAX_ABS_YAW_ACCEL,
                      MAX_ABS_YAW_RATE], sig.dtype)[:, None]
    return jnp.all((sig > lo) & (sig < hi), axis=-1)


def history_comfort_checks(history_padded: Float[Array, "14 11"], states: Float[Array, "K 41 11"], *,
                           precision: str = "float64") -> Bool[Array, "K 6"]:
    """The six HC bound checks per proposal, in ``HC_CHECKS`` order (True = strictly within bounds at all 55
    samples). Arguments as ``history_comfort_signals``."""
    with _compute_dtype(precision):
        sig = history_comfort_signals(history_padded, states, precision=precision)
        return _within_bounds(sig)


def history_comfort(history_padded: Float[Array, "14 11"], states: Float[Array, "K 41 11"], *,
                    precision: str = "float64"
                    ) -> tuple[Float[Array, "K"], Bool[Array, "K 6"]]:
    """HC per proposal (1.0 iff all six checks hold) and the six checks (``HC_CHECKS`` order).

    The 14 history states and 41 proposal states are treated as 55 uniformly spaced samples (NAVSIM quirk).
    """
    checks = history_comfort_checks(history_padded, states, precision=precision)
    return jnp.all(checks, axis=-1).astype(jnp.float32), checks


def _ec_features(seq: Float[Array, "*b T 11"], f: _Filters) -> tuple[Float[Array, "*b T"], ...]:
    acc = _apply(f.smooth, _accel_magnitude(seq))
    heading = _unwrapped_heading(seq[..., StateIndex.HEADING])
    return acc, _apply(f.jerk, acc), _apply(f.yaw_rate, heading), _apply(f.yaw_accel, heading)


def extended_comfort_rms(states: Float[Array, "K 41 11"], previous: Float[Array, "K 41 11"], *,
                         precision: str = "float64", shift: int = EC_SHIFT) -> Float[Array, "K 4"]:
    """RMS differences (acceleration m/s^2, jerk m/s^3, yaw rate rad/s, yaw acceleration rad/s^2) between the
    features of ``states[:, 0:36]`` and ``previous[:, 5:41]`` (both t0 .. t0 + 3.5 s), in the compute dtype.

    ``shift`` (static, 1 .. 40): the previous frame's start in 0.1 s steps before this one; NAVSIM's
    ``SceneAggregator`` compares ``states[:, :-shift]`` with ``previous[:, shift:]`` (its
    ``round(Δstart / 0.1)``: 5 for log frames 0.5 s apart)."""
    if not 0 < shift < states.shape[1]:
        raise ValueError(f"extended_comfort_rms: shift: expected 1 .. {states.shape[1] - 1} steps, got {shift}")
    overlap = states.shape[1] - shift
    f = _filters(overlap, yaw_accel_order=2)
    with _compute_dtype(precision) as dtype:
        cur = _ec_features(states[:, :overlap].astype(dtype), f)
        prev = _ec_features(previous[:, shift:].astype(dtype), f)
        rms = jnp.stack([jnp.sqrt(jnp.mean((a - b) ** 2, axis=-1)) for a, b in zip(cur, prev)], axis=-1)
    return rms


def extended_comfort(states: Float[Array, "K 41 11"], previous: Float[Array, "K 41 11"], has_previous: Bool[Array, "K"],
                     *, precision: str = "float64") -> Float[Array, "K"]:
    """EC per proposal: 1.0 iff every RMS difference is <= its threshold (0.7, 0.5, 0.1, 0.1); NaN where
    ``has_previous`` is False (no previous frame: the EC weight is then dropped by ``epdms.aggregate``)."""
    with _compute_dtype(precision):
        rms = extended_comfort_rms(states, previous, precision=precision)
        limits = jnp.asarray([EC_ACCEL, EC_JERK, EC_YAW_RATE, EC_YAW_ACCEL], rms.dtype)
        ok = jnp.all(rms <= limits, axis=-1)
    ec = ok.astype(jnp.float32)
    return jnp.where(has_previous, ec, jnp.nan)


def comfort_v1(states: Float[Array, "K 41 11"], *, precision: str = "float64") -> Float[Array, "K"]:
    """PDMS v1.1 comfort C per proposal ({0, 1}, float32): the same six strict bounds on the 41 simulated states only
    (no history), with v1.1's windows: lon/lat acceleration = rear-axle ax / ay smoothed with window T = 41 (no centre
    shift); jerks = D_{41,2,1} of the window-8 smoothed acceleration; yaw signals as HC (windows 5)."""
    t = states.shape[1]
    d = _delta(t)
    wide = savgol_matrix(t, t, 2, 0, 1.0)
    f = _filters(t, yaw_accel_order=3)
    jerk = savgol_matrix(t, t, 2, 1, d)
    with _compute_dtype(precision) as dtype:
        seq = states.astype(dtype)
        heading = _unwrapped_heading(seq[..., StateIndex.HEADING])
        sig = jnp.stack([
            _apply(wide, seq[..., StateIndex.ACCELERATION_X]),
            _apply(wide, seq[..., StateIndex.ACCELERATION_Y]),
            _apply(jerk, _apply(f.smooth, _accel_magnitude(seq))),
            _apply(jerk, _apply(f.smooth, seq[..., StateIndex.ACCELERATION_X])),
            _apply(f.yaw_accel, heading),
            _apply(f.yaw_rate, heading),
        ], axis=1)
        ok = jnp.all(_within_bounds(sig), axis=-1)
    return ok.astype(jnp.float32)
