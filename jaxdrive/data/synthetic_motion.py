"""Dynamically consistent motion for the synthetic generator (host numpy, float64, row-vectorised).

A motion is a smooth path (a dense polyline, ~0.5 m spacing) plus a longitudinal profile: arc length sigma(t), speed
v(t) and acceleration a(t) from a jerk-limited rollout with piecewise-linear acceleration (so v and sigma are the exact
integrals of a). Positions are the path sampled at sigma(t); heading is the path tangent; the remaining NAVSIM state
fields are derived from them (``states_from_motion``): ``vx = v``, ``vy = 0``, ``ax = a``, ``ay = kappa v^2``,
``steering = atan(wheel_base kappa)``, ``yaw_rate = kappa v``, and steering rate / yaw acceleration as backward
differences over the 0.1 s grid (causal, so every proposal's state at t = 0 is identical to the last history state).

Every function works on R rows at once (proposals, previous plans, the human trajectory, agents).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdrive.constants import EGO_WHEEL_BASE
from jaxdrive.scene import DT, STATE_DIM, StateIndex, wrap_angle

WHEEL_BASE = EGO_WHEEL_BASE  # m, nuPlan Pacifica (jaxdrive.constants)
FRONT_LENGTH = 4.049  # rear axle to front bumper, m
REAR_AXLE_TO_CENTER = 1.461  # m


def smoothstep(x: np.ndarray) -> np.ndarray:
    """Quintic 0 -> 1 ramp on [0, 1] with zero first and second derivative at both ends (C2 lateral offsets)."""
    x = np.minimum(np.maximum(x, 0.0), 1.0)
    return x * x * x * (10.0 + x * (-15.0 + 6.0 * x))


@dataclasses.dataclass
class Paths:
    """R dense polylines with the same sample count U.

    xy: (R, U, 2) m; heading: (R, U) rad, unwrapped along U; kappa: (R, U) 1/m; sigma: (R, U) arc length, m.
    """

    xy: np.ndarray
    heading: np.ndarray
    kappa: np.ndarray
    sigma: np.ndarray

    @property
    def normal(self) -> np.ndarray:
        """(R, U, 2) left unit normals."""
        return np.stack([-np.sin(self.heading), np.cos(self.heading)], axis=-1)


def integrate_curvature(kappa: np.ndarray, ds: float,
                        start: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """A curve of curvature ``kappa`` (U,) sampled every ``ds`` m from pose ``start`` = (x, y, heading).

    Returns xy (U, 2) and heading (U,). Heading integrates kappa by the trapezoid rule, positions use mid-step headings.
    """
    x0, y0, h0 = start
    heading = h0 + np.concatenate([[0.0], np.cumsum(0.5 * (kappa[1:] + kappa[:-1]) * ds)])
    mid = 0.5 * (heading[1:] + heading[:-1])
    # chord of an arc of length ds at curvature k is ds * sinc(k ds / 2) long
    chord = ds * np.sinc(0.5 * (kappa[1:] + kappa[:-1]) * 0.5 * ds / np.pi)
    x = x0 + np.concatenate([[0.0], np.cumsum(chord * np.cos(mid))])
    y = y0 + np.concatenate([[0.0], np.cumsum(chord * np.sin(mid))])
    return np.stack([x, y], axis=-1), heading


def _central(a: np.ndarray) -> np.ndarray:
    """Differences along axis 1 over two samples (one-sided at the ends), not divided by the spacing."""
    out = np.empty_like(a)
    out[:, 1:-1] = a[:, 2:] - a[:, :-2]
    out[:, 0] = 2.0 * (a[:, 1] - a[:, 0])
    out[:, -1] = 2.0 * (a[:, -1] - a[:, -2])
    return out


def polyline_paths(xy: np.ndarray) -> Paths:
    """Paths from dense points (R, U, 2): arc length, tangent heading (central differences), curvature d(heading)/ds."""
    step = np.diff(xy, axis=1)
    seg = np.sqrt(step[..., 0] ** 2 + step[..., 1] ** 2)
    sigma = np.zeros(xy.shape[:2])
    np.cumsum(seg, axis=1, out=sigma[:, 1:])
    d = _central(xy)
    heading = np.arctan2(d[..., 1], d[..., 0])
    jumps = np.diff(heading, axis=1)
    if np.any(np.abs(jumps) > np.pi):
        heading = np.unwrap(heading, axis=1)
    kappa = _central(heading) / np.maximum(_central(sigma), 1e-9)
    return Paths(xy=xy, heading=heading, kappa=kappa, sigma=sigma)


def offset_paths(base: Paths, offsets: np.ndarray) -> Paths:
    """Rows of ``base`` (one row, broadcast) shifted left by ``offsets`` (R, U) m along its normals, re-parametrised."""
    xy = base.xy + offsets[..., None] * base.normal
    return polyline_paths(xy)


def sample_paths(paths: Paths, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Path points at arc lengths ``sigma`` (R, T) (measured from each row's start, clamped to the path):
    x, y, heading (unwrapped), kappa, each (R, T), linearly interpolated."""
    knots = paths.sigma
    r, u = knots.shape
    lo, hi = knots[:, :1], knots[:, -1:]
    span = float(np.max(hi - lo)) + 10.0
    shift = np.arange(r)[:, None] * span - lo
    flat = (knots + shift).ravel()
    q = (np.minimum(np.maximum(sigma, lo), hi) + shift).ravel()
    j = np.clip(np.searchsorted(flat, q, side="right") - 1, 0, flat.shape[0] - 2)
    # keep both knots inside the query's own row
    row_end = (np.arange(r)[:, None] * u + u - 2).repeat(sigma.shape[1], axis=1).ravel()
    j = np.minimum(j, row_end)
    w = np.clip((q - flat[j]) / np.maximum(flat[j + 1] - flat[j], 1e-12), 0.0, 1.0)
    out = []
    for vals in (paths.xy[..., 0], paths.xy[..., 1], paths.heading, paths.kappa):
        v = vals.ravel()
        out.append((v[j] * (1.0 - w) + v[j + 1] * w).reshape(sigma.shape))
    return tuple(out)


def states_from_motion(x, y, heading, kappa, v, a) -> np.ndarray:
    """NAVSIM rear-axle states (R, T, 11) from positions, tangent heading, path curvature, speed, acceleration (R, T).

    Steering rate and yaw acceleration are backward differences (the first step copies the second).
    """
    out = np.zeros(x.shape + (STATE_DIM,), np.float64)
    out[..., StateIndex.X] = x
    out[..., StateIndex.Y] = y
    out[..., StateIndex.HEADING] = wrap_angle(heading)
    out[..., StateIndex.VELOCITY_X] = v
    out[..., StateIndex.ACCELERATION_X] = a
    out[..., StateIndex.ACCELERATION_Y] = kappa * v * v
    steer = np.arctan(WHEEL_BASE * kappa)
    omega = kappa * v
    out[..., StateIndex.STEERING_ANGLE] = steer
    out[..., StateIndex.ANGULAR_VELOCITY] = omega
    for field, sig in ((StateIndex.STEERING_RATE, steer), (StateIndex.ANGULAR_ACCELERATION, omega)):
        d = np.diff(sig, axis=-1) / DT
        out[..., 1:, field] = d
        out[..., 0, field] = d[..., 0]
    return out


@dataclasses.dataclass
class Longitudinal:
    """Per-row parameters of the jerk-limited IDM rollout (all arrays (R,)).

    v_target: desired speed (m/s); a_max: IDM max acceleration (m/s^2); b_comf: IDM comfortable deceleration (m/s^2);
    jerk: |da/dt| limit (m/s^3); a_cmd: scripted acceleration overriding IDM where finite (R,) or NaN;
    t_cmd: time (s) from which ``a_cmd`` applies (IDM before it).
    """

    v_target: np.ndarray
    a_max: np.ndarray
    b_comf: np.ndarray
    jerk: np.ndarray
    a_cmd: np.ndarray
    t_cmd: np.ndarray


IDM_S0 = 2.0  # m, standstill gap
IDM_T = 1.2  # s, time headway
A_MIN = -9.0  # m/s^2, physical floor


def rollout(v0: np.ndarray, a0: np.ndarray, lon: Longitudinal, steps: int,
            obstacle: np.ndarray | None = None, obstacle_v: np.ndarray | None = None):
    """Jerk-limited IDM rollout of R rows over ``steps`` 0.1 s steps; acceleration is linear within a step.

    v0, a0: (R,) speed and acceleration at t = 0. obstacle: (R, steps + 1) arc length (from the row's rear axle at t=0)
    of the nearest thing to stop behind (a lead's rear, a stop line; +inf if none), obstacle_v its speed.
    Returns sigma, v, a, each (R, steps + 1), sigma[:, 0] = 0. Speeds never go negative.
    """
    r = v0.shape[0]
    if obstacle is None:
        obstacle = np.full((r, steps + 1), np.inf)
        obstacle_v = np.zeros((r, steps + 1))
    sig = np.zeros((r, steps + 1))
    vel = np.zeros((r, steps + 1))
    acc = np.zeros((r, steps + 1))
    s, v, a = np.zeros(r), v0.astype(np.float64).copy(), a0.astype(np.float64).copy()
    vel[:, 0], acc[:, 0] = v, a
    inv_2sqrt_ab = 0.5 / np.sqrt(lon.a_max * lon.b_comf)
    inv_vt = 1.0 / np.maximum(lon.v_target, 0.1)
    step = lon.jerk * DT
    gap_obstacle = obstacle - FRONT_LENGTH
    has_cmd = np.isfinite(lon.a_cmd)
    a_cmd = np.where(has_cmd, lon.a_cmd, 0.0)
    for t in range(steps):
        gap = np.maximum(gap_obstacle[:, t] - s, 0.1)
        s_star = IDM_S0 + np.maximum(0.0, v * (IDM_T + (v - obstacle_v[:, t]) * inv_2sqrt_ab))
        a_idm = lon.a_max * (1.0 - (v * inv_vt) ** 4 - (s_star / gap) ** 2)
        a_des = np.where(has_cmd & (t * DT >= lon.t_cmd), a_cmd, a_idm)
        a_des = np.minimum(np.maximum(a_des, A_MIN), lon.a_max)
        a_new = a + np.minimum(np.maximum(a_des - a, -step), step)
        v_new = v + 0.5 * DT * (a + a_new)
        ds = v * DT + DT * DT * (a / 3.0 + a_new / 6.0)
        stop = v_new <= 0.0
        if stop.any():  # stopping inside the step: come to rest with zero acceleration (and stay parked)
            ds[stop] = 0.5 * DT * v[stop]
            v_new[stop] = 0.0
            a_new[stop] = 0.0
        s, v, a = s + ds, v_new, a_new
        sig[:, t + 1], vel[:, t + 1], acc[:, t + 1] = s, v, a
    return sig, vel, acc


def history_profile(v0: float, a0: float, accel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward-integrated past motion: ``accel`` (N,) at t = -(N-1)*0.1 .. 0 with accel[-1] = a0 (forced).

    Returns sigma (N,) (0 at t = 0, negative before), v (N,), a (N,), with piecewise-linear acceleration like
    ``rollout``. Speeds are clipped at 0 (the caller keeps profiles that would need negative speed mild).
    """
    a = accel.astype(np.float64).copy()
    a[-1] = a0
    n = a.shape[0]
    v = np.zeros(n)
    s = np.zeros(n)
    v[-1] = v0
    for i in range(n - 2, -1, -1):
        v[i] = max(v[i + 1] - 0.5 * (a[i] + a[i + 1]) * DT, 0.0)
        s[i] = s[i + 1] - (v[i] * DT + DT * DT * (a[i] / 3.0 + a[i + 1] / 6.0))
    return s, v, a
