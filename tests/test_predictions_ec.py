"""Two-frame extended comfort (EC) and NAVSIM's final ``score`` in ``jaxdrive score --predictions``: the previous
frame given per token (``previous_frame_poses``) and paired by log and start time (``infer_start_adjacent_mapping``),
against NAVSIM's own one-stage results (``fixtures/navsim_official``)."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from jaxdrive.data.navsim_cache import find_caches, read_cache_scene
from jaxdrive.scoring.predictions import AgentPredictions, score_predictions
from jaxdrive.scoring.two_frame import adjacent_mapping, final_scores
from conftest import SHARED

OFFICIAL = SHARED / "fixtures" / "navsim_official"
CACHE_DIR = SHARED / "fixtures" / "navsim_cache"
EXACT = ["no_at_fault_collisions", "drivable_area_compliance", "driving_direction_compliance",
         "traffic_light_compliance", "time_to_collision_within_bound", "lane_keeping", "history_comfort",
         "multiplicative_metrics_prod"]


@pytest.fixture(scope="module")
def scenes():
    return {token: read_cache_scene(path) for token, path in find_caches(CACHE_DIR)}


@pytest.fixture(scope="module")
def official():
    return {f.stem: json.loads(f.read_text()) for f in sorted(OFFICIAL.glob("*.json"))}


def agent_predictions(official, index):
    """The fixture's agent ``index`` of every scene that has one: poses and previous-frame poses; expected rows."""
    agent, want = AgentPredictions({}), {}
    for token, o in official.items():
        if index < len(o["agents"]):
            a = o["agents"][index]
            agent.poses[token] = np.asarray(a["poses"])
            if a["previous_frame_poses"] is not None:
                agent.previous[token] = np.asarray(a["previous_frame_poses"])
            want[token] = a["navsim_result"]
    return agent, want


@pytest.mark.slow
def test_ec_and_score_match_navsim_official_for_every_public_agent(scenes, official):
    """All 148 agent trajectories: EC (NaN without a previous frame) exactly, NAVSIM's final ``score`` (EC in, or its
    weight dropped) and every sub-score. Before: no EC column, ``score`` was the EC-dropped EPDMS for every token."""
    failures, checked, ec_values = [], 0, []
    for index in range(3):
        agent, want = agent_predictions(official, index)
        df = score_predictions([scenes[t] for t in agent.poses], agent)
        assert sorted(df.token) == sorted(want)
        for _, row in df.iterrows():
            w = want[row.token]
            ec = w["two_frame_extended_comfort"]
            got = row["two_frame_extended_comfort"]
            if (ec is None) != bool(np.isnan(got)) or (ec is not None and got != ec):
                failures.append(f"agent {index} {row.token} EC: {got} vs NAVSIM {ec}")
            ec_values.append(got)
            for col in EXACT:
                if row[col] != w[col]:
                    failures.append(f"agent {index} {row.token} {col}: {row[col]} vs NAVSIM {w[col]}")
            for col in ("ego_progress", "pdm_score", "score"):
                if abs(row[col] - w[col]) > 1e-4:
                    failures.append(f"agent {index} {row.token} {col}: {row[col]} vs NAVSIM {w[col]}")
            checked += 1
    assert not failures, "\n".join(failures)
    assert checked == 148
    ec_values = np.asarray(ec_values)
    assert (ec_values == 0).sum() == 61 and (ec_values == 1).sum() == 59 and np.isnan(ec_values).sum() == 28


def _previous_frame_scene(scene, poses_token):
    """The log frame 0.5 s before ``scene``: its ego state is the scene's history state at -0.5 s (what the fixture's
    previous frame starts from); only its simulated agent states matter to the current frame's EC."""
    hist = scene.history_states
    gen = dict(scene.generator, timepoint_us=scene.generator["timepoint_us"] - 500_000)
    return dataclasses.replace(scene, id=poses_token, history_states=np.concatenate([hist[:1], hist[:3]]),
                               generator=gen)


def test_pairing_by_log_and_time_equals_the_previous_frame_given_per_token(scenes, official):
    """Two consecutive frames of one log (0.5 s apart), both predicted: the later frame's EC and score from NAVSIM's
    pairing equal those from its previous frame given per token (and NAVSIM's); the log's first frame gets EC NaN.
    scene_0002 / scene_0003 agent 0: EC 0 and EC 1 in NAVSIM."""
    tokens = ["scene_0002", "scene_0003"]
    given, paired = AgentPredictions({}), AgentPredictions({})
    frames = []
    for token in tokens:
        a = official[token]["agents"][0]
        current = dataclasses.replace(scenes[token], generator=dict(scenes[token].generator, log_name="log_" + token))
        previous = _previous_frame_scene(current, "prev_" + token)  # (the fixture's logs share one start time)
        frames += [previous, current]
        given.poses[token] = paired.poses[token] = np.asarray(a["poses"])
        given.previous[token] = paired.poses[previous.id] = np.asarray(a["previous_frame_poses"])
    by_given = score_predictions([scenes[t] for t in tokens], given).set_index("token")
    by_pairing = score_predictions(frames, paired).set_index("token")
    for token in tokens:
        want = official[token]["agents"][0]["navsim_result"]
        assert by_pairing.loc[token, "previous_frame"] == "prev_" + token
        assert by_given.loc[token, "previous_frame"] == "given"
        assert by_pairing.loc[token, "two_frame_extended_comfort"] == by_given.loc[
            token, "two_frame_extended_comfort"] == want["two_frame_extended_comfort"], token
        assert by_pairing.loc[token, "score"] == by_given.loc[token, "score"]
        assert by_pairing.loc[token, "score"] == pytest.approx(want["score"], abs=1e-4)
        assert np.isnan(by_pairing.loc["prev_" + token, "two_frame_extended_comfort"])  # the log's first frame
        assert by_pairing.loc["prev_" + token, "previous_frame"] == ""
    assert {official[t]["agents"][0]["navsim_result"]["two_frame_extended_comfort"] for t in tokens} == {0.0, 1.0}


def test_adjacent_mapping_and_final_scores_follow_navsim():
    frames = [("c", "log1", 0, 1001.0), ("a", "log1", 0, 1000.0), ("b", "log1", 0, 1000.5), ("x", "log2", 0, 1000.4),
              ("s", "log1", 1, 1001.5), ("far", "log2", 0, 1003.0)]
    assert adjacent_mapping(frames) == {"b": "a", "c": "b"}  # per log, ORIGINAL only, at most 0.55 s apart
    got = final_scores(np.array([1.0, 0.5, 1.0]), np.array([[1.0, 1, 1, 1], [0.5, 1, 0, 1], [1, 1, 1, 1]]),
                       np.array([0.0, np.nan, 1.0]))
    np.testing.assert_allclose(got, [14 / 16, 0.5 * (2.5 + 5 + 2) / 14, 1.0])


def test_several_named_agents_in_one_file_score_as_separate_runs(tmp_path, scenes, official, capsys):
    """A parquet with an ``agent`` column (two agents, one with previous frames): one run, one compile of the
    scorer, each agent's rows identical to its own run; the summary puts the agents side by side (and a plot); one
    NAVSIM CSV per agent. Before: ``--predictions`` read one agent (the column was ignored and tokens repeated)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jaxdrive.cli import main
    from jaxdrive.data.scene_json import write_scene
    from jaxdrive.scoring import predictions as module

    tokens = ["scene_0002", "scene_0004", "scene_0009"]
    (tmp_path / "scenes").mkdir()
    for t in tokens:
        write_scene(scenes[t], tmp_path / "scenes" / f"{t}.json")
    rows = {"agent": [], "token": [], "poses": [], "previous_frame_poses": []}
    for name, index in (("first", 0), ("last", -1)):
        for t in tokens:
            a = official[t]["agents"][index]
            rows["agent"].append(name)
            rows["token"].append(t)
            rows["poses"].append(a["poses"])
            rows["previous_frame_poses"].append(a["previous_frame_poses"] if name == "last" else None)
        single = {k: v[-3:] for k, v in rows.items() if k != "agent"}
        pq.write_table(pa.table(single), tmp_path / f"{name}.parquet")
    pq.write_table(pa.table(rows), tmp_path / "both.parquet")
    base = ["score", "--scenes", str(tmp_path / "scenes")]
    compiled = module._score_pairs._cache_size()
    assert main(base + ["--predictions", str(tmp_path / "both.parquet"), "--out", str(tmp_path / "both")]) == 0
    assert module._score_pairs._cache_size() - compiled <= 1
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert header.split() == ["metric", "first", "last"], out
    assert (tmp_path / "both" / "agents.png").stat().st_size > 0
    both = pd.read_parquet(tmp_path / "both" / "predictions.parquet")
    for name in ("first", "last"):
        assert main(base + ["--predictions", str(tmp_path / f"{name}.parquet"), "--out", str(tmp_path / name)]) == 0
        alone = pd.read_parquet(tmp_path / name / "predictions.parquet")
        mine = both[both.agent == name].drop(columns="agent").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone)
        assert (tmp_path / "both" / f"predictions_{name}.csv").read_text() == \
            (tmp_path / name / "predictions.csv").read_text()
    assert module._score_pairs._cache_size() - compiled <= 1
    assert both[both.agent == "last"].two_frame_extended_comfort.iloc[:3].notna().all()
    assert both[both.agent == "first"].two_frame_extended_comfort.iloc[:3].isna().all()


def test_pairs_are_scored_without_padded_proposals(scenes, official, monkeypatch):
    """Each scene's two rows [PDM-Closed, agent] go to the scorer as they are: PadSpec.fit rounds the proposals up to
    8, and the scorer scored 6 padded proposals per scene (4x the kernel's time: 92 -> 22 ms a pair on the fixture)."""
    from jaxdrive.scoring import predictions

    specs = []

    def spy(padded, spec):
        specs.append(spec)
        raise KeyboardInterrupt  # stop before the scorer: the shape is what is checked

    monkeypatch.setattr(predictions, "batch_scenes", spy)
    agent, _ = agent_predictions(official, 0)
    with pytest.raises(KeyboardInterrupt):
        score_predictions([scenes[t] for t in list(agent.poses)[:4]], agent)
    assert specs[0].proposals == 2
