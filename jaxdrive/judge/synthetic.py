"""A synthetic DriveJudge set: scenario-generator scenes, trajectories labelled by planted context rules.

The labels depend on the scene context, not on the rule scores alone, so EPDMS cannot reproduce them and a judge
that sees the BEV image can learn them (``planted_label``):

  * leaving the lane to pass a parked car / cones / barrier blocking it (``nudge`` with a blocker): reasonable;
    the same manoeuvre on an empty road, or a ``drift`` out of the lane: not reasonable;
  * braking hard (``brake_hard``) with a pedestrian crossing ahead: reasonable; with nothing ahead (no pedestrian,
    nothing in the ego lane): not;
  * entering the junction against a red light (``proceed_through_junction`` with TLC = 0): not reasonable; the same
    trajectory on green, the nominal lane following and stopping at a red line: reasonable;
  * leaving the road, driving the wrong way, speeding into the lead, swerving: not reasonable; a lane change to a
    same-direction lane: reasonable.

The context is read from what the text description states (``prompt.scene_objects``: objects at t = 0 in the route
frame, the route light; ``scene_context``), so every label is determined by the description, the plan summary and
the rule checks a judge is shown. Other proposals (ambiguous by these rules) are not labelled. Train and test scenes come from disjoint generator seeds
(``TEST_SEED_OFFSET``), so the held-out split's scenes were never seen in training. ``build_dataset`` writes the
directory of ``judge.dataset`` (records, DriveCritic-style pairs of one reasonable and one unreasonable trajectory
of a scene, scenes, BEV images, meta).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import numpy as np
from tqdm import tqdm

from jaxdrive import atomic
from jaxdrive.data.scene_json import write_scene
from jaxdrive.data.synthetic import PROFILES, generate_scene, pad_spec
from jaxdrive.errors import UserInputError
from jaxdrive.judge import prompt as P
from jaxdrive.judge.bev import IMAGE_SIZE, BevConfig, render_bev_batch, save_png
from jaxdrive.judge.dataset import SUBSCORE_KEYS, Pair, Record, read_meta, write_jsonl
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.judge.labels import PAPER_THRESHOLDS, gate_labels, rule_values
from jaxdrive.judge.progress import noting_first_compile
from jaxdrive.scene import HostScene, batch_scenes
from jaxdrive.scorer import BatchScorer

NUM_PROPOSALS = 32  # enough that most special manoeuvres of a scene are generated
TEST_SEED_OFFSET = 1_000_000  # test scene i of a set of seed s: generator seed TEST_SEED_OFFSET + s x SEEDS_PER_SET + i
SEEDS_PER_SET = 10_000  # train scene i: generator seed s x SEEDS_PER_SET + i (below TEST_SEED_OFFSET: ``check_seeds``)
PROFILE = dataclasses.replace(PROFILES["default"], p_blocker=0.75, p_lead=0.4, p_pedestrian=0.5, p_intersection=0.35)
PRIORITY = ("nudge", "brake_hard", "proceed_through_junction", "drift", "follow_nominal")


@dataclasses.dataclass(frozen=True)
class Context:
    """What the planted rules read from a scene, all observable at t = 0 and stated by the text description
    (``prompt.scene_objects``, ``prompt.route_light``): a stopped object occupying part of the ego lane ahead
    (blocker), a pedestrian crossing ahead, a moving vehicle in the ego lane ahead (lead), a red light on the route."""

    blocker: bool
    pedestrian: bool
    lead: bool
    red: bool


def scene_context(scene: HostScene) -> Context:
    """The ``Context`` of a scene from exactly the objects its description lists (not from the generator's roles:
    a pedestrian that appears only later, or a parked car beyond the described range, is no context the judge can
    see)."""
    objs = P.scene_objects(scene)
    return Context(blocker=any(o.in_lane and o.motion == "stopped" and o.kind != "pedestrian" for o in objs),
                   pedestrian=any(o.kind == "pedestrian" and o.motion == "crossing" for o in objs),
                   lead=any(o.in_lane and o.motion == "moving" and o.kind != "pedestrian" for o in objs),
                   red=P.route_light(scene) == "red")


def planted_label(name: str, family: str, ctx: Context, tlc: float) -> tuple[int, str, str] | None:
    """(label, rule, justification) of one proposal under the planted rules, or None (not labelled)."""
    if family == "nudge":
        return ((1, "pass_blocker", "Leaves the lane briefly to pass an object that blocks it.") if ctx.blocker else
                (0, "leave_lane_empty_road", "Leaves its lane on an empty road with nothing to avoid."))
    if family == "drift" and not ctx.blocker:
        return 0, "drift", "Drifts out of its lane for no reason."
    if family == "brake_hard":
        if ctx.pedestrian:
            return 1, "brake_for_pedestrian", "Brakes hard for a pedestrian crossing ahead."
        if not (ctx.lead or ctx.blocker):
            return 0, "brake_for_nothing", "Brakes hard with nothing ahead."
        return None
    if name == "proceed_through_junction":
        return ((0, "red_light_creep", "Moves into the junction against a red light.") if tlc < 1.0 else
                (1, "proceed_on_green", "Proceeds through the junction on green."))
    if name == "follow_nominal" and tlc >= 1.0:
        return 1, "nominal", "Follows its lane at a normal speed."
    if name == "stop_at_line" and ctx.red:
        return 1, "stop_at_red", "Stops at the line for the red light."
    if family in ("leave_road", "wrong_way", "speed_into_lead", "swerve"):
        text = {"leave_road": "Leaves the road.", "wrong_way": "Drives against the traffic direction.",
                "speed_into_lead": "Speeds into the vehicle ahead.", "swerve": "Swerves without a reason."}[family]
        return 0, family, text
    if family == "lane_change" and "same_dir" in name:
        return 1, "lane_change", "Changes to a free lane in its direction."
    return None


def _pick(rng: np.random.Generator, labelled: list[tuple[int, tuple]], scene: HostScene, per_scene: int) -> list:
    """Up to ``per_scene`` labelled proposals, planted-context ones first."""
    def rank(item):
        k = item[0]
        name, fam = scene.proposal_names[k], scene.proposal_families[k]
        hits = [i for i, p in enumerate(PRIORITY) if p in (name, fam)]
        return (hits[0] if hits else len(PRIORITY), rng.random())

    return sorted(labelled, key=rank)[:per_scene]


def _mean_or_none(values: list) -> float | None:
    """The mean of ``values``, or None (JSON null, not the invalid NaN) when there is none."""
    return float(np.mean(values)) if values else None


def check_seeds(seed: int, num_train: int) -> None:
    """A ValueError unless every train scene's generator seed stays below ``TEST_SEED_OFFSET``, where every set's
    test scenes start: otherwise the train scenes of this set would be the test scenes of another (``--seed 100``'s
    train split was ``--seed 0``'s test split), and a judge trained on one set would be evaluated on scenes it saw."""
    if seed < 0:
        raise UserInputError(f"--seed: expected >= 0, got {seed}")
    if seed * SEEDS_PER_SET + num_train > TEST_SEED_OFFSET:
        raise UserInputError(f"--seed {seed} with --train {num_train}: the train scenes' generator seeds (seed x "
                         f"{SEEDS_PER_SET:,} + i) would reach {TEST_SEED_OFFSET:,}, where the test scenes of every set "
                         f"start, so they would be another set's test scenes; use --seed <= "
                         f"{max(0, (TEST_SEED_OFFSET - num_train) // SEEDS_PER_SET)}"
                         + ("" if num_train <= TEST_SEED_OFFSET else f" and --train <= {TEST_SEED_OFFSET:,}"))


GENERATOR = "jaxdrive.judge.synthetic"  # meta.json "generator" of the sets build_dataset writes
EARLIER_SET = ("scenes", "images", "baselines", "judge", "pairs.jsonl", "meta.json")  # removed in this order


def holds_set(out: str | Path) -> bool:
    """Whether ``out`` holds a set ``build_dataset`` wrote (its meta.json names ``GENERATOR``; an unreadable one
    does not)."""
    try:
        return read_meta(out).get("generator") == GENERATOR
    except ValueError:
        return False


def remove_earlier_set(out: Path) -> None:
    """Removes ``out/records.jsonl`` and, when ``out`` holds a set of ``build_dataset`` (``holds_set``), the rest of
    it (``EARLIER_SET``: its scenes and images, the predictions of ``judge baselines`` and ``judge run`` in
    ``baselines/`` and ``judge/``, meta.json last). Before, a rerun kept them: the new set's folder held the old
    scenes' images and the old predictions, which ``jaxdrive eval`` read without a word."""
    (out / "records.jsonl").unlink(missing_ok=True)
    if not holds_set(out):
        return
    for name in EARLIER_SET:
        path = out / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def build_dataset(out: str | Path, num_train: int, num_test: int, *, seed: int = 0, per_scene: int = 4,
                  image_size: int = IMAGE_SIZE, batch_size: int = 8, progress: bool = True) -> dict:
    """Writes the synthetic set to ``out`` (``num_train`` / ``num_test`` scenes); returns the meta dict.
    ``records.jsonl``, which every reader of the set starts from, is removed first and written last (atomically): a
    run interrupted in a directory that held a set leaves no set to read, never the old records over new images.
    An earlier set there is removed first (``remove_earlier_set``), so the directory holds this run's files only."""
    check_seeds(seed, num_train)
    out = Path(out)
    remove_earlier_set(out)
    for sub in ("scenes", "images"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    bev_cfg = BevConfig(size=image_size)
    spec = pad_spec(NUM_PROPOSALS)
    jobs = [("train", seed * SEEDS_PER_SET + i) for i in range(num_train)]
    jobs += [("test", TEST_SEED_OFFSET + seed * SEEDS_PER_SET + i) for i in range(num_test)]
    records, pairs = [], []
    scorer = BatchScorer()
    bar = tqdm(total=len(jobs), desc="judge data", disable=not progress)
    for start in noting_first_compile(bar, range(0, len(jobs), batch_size), "the scorer and the BEV renderer"):
        chunk = jobs[start:start + batch_size]
        scenes = [generate_scene(s, num_proposals=NUM_PROPOSALS, profile=PROFILE) for _, s in chunk]
        sc, pr, _ = batch_scenes(scenes + scenes[:1] * (batch_size - len(scenes)), spec)  # one shape, one compile
        subs = scorer(sc, pr)
        values = np.asarray(rule_values(subs))  # [B, K, 7]
        picks = []
        for b, ((split, _), scene) in enumerate(zip(chunk, scenes)):
            ctx = scene_context(scene)
            labelled = []
            for k in range(scene.num_proposals):
                lab = planted_label(scene.proposal_names[k], scene.proposal_families[k], ctx, float(subs.tlc[b, k]))
                if lab is not None:
                    labelled.append((k, lab))
            chosen = _pick(rng, labelled, scene, per_scene)
            if not chosen:
                continue
            write_scene(scene, out / "scenes" / f"{scene.id}.json")
            scene_records = []
            for k, (label, rule, text) in chosen:
                g = np.asarray(gate_labels(values[b, k], np.array(label), PAPER_THRESHOLDS))
                sub = {m: float(getattr(subs, m)[b, k]) for m in SUBSCORE_KEYS}
                sub = {m: (None if np.isnan(v) else v) for m, v in sub.items()}
                rid = f"{scene.id}_p{k:02d}"
                rec = Record(id=rid, scene=f"scenes/{scene.id}.json", proposal=k,
                             proposal_name=scene.proposal_names[k], label=int(label), split=split,
                             image=f"images/{rid}.png", justification=text, subscores=sub,
                             gates={r: int(x) for r, x in zip(RULE_LABELS, g)},
                             context=dict(dataclasses.asdict(ctx), rule=rule, family=scene.proposal_families[k]))
                scene_records.append(rec)
                picks.append((b, k))
            records += scene_records
            good = [r for r in scene_records if r.label == 1]
            bad = [r for r in scene_records if r.label == 0]
            if good and bad:
                r_good, r_bad = good[int(rng.integers(len(good)))], bad[int(rng.integers(len(bad)))]
                swap = bool(rng.random() < 0.5)
                ra, rb = (r_bad, r_good) if swap else (r_good, r_bad)
                pairs.append(Pair(id=f"{scene.id}_pair", scene=ra.scene, a=ra.proposal, b=rb.proposal,
                                  preferred="b" if swap else "a", split=split, a_record=ra.id, b_record=rb.id,
                                  justification=r_good.justification))
        if picks:
            fill = batch_size * per_scene - len(picks)  # pad to one shape (one compile)
            bs = np.array([b for b, _ in picks] + [picks[0][0]] * fill)
            ks = np.array([k for _, k in picks] + [picks[0][1]] * fill)
            scene_rows = jax.tree.map(lambda x: x[bs], sc)
            images = np.asarray(render_bev_batch(scene_rows, pr.states[bs, ks], bev_cfg))[:len(picks)]
            for img, rec in zip(images, records[len(records) - len(picks):]):
                save_png(img, out / rec.image)
        bar.update(len(chunk))
    bar.close()
    write_jsonl(out / "pairs.jsonl", pairs)
    meta = {"generator": GENERATOR, "seed": seed, "num_train_scenes": num_train,
            "num_test_scenes": num_test, "per_scene": per_scene, "image_size": image_size,
            "thresholds": dict(zip(RULE_LABELS, map(float, PAPER_THRESHOLDS))),
            "records": {s: sum(r.split == s for r in records) for s in ("train", "test")},
            "reasonable_fraction": {s: _mean_or_none([r.label for r in records if r.split == s])
                                    for s in ("train", "test")},
            "pairs": {s: sum(p.split == s for p in pairs) for s in ("train", "test")}}
    atomic.write_text(out / "meta.json", json.dumps(meta, indent=2) + "\n")
    write_jsonl(out / "records.jsonl", records)
    return meta
