"""Slow, obviously-correct references for NC, TTC, HC and EC (test helper, not a test module).

Written straight from ``shared/spec/epdms.md`` §3.1, §3.6, §3.8, §3.9, in float64 numpy on a ``HostScene``:

* comfort: ``scipy.signal.savgol_filter`` called exactly as NAVSIM's ``pdm_comfort_metrics`` calls it;
* NC / TTC: per proposal, per step, per object Python loops with shapely polygons and the literal ignore-set
  algorithm (no closed form). The ego-area flags they need (multiple lanes, non-drivable, rear axle in intersection)
  are recomputed here with ``shapely.contains_xy`` (strict interior, like ``shapely.vectorized.contains``).
"""

from __future__ import annotations

import math

import numpy as np
import shapely
from scipy.signal import savgol_filter
from shapely.geometry import LineString, Polygon

from jaxdrive.scene import AreaKind, HostScene, StateIndex as S

R_AXLE = 1.461
HALF_L, HALF_W = 2.588, 1.1485

# ----------------------------------------------------------------------------------------------------------------------
# Comfort (NAVSIM pdm_comfort_metrics, float64)
# ----------------------------------------------------------------------------------------------------------------------


def _times(n: int) -> np.ndarray:
    return np.arange(n) * 0.1


def _deriv(y, n_time, window, order, deriv):
    dx = np.diff(_times(n_time)).mean()
    return savgol_filter(y, polyorder=order, window_length=min(window, n_time), deriv=deriv, delta=dx, axis=-1)


def _accel(states, kind):
    n_time = states.shape[-2]
    if kind == "x":
        a = states[..., S.ACCELERATION_X] + R_AXLE * (states[..., S.ANGULAR_VELOCITY] ** 2
                                                       + states[..., S.ANGULAR_ACCELERATION])
    elif kind == "y":
        a = states[..., S.ACCELERATION_Y]
    else:
        a = np.hypot(states[..., S.ACCELERATION_X], states[..., S.ACCELERATION_Y])
    return np.round(savgol_filter(a, polyorder=2, window_length=min(8, n_time), axis=-1), 8)


def _jerk(states, kind):
    return np.round(_deriv(_accel(states, kind), states.shape[-2], 15, 2, 1), 8)


def _unwrap(h):
    adj = np.zeros_like(h)
    adj[..., 1:] = np.cumsum(np.round(np.diff(h, axis=-1) / (2 * np.pi)), axis=-1)
    return h - 2 * np.pi * adj


def _yaw(states, deriv, order):
    return np.round(_deriv(_unwrap(states[..., S.HEADING]), states.shape[-2], 5, order, deriv), 8)


def comfort_signals(seq: np.ndarray) -> dict:
    """HC's six filtered signals of a [K, T, 11] float64 sequence."""
    return {"lon_acceleration": _accel(seq, "x"), "lat_acceleration": _accel(seq, "y"),
            "jerk_magnitude": _jerk(seq, "magnitude"), "lon_jerk": _jerk(seq, "x"),
            "yaw_acceleration": _yaw(seq, 2, 3), "yaw_rate": _yaw(seq, 1, 2)}


def history_comfort_ref(history14: np.ndarray, states: np.ndarray) -> np.ndarray:
    """[K, 6] bool HC checks (order lon_acc, lat_acc, jerk, lon_jerk, yaw_acc, yaw_rate), strict bounds."""
    seq = np.concatenate([np.broadcast_to(history14, (states.shape[0],) + history14.shape), states], axis=1)
    sig = comfort_signals(seq)
    within = lambda x, lo, hi: np.all((x > lo) & (x < hi), axis=-1)
    return np.stack([within(sig["lon_acceleration"], -4.05, 2.40), within(sig["lat_acceleration"], -4.89, 4.89),
                     within(sig["jerk_magnitude"], -8.37, 8.37), within(sig["lon_jerk"], -4.13, 4.13),
                     within(sig["yaw_acceleration"], -1.93, 1.93), within(sig["yaw_rate"], -0.95, 0.95)], axis=-1)


def extended_comfort_rms_ref(states: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """[K, 4] RMS differences of (acc, jerk, yaw rate, yaw acc) between states[:, :36] and previous[:, 5:]."""
    def feats(s):
        return [_accel(s, "magnitude"), _jerk(s, "magnitude"), _yaw(s, 1, 2), _yaw(s, 2, 2)]

    a, b = feats(states[:, :36]), feats(previous[:, 5:41])
    return np.stack([np.sqrt(np.mean((x - y) ** 2, axis=-1)) for x, y in zip(a, b)], axis=-1)


def extended_comfort_ref(states: np.ndarray, previous: np.ndarray) -> np.ndarray:
    rms = extended_comfort_rms_ref(states, previous)
    return np.all(rms <= np.array([0.7, 0.5, 0.1, 0.1]), axis=-1).astype(float)
