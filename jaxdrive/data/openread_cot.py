"""OpenREAD chain-of-thought records: ``<think>``/``<answer>`` targets for knowledge QA, trajectory planning and
counterfactual trajectory analysis.

A record is a dict:
  ``id``, ``task`` ("knowledge" | "planning" | "counterfactual"), ``question``, ``think``, ``answer`` (the answer text
  without tags; the reward's ``reference``), ``target`` (``format_cot(think, answer)``), ``images`` (file paths, may be
  empty) and, for planning, ``trajectory`` [6, 2] float (text frame: x forward, y left, metres, 2 Hz over 3 s).

Sources:
  * ``synthetic_records``: from ``jaxdrive.data.synthetic`` scenes (text-only; a one-line scene description stands in
    for the camera images). Planning answers are the logged human future (``planning="logged"``) or, with
    ``planning="constant_speed"``, a future that follows from the prompt by a rule a tiny model can learn: a speed
    drawn from ``RULE_SPEEDS`` (stated as the current velocity), "Go Straight", and the ego driving straight on at that speed (x = v t, y = 0),
    for GRPO demonstrations where the trajectory reward must have room to climb; counterfactual trajectories are the
    scene's other proposals, judged from their generator family (leaves the road, wrong way, harsh manoeuvre) and a
    clearance check against every agent at 0.1 s.
  * ``load_lingoqa``: LingoQA's public parquet layout (``<root>/{action,scenery}/train.parquet``,
    ``<root>/evaluation/val.parquet``; columns ``question_id``, ``segment_id``, ``question``, ``answer`` or
    ``answers``, ``images`` (frame paths relative to the root, inside it); an optional rationale column becomes the
    think part). The evaluation set's rows of one ``question_id`` (one per reference answer) make one record;
    ``split`` keeps training from seeing it.
  * ``load_omnidrive``: OmniDrive-nuScenes' per-sample QA files ``<root>/{vqa,conv}/<split>/<token>.json`` (lists of
    ``{"question", "answer"}``); a question holding a trajectory is counterfactual, a planning question whose answer
    holds 6 points is a planning record (the answer's text before the points is the think part), the rest knowledge.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from jaxdrive.datasets.base import source_path
from jaxdrive.errors import UserInputError
from jaxdrive.eval.cot_format import format_cot
from jaxdrive.eval.trajectory_text import NUM_POINTS, format_trajectory, parse_trajectory
from jaxdrive.scene import AgentType, HostScene, StateIndex

KNOWLEDGE, PLANNING, COUNTERFACTUAL = "knowledge", "planning", "counterfactual"
WAYPOINT_INDICES = np.arange(5, 31, 5)  # 0.5 .. 3.0 s in the 0.1 s state arrays
PLANNING_QUESTION = ("Your navigation command is {command}. Your current velocity is {v:.2f} m/s, and your "
                     "acceleration speed is {a:.2f} m/s^2. Please plan a trajectory for the next three seconds.")
COUNTERFACTUAL_QUESTION = ("If the ego vehicle followed the trajectory {traj} over the next three seconds, would that "
                           "be reasonable? What would happen?")
_LIGHT = {"G": "green", "Y": "yellow", "R": "red"}
_BAD_FAMILIES = {
    "leave_road": "it would leave the drivable area",
    "wrong_way": "it would drive against the direction of traffic",
    "enter_carpark": "it would leave the route into a car park",
    "turn_other": "it would turn off the planned route",
    "accel_hard": "it would accelerate harshly",
    "brake_hard": "it would brake harshly without need",
    "swerve": "it would swerve abruptly",
    "speed_into_lead": "it would close in on the vehicle ahead too fast",
}
EGO_CENTRE_OFFSET = 1.46  # m, rear axle -> box centre (NAVSIM Pacifica)
CONTACT_MARGIN = 0.5  # m added to the half widths in the clearance check (circle approximation of the boxes)
PLANNING_VARIANTS = ("logged", "constant_speed")
RULE_SPEEDS = (2.0, 4.0, 6.0, 8.0)  # m/s, the speeds of the constant-speed planning variant


def record(task: str, question: str, think: str, answer: str, rid: str, **extra) -> dict:
    """One CoT record (see the module docstring)."""
    return dict(id=rid, task=task, question=question, think=think, answer=answer, target=format_cot(think, answer),
                images=list(extra.pop("images", [])), **extra)


# ------------------------------------------------------------------ synthetic scenes -> facts

class _EgoFrame:
    """Global -> ego frame at t = 0 (x forward, y left) of a scene."""

    def __init__(self, scene: HostScene):
        s = scene.history_states[-1]
        self.origin = np.asarray(s[:2], np.float64)
        c, si = math.cos(s[StateIndex.HEADING]), math.sin(s[StateIndex.HEADING])
        self.rot = np.array([[c, si], [-si, c]])

    def points(self, xy: np.ndarray) -> np.ndarray:
        return (np.asarray(xy, np.float64) - self.origin) @ self.rot.T


def _kind(t: AgentType) -> str:
    return {AgentType.VEHICLE: "vehicle", AgentType.PEDESTRIAN: "pedestrian", AgentType.BICYCLE: "cyclist"}.get(
        t, "static object")


def scene_facts(scene: HostScene) -> dict:
    """Host facts of a scene in the ego frame: speed, acceleration, lead object, counts, light, future, action."""
    frame = _EgoFrame(scene)
    now = scene.history_states[-1]
    objs = []
    for a in scene.agents:
        if np.isfinite(a.track[0, :2]).all():
            fx, fy = frame.points(a.track[0, :2])
            objs.append((_kind(a.type), float(fx), float(fy)))
    ahead = [(k, x) for k, x, y in objs if 0 < x < 60 and abs(y) < 2.5]
    lead = min(ahead, key=lambda o: o[1]) if ahead else None
    near = [(k, math.hypot(x, y)) for k, x, y in objs]
    light = None
    for lane in scene.lanes:
        if lane.on_route and lane.id in scene.traffic_lights:
            light = _LIGHT.get(scene.traffic_lights[lane.id][0])
            break
    future = frame.points(scene.human_states[WAYPOINT_INDICES, :2]) if scene.human_states is not None else None
    v0, a0 = float(now[StateIndex.VELOCITY_X]), float(now[StateIndex.ACCELERATION_X])
    facts = dict(v=v0, a=a0, lead=lead, light=light, future=future,
                 vehicles_30m=sum(k == "vehicle" and d < 30 for k, d in near),
                 pedestrians_30m=sum(k == "pedestrian" and d < 30 for k, d in near))
    if future is not None:
        lateral = future[-1, 1]
        facts["command"] = "Turn Left" if lateral > 2 else "Turn Right" if lateral < -2 else "Go Straight"
        v3 = float(scene.human_states[WAYPOINT_INDICES[-1], StateIndex.VELOCITY_X])
        facts["speed_action"] = ("stop" if v3 < 0.5 and v0 > 0.5 else "accelerate" if v3 - v0 > 1.0
                                 else "decelerate" if v3 - v0 < -1.0 else "keep its speed")
    return facts


def describe(f: dict) -> str:
    """One-sentence scene description (stands in for the images in the text-only synthetic set)."""
    parts = [f"the ego vehicle drives at {f['v']:.1f} m/s"]
    parts.append(f"a {f['lead'][0]} is {f['lead'][1]:.1f} m ahead in the ego lane" if f["lead"]
                 else "the ego lane ahead is clear")
    if f["light"]:
        parts.append(f"the traffic light for the ego lane is {f['light']}")
    if f["pedestrians_30m"]:
        parts.append(f"{f['pedestrians_30m']} pedestrian(s) are within 30 m")
    return "Scene: " + "; ".join(parts) + "."


def _reason(f: dict) -> str:
    if f["light"] == "red":
        return "the traffic light ahead is red"
    if f["lead"] and f["lead"][1] < 30:
        return f"a {f['lead'][0]} is {f['lead'][1]:.0f} m ahead"
    if f["pedestrians_30m"]:
        return "pedestrians are nearby"
    return "the road ahead is clear"


def _action(f: dict) -> str:
    turn = {"Turn Left": "turn left", "Turn Right": "turn right", "Go Straight": "go straight"}[f["command"]]
    return f"{turn} and {f['speed_action']}"


def planning_record(scene: HostScene, f: dict, describe_scene: bool = True) -> dict:
    q = PLANNING_QUESTION.format(command=f["command"], v=f["v"], a=f["a"])
    think = f"The ego vehicle should {_action(f)}, because {_reason(f)}."
    traj = np.round(f["future"], 2) + 0.0
    return record(PLANNING, (describe(f) + " " if describe_scene else "") + q, think, format_trajectory(traj),
                  f"{scene.id}/planning", trajectory=traj)


def constant_speed_planning_record(scene: HostScene, f: dict, describe_scene: bool = True, v: float = 4.0) -> dict:
    """The rule-determined planning variant: speed ``v`` (one of ``RULE_SPEEDS``, drawn uniformly per scene by
    ``synthetic_records``), stated in the prompt with command "Go Straight" and zero acceleration; the answer is the straight constant-speed
    future (v t, 0) at t = 0.5 .. 3 s in the text frame."""
    g = dict(f, v=v, a=0.0, command="Go Straight", speed_action="keep its speed")
    g["future"] = np.stack([v * 0.1 * WAYPOINT_INDICES, np.zeros(len(WAYPOINT_INDICES))], -1)
    q = PLANNING_QUESTION.format(command=g["command"], v=v, a=0.0)
    think = f"The ego vehicle should go straight and keep its speed of {v:.0f} m/s."
    traj = np.round(g["future"], 2) + 0.0
    return record(PLANNING, (describe(g) + " " if describe_scene else "") + q, think, format_trajectory(traj),
                  f"{scene.id}/planning", trajectory=traj)


def knowledge_records(scene: HostScene, f: dict, describe_scene: bool = True) -> list[dict]:
    ctx = describe(f) + " " if describe_scene else ""
    out = []
    if f["lead"]:
        k, d = f["lead"]
        out.append(("lead", "What is the closest road user ahead of the ego vehicle?",
                    f"Looking along the ego lane, the nearest object in front is a {k} at about {d:.0f} m.",
                    f"A {k}, about {d:.0f} meters ahead."))
    else:
        out.append(("lead", "What is the closest road user ahead of the ego vehicle?",
                    "Looking along the ego lane, nothing is within 60 m in front.", "There is no road user ahead."))
    n = f["vehicles_30m"]
    out.append(("count", "How many vehicles are within 30 meters of the ego vehicle?",
                f"Counting the vehicles around the ego car gives {n} within 30 m.",
                f"There {'is' if n == 1 else 'are'} {n} vehicle{'' if n == 1 else 's'} within 30 meters."))
    if f.get("command"):
        out.append(("action", "What should the ego vehicle do next?",
                    f"The ego vehicle should {_action(f)}, because {_reason(f)}.", f"It should {_action(f)}."))
    if f["light"]:
        out.append(("light", "What is the state of the traffic light for the ego lane?",
                    f"The signal controlling the ego lane shows {f['light']}.", f"The light is {f['light']}."))
    return [record(KNOWLEDGE, ctx + q, t, a, f"{scene.id}/{name}") for name, q, t, a in out]


def _clearance(scene: HostScene, states: np.ndarray) -> tuple[float, str, float] | None:
    """(distance to contact, kind, time) of the closest agent approach of an ego rollout [41, 11], or None."""
    head = states[:, StateIndex.HEADING]
    centre = states[:, :2] + EGO_CENTRE_OFFSET * np.stack([np.cos(head), np.sin(head)], -1)
    best = None
    for a in scene.agents:
        d = np.linalg.norm(a.track[:, :2] - centre, axis=-1) - (1.0 + a.width / 2 + CONTACT_MARGIN)
        d = np.where(np.isfinite(d), d, np.inf)
        i = int(np.argmin(d))
        if best is None or d[i] < best[0]:
            best = (float(d[i]), _kind(a.type), 0.1 * i)
    return best


def counterfactual_record(scene: HostScene, f: dict, k: int, describe_scene: bool = True) -> dict:
    frame = _EgoFrame(scene)
    states = scene.proposal_states[k]
    traj = np.round(frame.points(states[WAYPOINT_INDICES, :2]), 2) + 0.0
    q = COUNTERFACTUAL_QUESTION.format(traj=format_trajectory(traj))
    family = scene.proposal_families[k]
    close = _clearance(scene, states)
    if close is not None and close[0] < 0:
        think = f"Following it, the ego vehicle would come into contact with a {close[1]} after {close[2]:.1f} s."
        answer = f"No. It would collide with a {close[1]}."
    elif family in _BAD_FAMILIES:
        think = f"The trajectory does not match safe driving here: {_BAD_FAMILIES[family]}."
        answer = f"No. {_BAD_FAMILIES[family][0].upper()}{_BAD_FAMILIES[family][1:]}."
    else:
        think = "The trajectory stays on the road, keeps clear of other road users and changes speed smoothly."
        answer = "Yes. The trajectory is reasonable and safe."
    return record(COUNTERFACTUAL, (describe(f) + " " if describe_scene else "") + q, think, answer,
                  f"{scene.id}/counterfactual/{k}")


def synthetic_records(num_scenes: int, seed: int = 0, tasks=(KNOWLEDGE, PLANNING, COUNTERFACTUAL),
                      describe_scene: bool = True, num_proposals: int = 8, planning: str = "logged") -> list[dict]:
    """CoT records from ``num_scenes`` synthetic scenes (per scene: 1 planning, 2-4 knowledge, 1 counterfactual);
    ``planning``: "logged" (the human future) or "constant_speed" (the rule variant, see the module docstring)."""
    from jaxdrive.data.synthetic import iter_scenes

    if planning not in PLANNING_VARIANTS:
        raise UserInputError(f"planning: expected one of {PLANNING_VARIANTS}, got {planning!r}")
    speeds = np.random.default_rng([seed, 1]).choice(RULE_SPEEDS, num_scenes)

    rng = np.random.default_rng(seed)
    out = []
    for i, scene in enumerate(iter_scenes(num_scenes, seed, num_proposals=num_proposals, validate=False)):
        f = scene_facts(scene)
        if f["future"] is None:
            continue
        if PLANNING in tasks:
            out.append(planning_record(scene, f, describe_scene) if planning == "logged" else
                       constant_speed_planning_record(scene, f, describe_scene, float(speeds[i])))
        if KNOWLEDGE in tasks:
            out += knowledge_records(scene, f, describe_scene)
        if COUNTERFACTUAL in tasks and scene.num_proposals > 1:
            out.append(counterfactual_record(scene, f, int(rng.integers(1, scene.num_proposals)), describe_scene))
    return out


def critic_pairs(records: list[dict], seed: int = 0, negatives: int = 1) -> list[dict]:
    """(question, reference, prediction, match) pairs that teach a small critic to judge knowledge answers: for each
    knowledge record, its own answer (match) and ``negatives`` answers of other records to the same kind of question
    (the id's last part: lead, count, action, light) whose text differs (no match). Records of other tasks are
    skipped."""
    rng = np.random.default_rng(seed)
    by_kind: dict[str, list[str]] = {}
    know = [r for r in records if r["task"] == KNOWLEDGE]
    for r in know:
        by_kind.setdefault(r["id"].rsplit("/", 1)[-1], []).append(r["answer"])
    out = []
    for r in know:
        out.append(dict(question=r["question"], reference=r["answer"], prediction=r["answer"], match=True))
        others = sorted({a for a in by_kind[r["id"].rsplit("/", 1)[-1]] if a != r["answer"]})
        for j in rng.permutation(len(others))[:negatives]:
            out.append(dict(question=r["question"], reference=r["answer"], prediction=others[j], match=False))
    return out


# ------------------------------------------------------------------ public layouts from a local directory

LINGOQA_SPLITS = ("train", "val")


def lingoqa_split(path: Path) -> str:
    """The split of a LingoQA parquet file: "val" under ``evaluation/`` (any case), else "train"."""
    return "val" if path.parent.name.lower() == "evaluation" else "train"


def _lingoqa_answers(row: dict, where: str) -> list[str]:
    """The non-empty answer strings of one parquet row (``answers`` list or ``answer``)."""
    answers = row.get("answers")
    refs = list(answers) if answers is not None else [row.get("answer")]
    if not refs or any(not isinstance(a, str) or not a.strip() for a in refs):
        raise UserInputError(f"{where}: field 'answer'/'answers': expected non-empty text, got {refs!r:.80}")
    return refs


def _lingoqa_images(row: dict, root: Path, where: str) -> list[str]:
    """The row's frame paths joined to ``root``; each must be relative to ``root`` and stay inside it (the rule of
    every dataset converter, ``jaxdrive.datasets.base.source_path``)."""
    where = f"{where} (question_id {row['question_id']!r})"
    return [str(source_path(root, rel, where, "images")) for rel in row.get("images") or []]


def load_lingoqa_file(path: Path, root: Path, rationale_column: str = "rationale") -> list[dict]:
    """The records of one LingoQA parquet file under ``root``; rows sharing a ``question_id`` (the evaluation set has
    one row per reference answer) become one record whose ``references`` are all their answers."""
    import pyarrow.parquet as pq

    cols = set(pq.read_schema(path).names)
    for need in ("question_id", "question", "answer|answers"):
        if not cols & set(need.split("|")):
            raise UserInputError(f"{path}: missing field (column) {need.replace('|', ' or ')!r}")
    groups: dict[str, dict] = {}
    for i, row in enumerate(pq.read_table(path).to_pylist()):
        where, qid, question = f"{path} row {i}", row["question_id"], row["question"]
        if not isinstance(qid, str) or not qid or not isinstance(question, str) or not question.strip():
            raise UserInputError(f"{where}: fields 'question_id' and 'question': expected non-empty text, got "
                             f"{qid!r:.40} and {question!r:.40}")
        refs = _lingoqa_answers(row, where)
        if qid in groups:
            if groups[qid]["question"] != question:
                raise UserInputError(f"{where}: question_id {qid!r} repeats with another question text")
            groups[qid]["references"] += refs
            continue
        images = _lingoqa_images(row, root, where)
        groups[qid] = dict(question=question, think=str(row.get(rationale_column) or ""), references=refs,
                           images=images, segment_id=row.get("segment_id"))
    return [record(KNOWLEDGE, g["question"], g["think"], g["references"][0], f"lingoqa/{path.parent.name}/{qid}",
                   images=g["images"], references=g["references"], segment_id=g["segment_id"])
            for qid, g in groups.items()]


def lingoqa_files(root: Path, split: str | None = None) -> list[Path]:
    """The parquet files under ``root`` (``*/*.parquet``, then ``*.parquet``) of ``split`` (None: all); fails when
    there is none."""
    if split is not None and split not in LINGOQA_SPLITS:
        raise UserInputError(f"LingoQA split: expected one of {LINGOQA_SPLITS} or None, got {split!r}")
    files = sorted(root.glob("*/*.parquet")) + sorted(root.glob("*.parquet"))
    if not files:
        raise UserInputError(f"LingoQA root {root}: no parquet files (expected action/train.parquet, ...)")
    files = [f for f in files if split is None or lingoqa_split(f) == split]
    if not files:
        raise UserInputError(f"LingoQA root {root}: no parquet files of split {split!r}")
    return files


def load_lingoqa(root: str | Path, rationale_column: str = "rationale", split: str | None = None) -> list[dict]:
    """Knowledge records from LingoQA parquet files under ``root`` (see the module docstring): ``split`` "train"
    (``action/``, ``scenery/``, ...), "val" (``evaluation/``) or None (all). A question's first answer is the target,
    all its answers (several rows of one ``question_id`` in the evaluation set) are its ``references``."""
    root = Path(root)
    return [r for path in lingoqa_files(root, split) for r in load_lingoqa_file(path, root, rationale_column)]


def _omnidrive_qa(question: str, answer: str, rid: str) -> dict:
    points = parse_trajectory(answer)
    if points is not None and "plan" in question.lower():
        head = re.split(r"\[\s*PT\s*,|[(\[]", answer, maxsplit=1)[0].strip().rstrip(":").strip()  # [PT, (x, y), ...]
        return record(PLANNING, question, head, format_trajectory(points), rid, trajectory=points)
    if "(" in question and any(c.isdigit() for c in question.split("(", 1)[1][:8]):
        return record(COUNTERFACTUAL, question, "", answer.strip(), rid)
    return record(KNOWLEDGE, question, "", answer.strip(), rid)


def load_omnidrive(root: str | Path, split: str = "train", kinds=("vqa", "conv")) -> list[dict]:
    """Records from OmniDrive's ``<root>/<kind>/<split>/<token>.json`` QA lists (see the module docstring)."""
    root = Path(root)
    out = []
    for kind in kinds:
        for path in sorted((root / kind / split).glob("*.json")):
            try:
                items = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise UserInputError(f"OmniDrive file {path}: invalid JSON ({e})") from None
            if not isinstance(items, list):
                raise UserInputError(f"OmniDrive file {path}: expected a JSON list of {{question, answer}} objects, got "
                                 f"{type(items).__name__}")
            for i, qa in enumerate(items):
                if not isinstance(qa, dict) or "question" not in qa or "answer" not in qa:
                    raise UserInputError(f"OmniDrive file {path}: item {i} is not a {{question, answer}} object")
                out.append(_omnidrive_qa(str(qa["question"]), str(qa["answer"]), f"omnidrive/{kind}/{path.stem}/{i}"))
    if not out:
        raise UserInputError(f"OmniDrive root {root}: no QA files under {[f'{k}/{split}' for k in kinds]}")
    return out


def trajectory_array(rec: dict) -> np.ndarray:
    """The planning record's GT [6, 2] as float32."""
    t = np.asarray(rec["trajectory"], np.float32)
    if t.shape != (NUM_POINTS, 2):
        raise UserInputError(f"record {rec.get('id')}: trajectory must be [6, 2], got {t.shape}")
    return t
