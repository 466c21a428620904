"""Candidate ego trajectories of a synthetic scene: a PDM-like family (lateral offsets {-1, 0, +1} m of the route
centre line x IDM target speeds at fractions of the reference speed) plus lane changes, nudges, stops, hard braking,
hard acceleration, swerves, drifts, leaving the road, wrong-way driving, running into the lead, junction turns off the
route, entering a carpark and random smooth manoeuvres. Also the ego history, the human trajectory and the previous
plans (the same proposals planned 0.5 s earlier, for extended comfort).

All motion is built by ``synthetic_motion``: a smooth path (the route, or another route through the junction,
shifted by a C2 lateral offset profile) and a jerk-limited IDM/scripted speed profile, then the states are derived.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdrive.data.synthetic_actors import Actors
from jaxdrive.data.synthetic_motion import (FRONT_LENGTH, Longitudinal, Paths, history_profile, offset_paths, rollout,
                                            sample_paths, smoothstep, states_from_motion)
from jaxdrive.data.synthetic_roads import RoadMap
from jaxdrive.scene import DT as DT_STEP, NUM_STEPS, StateIndex

FAMILIES = ("follow", "stop", "brake_hard", "lane_change", "nudge", "drift", "leave_road", "wrong_way", "swerve",
            "accel_hard", "speed_into_lead", "turn_other", "enter_carpark", "random")
PDM_OFFSETS = (-1.0, 0.0, 1.0)
PDM_FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0)
HISTORY_KINDS = ("cruise", "accel", "decel", "harsh_brake")
_HIST_STEPS = 16  # t = -1.5 .. 0.0 at 0.1 s


@dataclasses.dataclass
class Spec:
    """One candidate: path (``"route"`` or a key of ``RoadMap.others``), lateral offset shape and speed parameters."""

    name: str
    family: str
    v_target: float
    path: str = "route"
    offset: tuple = ()  # ((amplitude, u0, ramp_in, hold, ramp_out), ...): sum of bumps; hold=inf -> step
    a_max: float = 1.5
    b_comf: float = 2.5
    jerk: float = 4.0
    a_cmd: float = math.nan
    t_cmd: float = 0.0
    use_lead: bool = False
    use_stop: bool = False
    use_blocker: bool = False


def offset_profile(u: np.ndarray, shape: tuple) -> np.ndarray:
    """Lateral offset (U,) at route arc lengths ``u`` from a tuple of bumps (amplitude, u0, ramp_in, hold, ramp_out)."""
    d = np.zeros_like(u)
    for amp, u0, r_in, hold, r_out in shape:
        up = smoothstep((u - u0) / r_in)
        down = 0.0 if math.isinf(hold) else smoothstep((u - u0 - r_in - hold) / r_out)
        d = d + amp * (up - down)
    return d


@dataclasses.dataclass
class Motion:
    """The scene's ego context: speed now, reference speed, acceleration now, history kind."""

    v0: float
    a0: float
    v_ref: float
    history: str


def choose_motion(rng: np.random.Generator, road: RoadMap, prof) -> Motion:
    if road.layout == "intersection":
        turning = "route:straight" not in road.tags
        v_ref = rng.uniform(5.0, 8.0) if turning else rng.uniform(8.0, 14.0)
        v0 = v_ref * rng.uniform(0.4, 1.0)
        gap = road.stop_u - FRONT_LENGTH
        if road.route_light[0] in "RY" and gap > 0:
            v0 = min(v0, math.sqrt(2.0 * 2.5 * max(gap - 1.0, 0.5)))
    else:
        v_ref = rng.uniform(8.0, 20.0)
        v0 = v_ref * rng.uniform(0.4, 1.05)
    v0 = max(v0, 1.0)
    kind = str(rng.choice(HISTORY_KINDS, p=prof.history_kinds))
    a0 = {"cruise": rng.uniform(-0.3, 0.3), "accel": rng.uniform(0.5, 1.5),
          "decel": -rng.uniform(0.5, 1.5), "harsh_brake": -rng.uniform(1.5, 3.0)}[kind]
    if kind == "accel":
        a0 = min(a0, 0.5 * (v0 - 0.5) / 1.5)
    return Motion(v0=v0, a0=a0, v_ref=v_ref, history=kind)


def history_accel(rng: np.random.Generator, m: Motion) -> np.ndarray:
    t = np.linspace(-1.5, 0.0, _HIST_STEPS)
    if m.history == "harsh_brake":
        peak = -rng.uniform(4.5, 6.5)
        return m.a0 + (peak - m.a0) * (smoothstep((t + 1.5) / 0.4) - smoothstep((t + 0.6) / 0.5))
    return np.full(_HIST_STEPS, m.a0) + rng.normal(0.0, 0.05) * (t + 1.5)


def candidates(rng: np.random.Generator, road: RoadMap, m: Motion, actors: Actors) -> tuple[list[Spec], list[Spec]]:
    """(PDM-like grid, special manoeuvres) feasible in this scene."""
    v0, v_ref, w = m.v0, m.v_ref, road.lane_width
    ramp = max(10.0, 1.5 * v0)
    pdm = []
    for frac in PDM_FRACTIONS[::-1]:
        for off in PDM_OFFSETS:
            name = "follow_nominal" if (off == 0.0 and frac == 1.0) else f"pdm_{off:+.0f}m_{int(frac * 100)}pct"
            shape = () if off == 0.0 else ((off, 1.0, ramp, math.inf, 1.0),)
            pdm.append(Spec(name, "follow", v_ref * frac, offset=shape, use_lead=True, use_stop=True, use_blocker=True))
    pdm.sort(key=lambda s: s.name != "follow_nominal")
    sp = []
    lc_len = max(15.0, v0 * rng.uniform(2.5, 4.0))
    def ramp_for(amp: float, length: float) -> float:  # long enough that |d''| <= 0.07 1/m
        return max(length, math.sqrt(5.78 * abs(amp) / 0.07))

    def step(amp: float, start: float = 2.0, length: float = lc_len) -> tuple:
        return ((amp, start, ramp_for(amp, length), math.inf, 1.0),)
    sp.append(Spec("stop_comfort", "stop", v_ref, use_lead=True))  # + a virtual obstacle, see ``realise``
    sp.append(Spec("brake_hard", "brake_hard", v_ref, a_cmd=-rng.uniform(6.0, 8.0), jerk=25.0))
    sp.append(Spec("accel_hard", "accel_hard", v_ref * 1.3 + 3.0, a_max=rng.uniform(3.0, 4.0), jerk=8.0))
    for off in road.same_dir:
        side = "left" if off > 0 else "right"
        sp.append(Spec(f"lane_change_{side}_same_dir", "lane_change", v_ref * rng.uniform(0.8, 1.0), offset=step(off)))
    if road.opposite:
        sp.append(Spec("lane_change_left_into_opposite", "lane_change", v_ref * rng.uniform(0.7, 1.0),
                       offset=step(min(road.opposite))))
        sp.append(Spec("wrong_way", "wrong_way", v_ref * rng.uniform(0.6, 0.9),
                       offset=step(road.opposite[int(rng.integers(len(road.opposite)))], 1.0, max(12.0, v0 * 2.0))))
    if not any(o < 0 for o in road.same_dir):
        sp.append(Spec("lane_change_right_off_lane", "lane_change", v_ref * 0.8, offset=step(-w)))
    nudge_u = actors.blocker_u if actors.blocker_u is not None else rng.uniform(12.0, 30.0)
    side = -actors.blocker_side
    amp = rng.uniform(1.2, 2.2)
    nudge_in = ramp_for(amp, max(8.0, v0 * 1.2))
    sp.append(Spec("nudge_left" if side > 0 else "nudge_right", "nudge", v_ref * rng.uniform(0.5, 0.9),
                   offset=((side * amp, max(nudge_u - nudge_in - 4.0, 1.0), nudge_in, 10.0, nudge_in),)))
    edge_side = str(rng.choice(["right", "left"], p=[0.7, 0.3]))
    edge = road.right_edge - rng.uniform(1.5, 3.0) if edge_side == "right" else road.left_edge + rng.uniform(1.5, 3.0)
    sp.append(Spec(f"leave_road_{edge_side}", "leave_road", v_ref * rng.uniform(0.6, 1.0),
                   offset=step(edge, 2.0, max(15.0, v0 * 2.5))))
    sw = rng.uniform(1.5, 2.5) * rng.choice([-1.0, 1.0])
    sw_len = ramp_for(2.0 * sw, max(8.0, v0 * rng.uniform(0.8, 1.2)))  # two bumps share the |d''| budget
    sp.append(Spec("swerve", "swerve", v_ref * rng.uniform(0.7, 1.0),
                   offset=((sw, 3.0, sw_len, 0.0, sw_len), (-sw, 3.0 + 2 * sw_len, sw_len, 0.0, sw_len))))
    drift = rng.uniform(1.0, 1.8) * rng.choice([-1.0, 1.0])
    sp.append(Spec(f"drift_{'left' if drift > 0 else 'right'}", "drift", v_ref * rng.uniform(0.8, 1.0),
                   offset=step(drift, 2.0, v0 * 3.5 + 10.0)))
    if actors.lead is not None:
        sp.append(Spec("speed_into_lead", "speed_into_lead", max(v0, v_ref) * 1.05, a_max=2.0))
    for key in road.others:
        sp.append(Spec(f"{key}_off_route", "turn_other", rng.uniform(4.0, 7.0), path=key))
    if road.layout == "intersection":
        sp.append(Spec("proceed_through_junction", "follow", v_ref, use_lead=True))
        if road.stop_u - FRONT_LENGTH > 1.0:
            sp.append(Spec("stop_at_line", "stop", v_ref, use_stop=True))
    if road.carpark is not None:
        off, u_a, u_b = road.carpark
        length = max(12.0, v0 * 2.0)
        sp.append(Spec("enter_carpark", "enter_carpark", v_ref * 0.5,
                       offset=step(off, max(u_a + 0.3 * (u_b - u_a) - length, 2.0), length)))
    for k in range(2):
        bumps = tuple((rng.uniform(-1.5, 1.5), rng.uniform(2.0, 30.0), rng.uniform(13.0, 25.0), rng.uniform(0, 20),
                       rng.uniform(13.0, 25.0)) for _ in range(2))
        sp.append(Spec("random_smooth" + ("" if k == 0 else f"_{k + 1}"), "random", v_ref * rng.uniform(0.3, 1.1),
                       offset=bumps, a_max=rng.uniform(0.8, 2.5)))
    return pdm, sp


def _feasible(spec: Spec, kappa_max: dict[str, float]) -> bool:
    """Offsets must not fold or kink the path: bounds |kappa| max|d| < 0.5 and max|d''| < 0.1 1/m."""
    if not spec.offset:
        return True
    d_max = sum(abs(b[0]) for b in spec.offset)
    d2_max = sum(5.78 * abs(b[0]) / (b[2] if math.isinf(b[3]) else min(b[2], b[4])) ** 2  # max smoothstep'' 5.77
                 for b in spec.offset)
    return kappa_max[spec.path] * d_max < 0.5 and d2_max < 0.1


def select(rng: np.random.Generator, road: RoadMap, pdm: list[Spec], special: list[Spec], k: int,
           paths: dict[str, Paths]) -> list[Spec]:
    """``follow_nominal`` first, then a share of the PDM grid and the rest specials (each at most once); past the
    ~30 feasible candidates, small perturbations of the chosen ones (or repeats, where a perturbation is not
    feasible) until there are ``k``. The draws for ``k`` up to the candidates are those of before."""
    kappa_max = {key: float(np.max(np.abs(p.kappa[0, road.ego_index:]))) for key, p in paths.items()}
    pdm = [s for s in pdm if _feasible(s, kappa_max)]
    special = [s for s in special if _feasible(s, kappa_max)]
    chosen = [pdm[0]]
    n_pdm = min(len(pdm) - 1, max(int(round(k * rng.uniform(0.2, 0.45))) - 1, 0), k - 1)
    order = rng.permutation(len(special))
    n_sp = min(len(special), k - 1 - n_pdm)
    rest_pdm = [pdm[1 + i] for i in rng.permutation(len(pdm) - 1)]
    chosen += rest_pdm[:n_pdm] + [special[i] for i in order[:n_sp]]
    chosen += rest_pdm[n_pdm:n_pdm + (k - len(chosen))]
    head, tail = chosen[:1], chosen[1:]
    chosen = head + [tail[i] for i in rng.permutation(len(tail))]
    while len(chosen) < k:
        base = chosen[int(rng.integers(len(chosen)))]
        variant = _perturb(rng, base, "small")
        chosen.append(variant if _feasible(variant, kappa_max) else base)
    seen: dict[str, int] = {}
    taken = {s.name for s in chosen}
    for i, s in enumerate(chosen):
        seen[s.name] = seen.get(s.name, 0) + 1
        if seen[s.name] > 1:
            name = f"{s.name}_{seen[s.name]}"
            while name in taken:  # a candidate's own name may end in _2
                seen[s.name] += 1
                name = f"{s.name}_{seen[s.name]}"
            taken.add(name)
            chosen[i] = dataclasses.replace(s, name=name)
    return chosen


def _perturb(rng: np.random.Generator, s: Spec, kind: str) -> Spec:
    lo, hi = (0.94, 1.06) if kind == "small" else (0.6, 1.4)
    off = tuple((a * rng.uniform(lo, hi),) + tuple(rest) for a, *rest in s.offset)
    return dataclasses.replace(s, v_target=s.v_target * rng.uniform(lo, hi), a_max=s.a_max * rng.uniform(lo, hi),
                               a_cmd=s.a_cmd * rng.uniform(lo, hi), offset=off)


@dataclasses.dataclass
class EgoMotion:
    history_states: np.ndarray  # (4, 11)
    states: np.ndarray  # (K, 41, 11)
    previous: np.ndarray  # (K, 41, 11)
    previous_kinds: list[str]
    human: np.ndarray  # (41, 11)


def realise(rng: np.random.Generator, road: RoadMap, m: Motion, actors: Actors, specs: list[Spec],
            paths: dict[str, Paths]) -> EgoMotion:
    """States of the chosen proposals, their previous plans, the human trajectory and the history."""
    kinds = [str(x) for x in rng.choice(["same", "small", "large"], size=len(specs), p=[0.45, 0.35, 0.2])]
    kinds[0] = "same" if kinds[0] == "large" else kinds[0]
    human = Spec("human", "follow", m.v_ref * rng.uniform(0.85, 1.0), use_lead=True, use_stop=True, use_blocker=True,
                 jerk=2.5)
    kappa_max = {key: float(np.max(np.abs(p.kappa[0, road.ego_index:]))) for key, p in paths.items()}
    perturbed = []
    for i, (s, kd) in enumerate(zip(specs, kinds)):
        if kd != "same":
            q = _perturb(rng, s, kd)
            if _feasible(q, kappa_max):
                perturbed.append(q)
            else:
                kinds[i] = "same"
    rows = list(specs) + perturbed + [human]
    n = len(rows)
    steps = NUM_STEPS - 1

    # obstacles for the IDM: lead rear, stop line while red/yellow, blocker
    obstacle = np.full((n, NUM_STEPS), np.inf)
    obstacle_v = np.zeros((n, NUM_STEPS))
    for r, s in enumerate(rows):
        if s.use_lead and actors.lead is not None:
            obstacle[r], obstacle_v[r] = actors.lead.rear_u, actors.lead.v
        if s.use_blocker and actors.blocker_u is not None and not s.offset:
            better = actors.blocker_u - 1.0 < obstacle[r]
            obstacle[r] = np.where(better, actors.blocker_u - 1.0, obstacle[r])
            obstacle_v[r] = np.where(better, 0.0, obstacle_v[r])
        if s.use_stop and road.route_light is not None and road.stop_u - FRONT_LENGTH > 0.5:
            red = np.frombuffer(road.route_light.encode(), np.uint8) != ord("G")
            line = np.where(red, road.stop_u - 0.5, np.inf)
            better = line < obstacle[r]
            obstacle[r] = np.where(better, line, obstacle[r])
            obstacle_v[r] = np.where(better, 0.0, obstacle_v[r])
        if s.family == "stop" and s.name == "stop_comfort":
            target = FRONT_LENGTH + m.v0 ** 2 / (2.0 * 2.0) + 2.0
            obstacle[r] = np.minimum(obstacle[r], target)
            obstacle_v[r] = np.where(obstacle[r] == target, 0.0, obstacle_v[r])
    lon = Longitudinal(
        v_target=np.array([s.v_target for s in rows]), a_max=np.array([s.a_max for s in rows]),
        b_comf=np.array([s.b_comf for s in rows]), jerk=np.array([s.jerk for s in rows]),
        a_cmd=np.array([s.a_cmd for s in rows]), t_cmd=np.array([s.t_cmd for s in rows]))
    sig, vel, acc = rollout(np.full(n, m.v0), np.full(n, m.a0), lon, steps, obstacle, obstacle_v)

    future = np.zeros((n, NUM_STEPS, 11))
    for key in sorted({s.path for s in rows}):
        idx = [r for r, s in enumerate(rows) if s.path == key]
        full = paths[key]
        # only the stretch the rows can reach (offsets are 0 behind the ego, so arc lengths there are unchanged)
        lo = road.ego_index - 2
        reach = full.sigma[0, road.ego_index] + 1.5 * float(np.max(sig[idx])) + 10.0  # offset paths can be shorter
        hi = min(full.sigma.shape[1], int(np.searchsorted(full.sigma[0], reach)) + 4)
        base = Paths(full.xy[:, lo:hi], full.heading[:, lo:hi], full.kappa[:, lo:hi],
                     full.sigma[:, lo:hi] - full.sigma[0, lo])
        u = base.sigma[0] - base.sigma[0, 2]
        offsets = np.stack([offset_profile(u, rows[r].offset) for r in idx])
        p = offset_paths(base, offsets) if np.any(offsets) else Paths(
            np.repeat(base.xy, len(idx), 0), np.repeat(base.heading, len(idx), 0),
            np.repeat(base.kappa, len(idx), 0), np.repeat(base.sigma, len(idx), 0))
        x, y, h, k = sample_paths(p, base.sigma[0, 2] + sig[idx])
        future[idx] = states_from_motion(x, y, h, k, vel[idx], acc[idx])

    hs, hv, ha = history_profile(m.v0, m.a0, history_accel(rng, m))
    route = paths["route"]
    x, y, h, k = sample_paths(route, route.sigma[0, road.ego_index] + hs[None])
    hist = states_from_motion(x, y, h, k, hv[None], ha[None])[0]
    future[:, 0] = hist[-1]  # identical "now" for every row; refresh the backward differences that read it
    for rate, angle in ((StateIndex.STEERING_RATE, StateIndex.STEERING_ANGLE),
                        (StateIndex.ANGULAR_ACCELERATION, StateIndex.ANGULAR_VELOCITY)):
        future[:, 1, rate] = (future[:, 1, angle] - future[:, 0, angle]) / DT_STEP

    k_specs = len(specs)
    states = future[:k_specs]
    previous = np.empty_like(states)
    prev_rows = iter(range(k_specs, n - 1))
    for i, kd in enumerate(kinds):
        src = states[i] if kd == "same" else future[next(prev_rows)]
        previous[i, :5] = hist[-6:-1]
        previous[i, 5:] = src[:NUM_STEPS - 5]
    return EgoMotion(history_states=hist[::5].copy(), states=states, previous=previous, previous_kinds=kinds,
                     human=future[-1])
