"""The judge's prompt and its fixed output format.

Conversation (Hugging Face chat format, rendered by the checkpoint's own chat template through
``jaxdrive.models.chat.ChatEncoder``):

  * system: ``SYSTEM_TEXT``: the task, the colour code of the BEV image and the seven rules (``RULES_TEXT``);
  * user: the BEV image of the scene with the planned trajectory, the ego status (speed, acceleration now) and,
    optionally (``describe=True``, the text ablation), a compact text description of the scene and plan
    (``describe_scene``), which also names the rules the plan breaks (rule score below its tolerance, from the rule
    kernels: the judge decides whether the context excuses them);
  * assistant: an optional one-line reasoning ``Reason: ...``, then one line per rule in ``RULE_LABELS`` order,
    ``LK: yes`` (rule applies: invoke it) or ``LK: no`` (the context excuses breaking it).

``answer_text(gates)`` writes the answer block; ``parse_answer(text)`` reads gates back (missing or malformed lines
are errors naming the rule).
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.judge.bev import COLOR_LEGEND
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.scene import AgentType, HostScene, LaneKind, StateIndex

RULES_TEXT = {
    "LK": "lane keeping: stay inside the lane",
    "NC": "no collision with other road users",
    "DAC": "stay on the drivable area",
    "DDC": "drive in the lane's direction",
    "TTC": "keep a time-to-collision margin",
    "COMFORT": "comfortable acceleration and jerk",
    "EP": "make progress along the route",
}
SYSTEM_TEXT = (
    "You judge the planned trajectory of the ego car in a bird's-eye view (ego heading up; " + COLOR_LEGEND + "). "
    "For each rule answer yes if it applies in this scene, or no if the context makes breaking it reasonable. Rules: "
    + "; ".join(f"{k} {v}" for k, v in RULES_TEXT.items()) + "."
)
# The VLM direct-score baseline (paper Table 3, VLM-DirectScore): the model judges the whole trajectory at once; its
# score is P(yes) at the answer token of ``direct_answer_text``.
DIRECT_SYSTEM_TEXT = (
    "You judge the planned trajectory of the ego car in a bird's-eye view (ego heading up; " + COLOR_LEGEND + "). "
    "Say whether it is reasonable driving in this scene.")
DIRECT_QUESTION = " Is the planned driving reasonable? Answer: Reasonable: yes or no."
_LINE = re.compile(r"^\s*([A-Z]+)\s*:\s*(yes|no)\b", re.IGNORECASE)


def ego_status(scene: HostScene) -> str:
    now = scene.history_states[-1]
    return (f"Ego speed {now[StateIndex.VELOCITY_X]:.1f} m/s, "
            f"acceleration {now[StateIndex.ACCELERATION_X]:.1f} m/s2.")


@dataclasses.dataclass(frozen=True)
class SceneObject:
    """An agent or static object near the route at t = 0, in the route frame: ``ahead`` (m along the route centre
    line from the ego), ``lateral`` (m, + left of the centre line), ``in_lane`` (its footprint overlaps the ego lane),
    ``motion`` ("crossing": a pedestrian walking across the route; "moving"; "stopped")."""

    kind: str
    ahead: float
    lateral: float
    in_lane: bool
    motion: str


def route_frame(scene: HostScene, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points ``xy`` [n, 2] (global) -> (arc length from the ego's own projection [n] (m), signed offset from the
    route centre line [n] (m, + left of the travel direction), route heading at the nearest point [n] (rad)).
    Numpy (host-side descriptions; the scene's centre line has any length)."""
    pts = np.asarray(scene.centerline[:, :2], np.float64)
    a, d = pts[:-1], np.diff(pts, axis=0)
    seg2 = np.maximum((d * d).sum(-1), 1e-12)
    arc = np.concatenate([[0.0], np.cumsum(np.sqrt(seg2))])

    def project(p):  # [n, 2] -> arc [n], lateral [n], heading [n]
        t = np.clip(((p[:, None] - a) * d).sum(-1) / seg2, 0.0, 1.0)  # [n, S]
        foot = a + t[..., None] * d
        i = np.argmin(((p[:, None] - foot) ** 2).sum(-1), axis=-1)
        rel = p - foot[np.arange(len(p)), i]
        cross = d[i, 0] * rel[:, 1] - d[i, 1] * rel[:, 0]
        return (arc[i] + t[np.arange(len(p)), i] * np.sqrt(seg2[i]), np.sign(cross) * np.hypot(*rel.T),
                np.arctan2(d[i, 1], d[i, 0]))

    s, lat, heading = project(np.asarray(xy, np.float64).reshape(-1, 2))
    s0 = project(scene.origin[None])[0][0]
    return s - s0, lat, heading


def scene_objects(scene: HostScene, ahead: float = 45.0, side: float = 8.0, lane_half_width: float = 1.8,
                  pedestrian_side: float = 15.0) -> list[SceneObject]:
    """Objects present at t = 0 between 0 and ``ahead`` m along the route and within ``side`` m of its centre line
    (pedestrians: ``pedestrian_side``, they cross from the kerb of wide roads), in the scene's agent order.
    ``in_lane``: the footprint (half the object's width to each side) overlaps the ego lane by 0.2 m or more."""
    out = []
    for a in scene.agents:
        if np.isnan(a.track[0, 0]):
            continue
        s, lat, heading = (v[0] for v in route_frame(scene, a.track[0, :2][None]))
        kind = AgentType(a.type).name.lower().replace("_", " ")
        if not (0.0 < s < ahead and abs(lat) < (pedestrian_side if kind == "pedestrian" else side)):
            continue
        vx, vy = a.track[0, 3:5]
        lateral_v = -vx * math.sin(heading) + vy * math.cos(heading)
        motion = ("crossing" if kind == "pedestrian" and abs(lateral_v) > 0.3 else
                  "moving" if math.hypot(vx, vy) > 0.3 else "stopped")
        out.append(SceneObject(kind, float(s), float(lat), abs(lat) - 0.5 * a.width < lane_half_width - 0.2, motion))
    return out


def route_light(scene: HostScene) -> str:
    """The light of the route's lane connectors at t = 0: "red", "yellow", "green" or "none" (unknown or no light).
    Where the route's connectors show different lights, the most restrictive one (red, then yellow) is named: a red
    connector anywhere on the route is what the traffic-light rule checks."""
    route_lc = {l.id for l in scene.lanes if l.on_route and l.kind == LaneKind.LANE_CONNECTOR}
    lights = {s[0] for lid, s in scene.traffic_lights.items() if lid in route_lc}
    return next((name for code, name in (("R", "red"), ("Y", "yellow"), ("G", "green")) if code in lights), "none")


def broken_rules(values: np.ndarray, thresholds: np.ndarray) -> list[str]:
    """Rules (``RULE_LABELS`` order) whose score ``values`` [7] is below its tolerance ``thresholds`` [7]."""
    return [r for r, v, t in zip(RULE_LABELS, np.asarray(values), np.asarray(thresholds)) if v < t]


def _side(x: float) -> str:
    return f"{abs(x):.1f} m {'left' if x > 0 else 'right'}"


def describe_scene(scene: HostScene, proposal: int, broken: Sequence[str] | None = None, **objects) -> str:
    """Compact text in the route frame (distances along the route centre line, offsets from it, so a curved road
    reads like a straight one): the objects of ``scene_objects`` (type, metres ahead, "in lane" when they occupy part
    of the ego lane or metres left / right, crossing / moving / stopped; ``objects``: its keyword arguments), the
    route light now, what the agents and the plan do over the horizon (``context.describe_context``: the lead and its
    braking, a stopped object in the lane, a cut-in, a pedestrian coming toward the road, the light changing, the
    stop line; the plan's speeds, accelerations, jerk, offsets over time, weaving, stop, route departure), a summary of the plan (its farthest offsets left and right of the lane centre, where it ends,
    strongest braking, distance) and, when ``broken`` is given, the status of every rule ("Rule checks: LK broken,
    NC ok, ..." in the answer's rule order; ``broken_rules``), last, so each rule's status is at the same token
    distance from its answer slot in every conversation."""
    parts = [f"{o.kind} {o.ahead:.0f} m ahead "
             f"{'in lane' if o.in_lane else f'{abs(o.lateral):.0f} m ' + ('left' if o.lateral > 0 else 'right')} "
             f"{o.motion}" for o in scene_objects(scene, **objects)]
    plan = scene.proposal_states[proposal]
    lat = route_frame(scene, plan[:, :2])[1]
    from jaxdrive.judge.context import describe_context  # context imports this module's route frame

    text = "Objects: " + ("; ".join(parts) if parts else "none") + f". Route light: {route_light(scene)}. "
    text += describe_context(scene, proposal) + " "
    text += (f"Plan: up to {max(0.0, lat.max()):.1f} m left and {max(0.0, -lat.min()):.1f} m right of its lane "
             f"centre, ends {_side(lat[-1]) if abs(lat[-1]) >= 0.05 else 'on it'}, strongest braking "
             f"{min(0.0, plan[:, StateIndex.ACCELERATION_X].min()):.1f} m/s2, "
             f"distance {np.linalg.norm(np.diff(plan[:, :2], axis=0), axis=-1).sum():.0f} m.")
    if broken is not None:  # every rule in answer order: each status sits at a fixed distance from its answer slot
        text += " Rule checks: " + ", ".join(f"{r} {'broken' if r in broken else 'ok'}" for r in RULE_LABELS) + "."
    return text


def messages(scene: HostScene, proposal: int, *, describe: bool = False, answer: str | None = None,
             broken: Sequence[str] | None = None, direct: bool = False) -> list[dict]:
    """The judge conversation for one trajectory (one image placeholder); with ``answer`` the assistant turn too;
    ``broken``: the rules the plan breaks, named in the description (``describe=True``). ``direct``: the VLM
    direct-score baseline's conversation instead (``DIRECT_SYSTEM_TEXT``, answer ``direct_answer_text``)."""
    user = [{"type": "image"}, {"type": "text", "text": ego_status(scene)}]
    if describe:
        user.append({"type": "text", "text": " " + describe_scene(scene, proposal, broken=broken)})
    user.append({"type": "text", "text": DIRECT_QUESTION if direct else
                 " Answer one line per rule: " + ", ".join(RULE_LABELS) + "."})
    conv = [{"role": "system", "content": DIRECT_SYSTEM_TEXT if direct else SYSTEM_TEXT},
            {"role": "user", "content": user}]
    if answer is not None:
        conv.append({"role": "assistant", "content": answer})
    return conv


def answer_text(gates: Sequence[bool | int], reason: str = "") -> str:
    """``Reason: ...`` (if given) then ``LK: yes`` ... ``EP: no``, one line per rule."""
    if len(gates) != len(RULE_LABELS):
        raise UserInputError(f"gates: expected {len(RULE_LABELS)} values ({RULE_LABELS}), got {len(gates)}")
    lines = ([f"Reason: {reason.strip()}"] if reason else []) + [
        f"{r}: {'yes' if g else 'no'}" for r, g in zip(RULE_LABELS, gates)]
    return "\n".join(lines)


def direct_answer_text(reasonable: bool) -> str:
    """The direct-score baseline's answer: ``Reasonable: yes`` or ``Reasonable: no``."""
    return f"Reasonable: {'yes' if reasonable else 'no'}"


def parse_answer(text: str) -> tuple[np.ndarray, str]:
    """(gates bool [7], reason) from an answer; raises ValueError naming a missing rule line."""
    found, reason = {}, ""
    for line in text.splitlines():
        if line.strip().lower().startswith("reason:"):
            reason = line.split(":", 1)[1].strip()
            continue
        m = _LINE.match(line)
        if m and m.group(1).upper() in RULE_LABELS and m.group(1).upper() not in found:
            found[m.group(1).upper()] = m.group(2).lower() == "yes"
    missing = [r for r in RULE_LABELS if r not in found]
    if missing:
        raise UserInputError(f"answer: no 'RULE: yes|no' line for {missing}")
    return np.array([found[r] for r in RULE_LABELS]), reason
