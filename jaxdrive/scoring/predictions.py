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
5. two-frame extended comfort (EC) as the one-stage script computes it after ``pdm_score``
   (``jaxdrive.scoring.two_frame``), from the agent's previous frame, 0.5 s earlier: given per token in the file
   (``previous_frame_poses``: poses in the ego frame at t - 0.5 s, simulated from the scene's history state there), or
   else the predicted frame of the same log 0.5 s earlier (``infer_start_adjacent_mapping``); EC is NaN without one;
6. ``score`` = ``compute_final_scores``: EPDMS with EC, its weight dropped where EC is NaN.

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
from jaxdrive.scene import NUM_STEPS, STATE_DIM, HostScene, PadSpec, batch_scenes
from jaxdrive.scene.host import MAX_FROM_EGO
from jaxdrive.sim import simulate_trajectories

COLUMNS = {"nc": "no_at_fault_collisions", "dac": "drivable_area_compliance", "ddc": "driving_direction_compliance",
           "tlc": "traffic_light_compliance", "ep": "ego_progress", "ttc": "time_to_collision_within_bound",
           "lk": "lane_keeping", "hc": "history_comfort", "multiplier": "multiplicative_metrics_prod",
           "pdm_score": "pdm_score"}
# run_pdm_score_one_stage.py's table after compute_final_scores, in its order: token, pdm_score's columns (less the
# three it drops), the script's row extras, EC and score. Its CSV keeps token, valid and the score columns.
NAVSIM_COLUMNS = ["token", "no_at_fault_collisions", "drivable_area_compliance", "driving_direction_compliance",
                  "traffic_light_compliance", "ego_progress", "time_to_collision_within_bound", "lane_keeping",
                  "history_comfort", "pdm_score", "valid", "log_name", "frame_type", "start_time", "endpoint_x",
                  "endpoint_y", "start_point_x", "start_point_y", "two_frame_extended_comfort", "score"]
NAVSIM_SCORE_COLUMNS = ["no_at_fault_collisions", "drivable_area_compliance", "driving_direction_compliance",
                        "traffic_light_compliance", "ego_progress", "time_to_collision_within_bound", "lane_keeping",
                        "history_comfort", "two_frame_extended_comfort", "score"]
NAVSIM_CSV_COLUMNS = ["token", "valid", *NAVSIM_SCORE_COLUMNS]
EXTRA_COLUMNS = ["multiplicative_metrics_prod", "raw_progress_m", "previous_frame"]  # jaxdrive's, after NAVSIM's
AVERAGE_TOKEN = "average_all_frames"
DEFAULT_AGENT = "agent"  # the agent of a file that names none
PREVIOUS_KEY = "previous_frame_poses"  # parquet column / npz key suffix of the previous frame's poses
FRAME_TYPES = {0: "ORIGINAL", 1: "SYNTHETIC"}  # SceneFrameType
# the largest |x|, |y| (m: a scene's MAX_FROM_EGO, as poses are in the ego frame) and |heading| (rad: a few turns,
# unwrapped) of a predicted pose; checked in float64 before the float32 scoring, where e.g. 1e39 is an infinity
POSE_BOUNDS = np.array([MAX_FROM_EGO, MAX_FROM_EGO, 100.0])


@dataclasses.dataclass
class AgentPredictions:
    """One agent's output: token -> (8, 3) poses, and token -> (8, 3) previous-frame poses where given."""

    poses: dict[str, np.ndarray]
    previous: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def _read_parquet(path: Path) -> dict[str, tuple[dict, dict]]:
    """agent -> (token -> poses, token -> previous-frame poses) of a parquet file of columns ``token``, ``poses`` and
    optionally ``previous_frame_poses`` (null where not given) and ``agent`` (default ``agent``), one row per agent
    and token."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path).to_pydict()
        if "token" not in table or "poses" not in table:
            raise UserInputError(f"expected columns 'token' and 'poses', got {sorted(table)}")
        n = len(table["token"])
        if None in table["token"]:  # str(None) was the token 'None', silently
            raise UserInputError(f"row {table['token'].index(None)}: token is null, expected a scene token")
        names = [DEFAULT_AGENT if a is None else str(a) for a in table.get("agent", [None] * n)]
        keys = [(a, str(t)) for a, t in zip(names, table["token"])]
        rows = collections.Counter(keys)
        repeated = sorted(k for k, c in rows.items() if c > 1)
        if repeated:  # a dict would keep the last row of each silently
            agent, token = repeated[0]
            whose = f" of agent {agent!r}" if "agent" in table else ""
            raise UserInputError(f"token {token!r}{whose} has {rows[repeated[0]]} rows, expected one per token "
                             f"({len(repeated)} tokens repeated)")
        out: dict[str, tuple[dict, dict]] = {}
        previous = table.get(PREVIOUS_KEY, [None] * n)
        for (agent, token), poses, prev in zip(keys, table["poses"], previous):
            got = out.setdefault(agent, ({}, {}))
            got[0][token] = np.asarray(poses, dtype=np.float64)
            if prev is not None:
                got[1][token] = np.asarray(prev, dtype=np.float64)
        return out
    except (OSError, ValueError) as e:
        raise UserInputError(f"--predictions {path}: {e}") from None


def _read_npz(path: Path) -> dict[str, tuple[dict, dict]]:
    raw = read_npz_arrays(path, "--predictions", "one (8, 3) array per token (np.savez(P, **{token: poses}))")
    out: dict[str, tuple[dict, dict]] = {}
    suffix = "/" + PREVIOUS_KEY
    for key, value in raw.items():
        is_previous = key.endswith(suffix)
        name = key[:-len(suffix)] if is_previous else key
        agent, token = name.split("/", 1) if "/" in name else (DEFAULT_AGENT, name)
        out.setdefault(agent, ({}, {}))[1 if is_previous else 0][token] = value
    return out


def _checked_poses(path: Path, token: str, poses, what: str = "", who: str = "") -> np.ndarray:
    poses = np.asarray(poses)
    if poses.dtype.kind not in "iuf":  # strings (even numeric ones), objects, bools, complex
        raise UserInputError(f"--predictions {path}: {who}token {token!r}: expected numeric (x, y, heading) {what}poses, got "
                         f"an array of {poses.dtype}")
    poses = poses.astype(np.float64)
    if poses.shape == (24,):
        poses = poses.reshape(8, 3)
    if poses.shape != (8, 3):
        raise UserInputError(f"--predictions {path}: {who}token {token!r}: expected 8 finite (x, y, heading) {what}poses, "
                         f"shape (8, 3), got shape {poses.shape}")
    if not np.all(np.isfinite(poses)):
        pose, field = (int(i) for i in np.argwhere(~np.isfinite(poses))[0])
        raise UserInputError(f"--predictions {path}: {who}token {token!r}: expected finite {what}values, got "
                         f"{poses[pose, field]} at pose {pose}, field {field} (x, y, heading)")
    bad = np.abs(poses) > POSE_BOUNDS  # finite in float64 but e.g. 1e39: inf (and NaN scores) in float32, silently
    if bad.any():
        pose, field = (int(i) for i in np.argwhere(bad)[0])
        raise UserInputError(f"--predictions {path}: {who}token {token!r}: {what}pose {pose} "
                             f"{('x', 'y', 'heading')[field]}: expected |value| <= {POSE_BOUNDS[field]:g} "
                             f"({('m', 'm', 'rad')[field]}, ego frame), got {poses[pose, field]:g}")
    return poses


def read_agents(path: str | Path) -> dict[str, AgentPredictions]:
    """agent name -> its poses (and previous-frame poses) of an ``.npz`` (keys ``[AGENT/]TOKEN`` -> (8, 3) and
    ``[AGENT/]TOKEN/previous_frame_poses`` -> (8, 3)) or ``.parquet`` (columns ``token``, ``poses``, optional
    ``previous_frame_poses`` and ``agent``); one agent ``agent`` where none is named. ValueError naming
    ``--predictions``, the file and the token."""
    path = Path(path)
    if path.suffix == ".npz":
        raw = _read_npz(path)
    elif path.suffix == ".parquet":
        raw = _read_parquet(path)
    else:
        raise UserInputError(f"--predictions {path}: expected a .npz or .parquet file")
    agents = {}
    for name, (poses, previous) in raw.items():
        who = "" if name == DEFAULT_AGENT else f"agent {name!r}: "
        out = AgentPredictions({token: _checked_poses(path, token, p, who=who) for token, p in poses.items()})
        for token, p in previous.items():
            if token not in out.poses:
                raise UserInputError(f"--predictions {path}: {who}token {token!r}: {PREVIOUS_KEY} given without the "
                                 f"token's poses")
            out.previous[token] = _checked_poses(path, token, p, "previous-frame ", who=who)
        if out.poses:
            agents[name] = out
    if not agents:
        raise UserInputError(f"--predictions {path}: holds no predictions")
    return agents


def read_predictions(path: str | Path) -> AgentPredictions:
    """The one agent of a predictions file (``read_agents``); ValueError if it holds several."""
    agents = read_agents(path)
    if len(agents) != 1:
        raise UserInputError(f"--predictions {path}: holds {len(agents)} agents ({', '.join(agents)}), expected one")
    return next(iter(agents.values()))


def load_predictions(path: str | Path) -> dict[str, np.ndarray]:
    """token -> float64 (8, 3) poses from ``.npz`` or ``.parquet``; ValueError naming ``--predictions`` and the key."""
    return read_predictions(path).poses


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


class _Profile:
    """Seconds per phase of a ``--predictions`` run, printed to stderr as ``profile PHASE S`` lines when
    ``JAXDRIVE_PREDICTIONS_PROFILE`` is set (``benchmarks/predictions_speed.py --profile``)."""

    def __init__(self):
        import os
        import time

        self.on, self.clock, self.seconds = bool(os.environ.get("JAXDRIVE_PREDICTIONS_PROFILE")), time.perf_counter, {}
        self.last = self.clock()

    def __call__(self, phase: str) -> None:  # the time since the last call goes to ``phase``
        now = self.clock()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.last
        self.last = now

    def report(self) -> None:
        import sys

        for phase, s in self.seconds.items() if self.on else ():
            print(f"profile {phase:<28} {s:8.2f} s", file=sys.stderr)


PROFILE = _Profile()


def _pair_scene(scene: HostScene, agent_states: np.ndarray) -> HostScene:
    reference = np.asarray(scene.extra["reference"]["states"], np.float64)
    states = np.stack([reference, agent_states])
    return dataclasses.replace(log_replay(scene), proposal_states=states, proposal_names=["pdm_closed", "agent"],
                               proposal_families=["", ""], previous_states=None, previous_kinds=None)


@jax.jit
def _score_pairs(scene, proposals):
    return score(scene, proposals, ep_mode="scene", apply_human_filter=True)


def _frame(scene: HostScene) -> tuple[str, int, float | None]:
    """(log_name, frame type, start time in s) of a converted metric cache's scene (None: no time stamp)."""
    gen = scene.generator or {}
    t0 = gen.get("timepoint_us")
    return str(gen.get("log_name", "")), int(gen.get("scene_type", 0) or 0), None if t0 is None else int(t0) / 1e6


def _t0_us(scene: HostScene) -> int:
    t0 = (scene.generator or {}).get("timepoint_us")
    return int(t0) if t0 is not None else 0


def previous_frames(scenes: list[HostScene], predictions: AgentPredictions, current: np.ndarray,
                    notes: list[str] | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The agent's previous frame per scene, for EC: (previous simulated states [N, 41, 11], overlap steps [N] (0:
    none), source per scene: "given", the paired token, or "").

    Given per token (``previous_frame_poses``): simulated from the scene's history state at t - 0.5 s (NAVSIM's ego
    state of that frame: the cache's past trajectory). Otherwise NAVSIM's pairing by log and start time
    (``infer_start_adjacent_mapping``) over the predicted frames: the earlier frame's simulated states. A pair NAVSIM's
    ``SceneAggregator`` would stop on (Δstart not in (0, 0.55) s: e.g. two frames with one start time) and a previous
    frame given for a frame with no earlier log frame (a SYNTHETIC frame) are left out with a note in ``notes``."""
    from jaxdrive.sim import simulate_trajectories
    from jaxdrive.scoring.two_frame import ORIGINAL, adjacent_mapping, overlap_steps

    notes = notes if notes is not None else []
    n = len(scenes)
    previous = np.zeros((n, NUM_STEPS, STATE_DIM))
    shift = np.zeros(n, np.int64)
    source = [""] * n
    frames = [(s.id, *_frame(s)) for s in scenes]
    given = [i for i, s in enumerate(scenes) if s.id in predictions.previous]
    usable = []
    for i in given:
        if frames[i][2] != ORIGINAL:
            notes.append(f"token {scenes[i].id!r}: {PREVIOUS_KEY} given, but its frame is "
                         f"{FRAME_TYPES.get(frames[i][2], frames[i][2])}, with no log frame 0.5 s earlier: EC NaN")
        else:
            usable.append(i)
    if usable:
        egos = np.stack([scenes[i].history_states[-2] for i in usable])  # t - 0.5 s (HISTORY_TIMES)
        t0 = np.array([_t0_us(scenes[i]) - 500_000 for i in usable], np.int64)
        previous[usable] = simulate_trajectories(egos, np.stack([predictions.previous[scenes[i].id] for i in usable]),
                                                 t0_us=t0)
        shift[usable] = 5
        for i in usable:
            source[i] = "given"
    index = {s.id: i for i, s in enumerate(scenes)}
    stalled = []
    for cur, prev in adjacent_mapping(frames).items():
        i, j = index[cur], index[prev]
        if scenes[i].id in predictions.previous:
            continue
        k = overlap_steps(frames[i][3] - frames[j][3])
        if k is None:
            stalled.append((cur, prev, frames[i][3] - frames[j][3]))
            continue
        previous[i], shift[i], source[i] = current[j], k, prev
    if stalled:
        cur, prev, dt = stalled[0]
        notes.append(f"{len(stalled)} frames paired by log and start time (infer_start_adjacent_mapping) start "
                     f"outside (0, 0.55) s after their previous frame, e.g. {cur!r} {dt:+.3f} s after {prev!r} "
                     f"(NAVSIM's SceneAggregator stops on its assert there): not paired, EC NaN")
    return previous, shift, source


def score_predictions(scenes: list[HostScene], predictions, batch_size: int = 16, notes: list[str] | None = None):
    """One row per scene (NAVSIM's columns, ``NAVSIM_COLUMNS`` + ``EXTRA_COLUMNS``), as a pandas DataFrame. Scenes
    need a cached reference. ``predictions``: an ``AgentPredictions`` or token -> poses; ``notes`` collects what is
    said about previous frames."""
    if not isinstance(predictions, AgentPredictions):
        predictions = AgentPredictions(dict(predictions))
    return score_agents(scenes, {DEFAULT_AGENT: predictions}, batch_size, notes).drop(columns="agent")


def score_agents(scenes: list[HostScene], agents: dict[str, AgentPredictions], batch_size: int = 16,
                 notes: list[str] | None = None):
    """``score_predictions`` for several agents at once: every agent's [PDM-Closed, agent] pairs in one stream of
    batches of one shape (one compile), rows grouped by agent (column ``agent``, last) in ``scenes`` order, each
    agent's rows as a run of its own would give them."""
    import pandas as pd

    from jaxdrive.scoring.two_frame import final_scores, two_frame_extended_comfort
    from jaxdrive.sim import simulate_trajectories

    notes = notes if notes is not None else []
    per_agent = {name: [s for s in scenes if s.id in agent.poses] for name, agent in agents.items()}
    for s in {s.id: s for group in per_agent.values() for s in group}.values():
        if "reference" not in s.extra:
            raise UserInputError(f"--scenes: scene {s.id!r} has no PDM-Closed reference (convert metric caches with "
                             "`jaxdrive scenes from-navsim`)")
    order = [(name, s) for name, group in per_agent.items() for s in group]
    PROFILE("before scoring")
    egos = np.stack([s.history_states[-1] for _, s in order])
    t0 = np.array([_t0_us(s) for _, s in order], np.int64)
    states = simulate_trajectories(egos, np.stack([agents[name].poses[s.id] for name, s in order]), t0_us=t0)
    PROFILE("simulate agents")
    pairs = [_pair_scene(s, a) for (_, s), a in zip(order, states)]
    spec = dataclasses.replace(PadSpec.fit(pairs), proposals=2)  # [PDM-Closed, agent]: no padded proposals to score
    PROFILE("pair scenes (log replay)")
    rows = []
    for start in range(0, len(pairs), batch_size):
        part = pairs[start:start + batch_size]
        padded = part + [part[0]] * (batch_size - len(part))
        sc, pr, _ = batch_scenes(padded, spec)
        PROFILE("pad + batch")
        out = jax.device_get(_score_pairs(sc, pr))
        PROFILE("kernel (first: compile)" if start == 0 else "kernel")
        for b, s in enumerate(part):
            row = {"token": s.id}
            row.update({name: float(np.asarray(getattr(out, f))[b, 1]) for f, name in COLUMNS.items()})
            row["raw_progress_m"] = float(out.raw_progress[b, 1])
            rows.append(row)
    tables, at = [], 0
    for name, group in per_agent.items():
        if not group:
            continue
        n = len(group)
        current, ego = states[at:at + n], egos[at:at + n]
        df = pd.DataFrame(rows[at:at + n])
        at += n
        said = []
        previous, shift, source = previous_frames(group, agents[name], current, said)
        notes.extend(said if len(agents) == 1 else [f"agent {name!r}: {note}" for note in said])
        ec = two_frame_extended_comfort(current, previous, shift)
        df["two_frame_extended_comfort"] = ec
        df["score"] = final_scores(df["multiplicative_metrics_prod"].to_numpy(),
                                   df[["ego_progress", "time_to_collision_within_bound", "lane_keeping",
                                       "history_comfort"]].to_numpy(), ec)
        df["previous_frame"] = source
        last = np.stack([agents[name].poses[s.id][-1] for s in group])
        cos, sin = np.cos(ego[:, 2]), np.sin(ego[:, 2])  # nuPlan's relative_to_absolute_poses of the last pose
        frames = [_frame(s) for s in group]
        df["valid"] = True
        df["log_name"] = [f[0] for f in frames]
        df["frame_type"] = [FRAME_TYPES.get(f[1], str(f[1])) for f in frames]
        df["start_time"] = [np.nan if f[2] is None else f[2] for f in frames]
        df["endpoint_x"] = ego[:, 0] + cos * last[:, 0] - sin * last[:, 1]
        df["endpoint_y"] = ego[:, 1] + sin * last[:, 0] + cos * last[:, 1]
        df["start_point_x"], df["start_point_y"] = ego[:, 0], ego[:, 1]
        df["agent"] = name
        tables.append(df[NAVSIM_COLUMNS + EXTRA_COLUMNS + ["agent"]])
    PROFILE("rows, EC, final score")
    return pd.concat(tables, ignore_index=True)


def with_average_row(df):
    """NAVSIM's table: the per-token rows and its aggregate row (token ``average_all_frames``: the mean of every score
    column over the tokens, NaN skipped; ``valid`` = all rows valid)."""
    import pandas as pd

    average = {c: df[c].mean(skipna=True) for c in NAVSIM_SCORE_COLUMNS + ["gated_score"] if c in df}
    average.update(token=AVERAGE_TOKEN, valid=bool(df["valid"].all()))
    return pd.concat([df, pd.DataFrame([average])], ignore_index=True)


def write_navsim_csv(df, path: Path) -> None:
    """The CSV NAVSIM's one-stage script writes (``pdm_score_df.to_csv``): an unnamed index column, then ``token``,
    ``valid`` and the score columns, the aggregate row last. ``df``: rows with the aggregate row."""
    from jaxdrive.atomic import write_text

    write_text(path, df[NAVSIM_CSV_COLUMNS].to_csv())


def summary_table(df) -> str:
    """NAVSIM's summary: the mean of every metric column over the tokens; with several agents (column ``agent``),
    one column per agent, side by side."""
    names = [*COLUMNS.values(), "two_frame_extended_comfort", "score", *(["gated_score"] if "gated_score" in df else [])]
    groups = list(df.groupby("agent", sort=False)) if "agent" in df and df["agent"].nunique() > 1 else [("mean", df)]
    width = max(10, *(len(str(a)) + 2 for a, _ in groups))
    lines = [f"{'metric':<34}" + "".join(f"{str(a):>{width}}" for a, _ in groups), "-" * (34 + width * len(groups))]
    for name in names:
        lines.append(f"{name:<34}" + "".join(f"{g[name].mean():>{width}.4f}" for _, g in groups))
    lines.append("-" * (34 + width * len(groups)))
    for agent, g in groups:
        with_ec = int(g["two_frame_extended_comfort"].notna().sum())
        who = "" if len(groups) == 1 else f"{agent}: "
        lines.append(f"{who}tokens {len(g)} ({with_ec} with a previous frame: EC)   EPDMS (score) "
                     f"{g['score'].mean():.4f}")
    return "\n".join(lines)


def plot_agents(df, path: Path) -> Path:
    """A bar chart of each agent's mean sub-scores, EC and score, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["no_at_fault_collisions", "drivable_area_compliance", "driving_direction_compliance",
             "traffic_light_compliance", "ego_progress", "time_to_collision_within_bound", "lane_keeping",
             "history_comfort", "two_frame_extended_comfort", "score"]
    short = ["NC", "DAC", "DDC", "TLC", "EP", "TTC", "LK", "HC", "EC", "EPDMS"]
    groups = list(df.groupby("agent", sort=False))
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(groups)
    for i, (agent, g) in enumerate(groups):
        ax.bar(np.arange(len(names)) + i * width, [g[n].mean() for n in names], width, label=str(agent))
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, short)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean over tokens")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _agents_of_flags(values) -> dict[str, AgentPredictions]:
    """The agents of every ``--predictions [NAME=]FILE``: a file's agents by their names (``NAME=`` renames the one
    agent of a file); an agent name given twice is refused."""
    values = [values] if isinstance(values, (str, Path)) else list(values)
    agents, where = {}, {}
    for value in values:
        value = str(value)
        name, path = None, value
        if "=" in value and not Path(value).exists():
            name, path = value.split("=", 1)
            if not name:
                raise UserInputError(f"--predictions {value}: expected NAME=FILE or FILE")
        found = read_agents(path)
        if name is not None:
            if len(found) != 1:
                raise UserInputError(f"--predictions {value}: {path} holds {len(found)} agents ({', '.join(found)}); "
                                 f"NAME= renames a file of one agent")
            found = {name: next(iter(found.values()))}
        for agent, got in found.items():
            if agent in agents:
                raise UserInputError(f"--predictions: agent name {agent!r} repeated (in {where[agent]} and {path}): give "
                                 f"each agent its own name (--predictions NAME=FILE, or the file's agent column / "
                                 f"AGENT/TOKEN keys)")
            agents[agent], where[agent] = got, path
    return agents


# gate order (jaxdrive.metrics.GATES) -> the row's column
_GATED = {"nc": "no_at_fault_collisions", "dac": "drivable_area_compliance", "ddc": "driving_direction_compliance",
          "tlc": "traffic_light_compliance", "ep": "ego_progress", "ttc": "time_to_collision_within_bound",
          "lk": "lane_keeping", "hc": "history_comfort", "ec": "two_frame_extended_comfort"}


def gates_per_row(gates, tokens: list[str]) -> np.ndarray:
    """bool [N, 9] gates of ``--gates`` JSON (9 booleans for every token, or token -> 9 booleans / one row of 9: the
    agent is each scene's one proposal), with scene scoring's one-line errors."""
    from jaxdrive.metrics import GATES
    from jaxdrive.scoring.runner import _gate_rows

    out = np.ones((len(tokens), len(GATES)), bool)
    if isinstance(gates, dict):
        for i, token in enumerate(tokens):
            if token not in gates:
                raise UserInputError(f"--gates: no entry for scene {token!r}")
            rows = _gate_rows(gates[token], f"--gates: scene {token!r}")
            if rows.ndim == 2 and rows.shape[0] != 1:
                raise UserInputError(f"--gates: scene {token!r}: expected 1 rows (one per proposal: the agent), got "
                                 f"{rows.shape[0]}")
            out[i] = rows.reshape(-1)
    else:
        rows = _gate_rows(gates, "--gates")
        if rows.ndim != 1:
            raise UserInputError(f"--gates: a global vector is {len(GATES)} booleans; per-proposal gates are given per "
                             f"scene ({{token: [[...]]}})")
        out[:] = rows
    return out


def gated_scores(df, gates: np.ndarray) -> np.ndarray:
    """DriveJudge's Eq. 14 (``rules.epdms.gated_score``) on each row's NAVSIM values: gated-off multipliers count
    1, gated-off weighted metrics leave the average, a NaN EC counts as gated off; all gates on = ``score``."""
    from jaxdrive.metrics import GATES, MULTIPLIERS, WEIGHTS

    g = {m: gates[:, i] for i, m in enumerate(GATES)}
    prod = np.ones(len(df))
    for m in MULTIPLIERS:
        prod *= np.where(g[m], df[_GATED[m]].to_numpy(float), 1.0)
    num, den = np.zeros(len(df)), np.zeros(len(df))
    for m, w in WEIGHTS.items():
        value = df[_GATED[m]].to_numpy(float)
        on = g[m] & ~np.isnan(value) if m == "ec" else g[m]
        num += np.where(on, w * np.nan_to_num(value), 0.0)
        den += np.where(on, w, 0.0)
    return prod * np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)


def judge_gates_of_rows(spec: str, scenes: list[HostScene], agents: dict[str, AgentPredictions], df,
                        progress: bool = True) -> np.ndarray:
    """bool [len(df), 9] gates of ``--gates judge:DIR`` for the rows of ``score_agents``' ``df``: the judge reads each
    row's token's scene as NAVSIM scores it (log replay, [PDM-Closed, agent]) and judges the agent's simulated
    trajectory (``judge.score_gates.judge_gates_of_proposals``)."""
    from jaxdrive.judge.score_gates import judge_gates_of_proposals

    by_id = {s.id: s for s in scenes}
    order = [(a, by_id[t]) for a, t in zip(df["agent"], df["token"])]
    egos = np.stack([s.history_states[-1] for _, s in order])
    t0 = np.array([_t0_us(s) for _, s in order], np.int64)
    states = simulate_trajectories(egos, np.stack([agents[a].poses[s.id] for a, s in order]), t0_us=t0)
    pairs = [_pair_scene(s, x) for (_, s), x in zip(order, states)]
    return judge_gates_of_proposals(spec, pairs, [1] * len(pairs), progress=progress)


def _refuse_other_options(args) -> None:
    """ValueError for the ``jaxdrive score`` options that NAVSIM's evaluation would ignore (it fixes the EP normaliser,
    the gates, the proposals and the human filter, and writes one file: no resume), and for a scene store."""
    from jaxdrive.data.store import is_store

    given = [flag for flag, used in (("--proposals", args.proposals),
                                     ("--reference-progress", args.reference_progress),
                                     (f"--ep-mode {args.ep_mode}", args.ep_mode != "scene"), ("--resume", args.resume))
             if used]
    if given:
        raise UserInputError(f"--predictions: runs NAVSIM's evaluation as it is ([PDM-Closed, agent], EP over the pair, "
                         f"human filter, one output file); {', '.join(given)} would be ignored: leave "
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
    agents = _agents_of_flags(args.predictions)
    predicted = {t for a in agents.values() for t in a.poses}
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
        if scene.id in predicted:
            scenes.append(scene)
        else:
            unpredicted.append(scene.id)
    unknown = sorted(predicted - {s.id for s in scenes})
    if unknown:
        print(f"jaxdrive score: {len(unknown)} predicted tokens have no scene, e.g. {unknown[:3]}", file=sys.stderr)
    if unpredicted and scenes:
        print(f"jaxdrive score: {len(unpredicted)} scenes of --scenes {args.scenes} have no prediction and are not "
              f"scored, e.g. {unpredicted[:3]}", file=sys.stderr)
    if not scenes:
        raise UserInputError(f"--predictions: no token matches a scene of --scenes {args.scenes}")
    gates, judge = None, str(args.gates).startswith("judge:")
    if judge:
        from jaxdrive.judge.score_gates import parse_spec

        parse_spec(str(args.gates))  # a bad judge stops before the scoring
    elif args.gates:
        from jaxdrive.cli import _load_json

        gates = _load_json(args.gates, "--gates")  # the reader of `score --gates FILE` without --predictions
        gates_per_row(gates, sorted({s.id for s in scenes}))  # bad gates stop before the scoring
    notes = []
    PROFILE("read predictions + scenes")
    df = score_agents(scenes, agents, notes=notes)
    out = Path(args.out or "runs/predictions")
    out.mkdir(parents=True, exist_ok=True)
    if judge:
        rows = judge_gates_of_rows(str(args.gates), scenes, agents, df, progress=not args.no_progress)
        df.insert(df.columns.get_loc("agent"), "gated_score", gated_scores(df, rows))
        _write_judge_gates(out, df, rows)
    elif gates is not None:
        df.insert(df.columns.get_loc("agent"), "gated_score", gated_scores(df, gates_per_row(gates, list(df.token))))
    for note in notes:
        print(f"jaxdrive score: {note}", file=sys.stderr)
    import pandas as pd

    tables = [with_average_row(g).assign(agent=a) for a, g in df.groupby("agent", sort=False)]
    table = pd.concat(tables, ignore_index=True)
    if len(agents) == 1:
        table = table.drop(columns="agent")
    table.to_parquet(out / "predictions.parquet", index=False)
    csvs = []
    for agent, t in zip(df["agent"].unique(), tables):
        csvs.append(out / ("predictions.csv" if len(agents) == 1 else f"predictions_{_file_part(agent)}.csv"))
        write_navsim_csv(t, csvs[-1])
    print(summary_table(df))
    if len(agents) > 1:
        print(f"plot: {plot_agents(df, out / 'agents.png')}")
    print(f"results: {out / 'predictions.parquet'} (NAVSIM's CSV: {', '.join(str(c) for c in csvs)})")
    PROFILE("outputs")
    PROFILE.report()
    return 3 if (missing or unknown) else 0


def _write_judge_gates(out: Path, df, rows: np.ndarray) -> list[Path]:
    """The judge's gates as ``--gates FILE`` reads them with ``--predictions`` ({token: [[9 booleans]]}):
    ``out/judge_gates.json``, or ``judge_gates_AGENT.json`` per agent when there are several."""
    import json

    from jaxdrive.atomic import write_text

    names = list(df["agent"].unique())
    paths = []
    for name in names:
        mine = (df["agent"] == name).to_numpy()
        table = {t: [g.tolist()] for t, g in zip(df["token"][mine], rows[mine])}
        paths.append(out / ("judge_gates.json" if len(names) == 1 else f"judge_gates_{_file_part(name)}.json"))
        write_text(paths[-1], json.dumps(table))
    return paths


def _file_part(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "agent"
