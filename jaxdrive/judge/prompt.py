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

import math
import re
from typing import Sequence

import numpy as np

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


def _ego_frame(scene: HostScene, xy: np.ndarray) -> np.ndarray:
    now = scene.history_states[-1]
    h = float(now[StateIndex.HEADING])
    d = np.asarray(xy, np.float64) - now[:2]
    return np.stack([d[..., 0] * math.cos(h) + d[..., 1] * math.sin(h),
                     -d[..., 0] * math.sin(h) + d[..., 1] * math.cos(h)], -1)


def broken_rules(values: np.ndarray, thresholds: np.ndarray) -> list[str]:
    """Rules (``RULE_LABELS`` order) whose score ``values`` [7] is below its tolerance ``thresholds`` [7]."""
    return [r for r, v, t in zip(RULE_LABELS, np.asarray(values), np.asarray(thresholds)) if v < t]


def describe_scene(scene: HostScene, proposal: int, ahead: float = 45.0, side: float = 8.0, lane_half_width: float = 1.8,
                   broken: Sequence[str] | None = None) -> str:
    """Compact text: objects near the route ahead (type, metres ahead, "in lane" or metres left/right, crossing /
    moving / stopped), the route light now, a summary of the plan (largest lateral offset, strongest braking,
    distance) and, when ``broken`` is given, the status of every rule ("Rule checks: LK broken, NC ok, ..." in the
    answer's rule order; ``broken_rules``), last, so each rule's status is at the same token distance from its answer
    slot in every conversation."""
    parts = []
    for a in scene.agents:
        if np.isnan(a.track[0, 0]):
            continue
        fwd, left = _ego_frame(scene, a.track[0, :2])
        if not (0.0 < fwd < ahead and abs(left) < side):
            continue
        kind = AgentType(a.type).name.lower().replace("_", " ")
        moving = np.hypot(*a.track[0, 3:5]) > 0.3
        lateral_v = _ego_frame(scene, a.track[0, :2] + a.track[0, 3:5])[1] - left
        what = "crossing" if kind == "pedestrian" and abs(lateral_v) > 0.3 else ("moving" if moving else "stopped")
        where = "in lane" if abs(left) < lane_half_width else f"{abs(left):.0f} m {'left' if left > 0 else 'right'}"
        parts.append(f"{kind} {fwd:.0f} m ahead {where} {what}")
    route_lc = {l.id for l in scene.lanes if l.on_route and l.kind == LaneKind.LANE_CONNECTOR}
    lights = {s[0] for lid, s in scene.traffic_lights.items() if lid in route_lc}
    light = {"R": "red", "Y": "yellow", "G": "green"}.get(next(iter(sorted(lights))), "none") if lights else "none"
    plan = scene.proposal_states[proposal]
    lateral = _ego_frame(scene, plan[:, :2])[:, 1]
    text = "Objects: " + ("; ".join(parts) if parts else "none") + f". Route light: {light}. "
    text += (f"Plan: lateral offset up to {np.abs(lateral).max():.1f} m, strongest braking "
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
        raise ValueError(f"gates: expected {len(RULE_LABELS)} values ({RULE_LABELS}), got {len(gates)}")
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
        raise ValueError(f"answer: no 'RULE: yes|no' line for {missing}")
    return np.array([found[r] for r in RULE_LABELS]), reason
