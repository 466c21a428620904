"""Planner evaluation the NAVSIM way: ``jaxdrive score --scenes DIR --predictions P.parquet|npz``.

``P`` maps a scene token to the agent's output, 8 (x, y, heading) poses at 0.5 .. 4.0 s in the ego rear-axle frame at
t = 0 (NAVSIM's ``Trajectory``): an ``.npz`` with one (8, 3) array per token, or a parquet table with columns
``token`` and ``poses`` (8 x 3 nested lists, or 24 numbers). Per token, as ``navsim.evaluate.pdm_score`` with the
one-stage script's defaults (non-reactive log replay, ``spec/epdms.md`` §1):

1. the poses are interpolated and simulated with NAVSIM's LQR tracker + bicycle from the ego state;
2. log replay: objects whose box touches the ego box at t = 0 are removed from every frame;
3. [PDM-Closed, agent] are scored together (EP normalised by the max over the two of raw progress x multipliers), the
   reference being the scene's cached PDM-Closed states (``jaxdrive scenes from-navsim``);
4. NAVSIM's human penalty filter for ORIGINAL scenes with a human trajectory (``pdm_score`` left as NAVSIM returns it,
   computed before the filter);
5. ``score`` = EPDMS with the extended-comfort weight dropped (no previous frame: NAVSIM's ``score`` for a frame
   without an adjacent earlier frame).

The summary is NAVSIM's table: the mean of every column over the tokens, the last row the EPDMS.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import jax
import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.npz_arrays import read_npz_arrays
from jaxdrive.rules.epdms import score
from jaxdrive.scene import HostScene, PadSpec, batch_scenes
from jaxdrive.sim import simulate_trajectories

COLUMNS = {"nc": "no_at_fault_collisions", "dac": "drivable_area_compliance", "ddc": "driving_direction_compliance",
           "tlc": "traffic_light_compliance", "ep": "ego_progress", "ttc": "time_to_collision_within_bound",
           "lk": "lane_keeping", "hc": "history_comfort", "multiplier": "multiplicative_metrics_prod",
           "pdm_score": "pdm_score", "epdms": "score"}


def _read_parquet(path: Path) -> dict[str, np.ndarray]:
    """token -> poses of a parquet file of columns ``token`` and ``poses`` (one row per token)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path).to_pydict()
        if "token" not in table or "poses" not in table:
            raise UserInputError(f"expected columns 'token' and 'poses', got {sorted(table)}")
        rows = collections.Counter(str(t) for t in table["token"])
        repeated = sorted(t for t, n in rows.items() if n > 1)
        if repeated:  # a dict would keep the last row of each silently
            raise UserInputError(f"token {repeated[0]!r} has {rows[repeated[0]]} rows, expected one per token "
                             f"({len(repeated)} tokens repeated)")
        return {str(t): np.asarray(p, dtype=np.float64) for t, p in zip(table["token"], table["poses"])}
    except (OSError, ValueError) as e:
        raise UserInputError(f"--predictions {path}: {e}") from None


def load_predictions(path: str | Path) -> dict[str, np.ndarray]:
    """token -> float64 (8, 3) poses from ``.npz`` or ``.parquet``; ValueError naming ``--predictions`` and the key."""
    path = Path(path)
    if path.suffix == ".npz":
        raw = read_npz_arrays(path, "--predictions", "one (8, 3) array per token (np.savez(P, **{token: poses}))")
    elif path.suffix == ".parquet":
        raw = _read_parquet(path)
    else:
        raise UserInputError(f"--predictions {path}: expected a .npz or .parquet file")
    out = {}
    for token, poses in raw.items():
        poses = np.asarray(poses)
        if poses.dtype.kind not in "iuf":  # strings (even numeric ones), objects, bools, complex
            raise UserInputError(f"--predictions {path}: token {token!r}: expected numeric (x, y, heading) poses, got an "
                             f"array of {poses.dtype}")
        poses = poses.astype(np.float64)
        if poses.shape == (24,):
            poses = poses.reshape(8, 3)
        if poses.shape != (8, 3):
            raise UserInputError(f"--predictions {path}: token {token!r}: expected 8 finite (x, y, heading) poses, shape "
                             f"(8, 3), got shape {poses.shape}")
        if not np.all(np.isfinite(poses)):
            pose, field = (int(i) for i in np.argwhere(~np.isfinite(poses))[0])
            raise UserInputError(f"--predictions {path}: token {token!r}: expected finite values, got "
                             f"{poses[pose, field]} at pose {pose}, field {field} (x, y, heading)")
        out[token] = poses
    if not out:
        raise UserInputError(f"--predictions {path}: holds no predictions")
    return out


def _ego_box(state: np.ndarray):
    from shapely.geometry import Polygon

    from jaxdrive.geometry import ego_corners

    return Polygon(np.asarray(ego_corners(np.asarray(state, np.float32))) + 0.0)


def log_replay(scene: HostScene) -> HostScene:
    """NAVSIM's ``LogReplayTrafficAgents``: drop every object whose box touches the ego box at t = 0."""
    from shapely.geometry import Polygon

    ego = scene.history_states[-1].copy()
    origin = ego[:2].copy()
    ego[:2] = 0.0
    ego_poly = _ego_box(ego)
    keep = []
    for agent in scene.agents:
        row = agent.track[0]
        if not np.any(np.isnan(row)):
            c, s = np.cos(row[2]), np.sin(row[2])
            hl, hw = agent.length / 2, agent.width / 2
            corners = [(hl, hw), (-hl, hw), (-hl, -hw), (hl, -hw)]
            poly = Polygon([(row[0] - origin[0] + c * a - s * b, row[1] - origin[1] + s * a + c * b)
                            for a, b in corners])
            if poly.intersects(ego_poly):
                continue
        keep.append(agent)
    return dataclasses.replace(scene, agents=keep)


def _pair_scene(scene: HostScene, agent_states: np.ndarray) -> HostScene:
    reference = np.asarray(scene.extra["reference"]["states"], np.float64)
    states = np.stack([reference, agent_states])
    return dataclasses.replace(log_replay(scene), proposal_states=states, proposal_names=["pdm_closed", "agent"],
                               proposal_families=["", ""], previous_states=None, previous_kinds=None)


@jax.jit
def _score_pairs(scene, proposals):
    return score(scene, proposals, ep_mode="scene", apply_human_filter=True)


def score_predictions(scenes: list[HostScene], predictions: dict[str, np.ndarray], batch_size: int = 16):
    """One row per scene (NAVSIM's column names + ``token``), as a pandas DataFrame. Scenes need a cached reference."""
    import pandas as pd

    for s in scenes:
        if "reference" not in s.extra:
            raise UserInputError(f"--scenes: scene {s.id!r} has no PDM-Closed reference (convert metric caches with "
                             "`jaxdrive scenes from-navsim`)")
    egos = np.stack([s.history_states[-1] for s in scenes])
    agent_states = simulate_trajectories(egos, np.stack([predictions[s.id] for s in scenes]))
    pairs = [_pair_scene(s, a) for s, a in zip(scenes, agent_states)]
    spec = PadSpec.fit(pairs)
    rows = []
    for start in range(0, len(pairs), batch_size):
        part = pairs[start:start + batch_size]
        padded = part + [part[0]] * (batch_size - len(part))
        sc, pr, _ = batch_scenes(padded, spec)
        out = jax.device_get(_score_pairs(sc, pr))
        for b, s in enumerate(part):
            row = {"token": s.id}
            row.update({name: float(np.asarray(getattr(out, f))[b, 1]) for f, name in COLUMNS.items()})
            row["raw_progress_m"] = float(out.raw_progress[b, 1])
            rows.append(row)
    return pd.DataFrame(rows)


def summary_table(df) -> str:
    """NAVSIM's summary: the mean of every metric column over the tokens."""
    lines = [f"{'metric':<34}{'mean':>10}", "-" * 44]
    for name in COLUMNS.values():
        lines.append(f"{name:<34}{df[name].mean():>10.4f}")
    lines.append("-" * 44)
    lines.append(f"tokens {len(df)}   EPDMS (score, EC dropped) {df['score'].mean():.4f}")
    return "\n".join(lines)


def _refuse_other_options(args) -> None:
    """ValueError for the ``jaxdrive score`` options that NAVSIM's evaluation would ignore (it fixes the EP normaliser,
    the gates, the proposals and the human filter, and writes one file: no resume), and for a scene store."""
    from jaxdrive.data.store import is_store

    given = [flag for flag, used in (("--proposals", args.proposals), ("--gates", args.gates),
                                     ("--reference-progress", args.reference_progress),
                                     (f"--ep-mode {args.ep_mode}", args.ep_mode != "scene"), ("--resume", args.resume))
             if used]
    if given:
        raise UserInputError(f"--predictions: runs NAVSIM's evaluation as it is ([PDM-Closed, agent], EP over the pair, "
                         f"all gates, human filter, one output file); {', '.join(given)} would be ignored: leave "
                         f"{'it' if len(given) == 1 else 'them'} out")
    if is_store(args.scenes):
        raise UserInputError(f"--predictions: reads scene JSON files (`jaxdrive scenes from-navsim CACHE --out DIR`); "
                         f"{args.scenes} is a scene store")


def run_predictions(args) -> int:
    """``jaxdrive score --scenes DIR --predictions P --out OUT``: writes OUT/predictions.parquet, prints the table."""
    import sys

    from jaxdrive.data.scene_json import SceneFileError, read_scene, scene_files

    if not args.scenes:
        raise UserInputError("--predictions: needs --scenes DIR (converted metric caches with a PDM-Closed reference)")
    _refuse_other_options(args)
    predictions = load_predictions(args.predictions)
    scenes, missing, first, unpredicted = [], [], {}, []
    for path in scene_files(args.scenes):
        try:
            scene = read_scene(path)
        except SceneFileError as e:
            print(f"jaxdrive score: unreadable scene {e}", file=sys.stderr)
            missing.append(str(path))
            continue
        if scene.id in first:  # one token in two files: scored once (it counted twice in the summary's means)
            print(f"jaxdrive score: {path}: scene id {scene.id!r} was read already (from {first[scene.id]}): each "
                  f"token is scored once", file=sys.stderr)
            missing.append(str(path))
            continue
        first[scene.id] = path
        if scene.id in predictions:
            scenes.append(scene)
        else:
            unpredicted.append(scene.id)
    unknown = sorted(set(predictions) - {s.id for s in scenes})
    if unknown:
        print(f"jaxdrive score: {len(unknown)} predicted tokens have no scene, e.g. {unknown[:3]}", file=sys.stderr)
    if unpredicted and scenes:
        print(f"jaxdrive score: {len(unpredicted)} scenes of --scenes {args.scenes} have no prediction and are not "
              f"scored, e.g. {unpredicted[:3]}", file=sys.stderr)
    if not scenes:
        raise UserInputError(f"--predictions: no token matches a scene of --scenes {args.scenes}")
    df = score_predictions(scenes, predictions)
    out = Path(args.out or "runs/predictions")
    out.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out / "predictions.parquet", index=False)
    print(summary_table(df))
    print(f"results: {out / 'predictions.parquet'}")
    return 3 if (missing or unknown) else 0
