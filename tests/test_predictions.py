"""``jaxdrive score --predictions``: NAVSIM's official per-token evaluation ([PDM-Closed, agent], LQR simulation, log
replay, human filter, EC dropped) on the converted metric caches equals NAVSIM's own results (navsim_official)."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxdrive.cli import main
from jaxdrive.data.navsim_cache import find_caches, read_cache_scene
from jaxdrive.data.scene_json import write_scene
from jaxdrive.scoring import predictions as predictions_module
from jaxdrive.scoring.predictions import load_predictions
from conftest import SHARED

OFFICIAL = SHARED / "fixtures" / "navsim_official"
CACHE_DIR = SHARED / "fixtures" / "navsim_cache"
EXACT = ["no_at_fault_collisions", "drivable_area_compliance", "driving_direction_compliance",
         "traffic_light_compliance", "time_to_collision_within_bound", "lane_keeping", "history_comfort",
         "multiplicative_metrics_prod"]


def _official(agent_index: int, previous: dict | None = None, rows: dict | None = None):
    preds, want = {}, {}
    for f in sorted(OFFICIAL.glob("*.json")):
        o = json.loads(f.read_text())
        a = o["agents"][agent_index]
        preds[o["token"]], want[o["token"]] = np.asarray(a["poses"]), a["navsim_result"]
        if previous is not None and a["previous_frame_poses"] is not None:
            previous[o["token"]] = np.asarray(a["previous_frame_poses"])
        if rows is not None:
            rows[o["token"]] = {**{k: v for k, v in a["navsim_result"].items() if k != "ego_simulated_states"},
                                **a["script_row"]}
    return preds, want


def navsim_csv(rows: dict) -> pd.DataFrame:
    """What run_pdm_score_one_stage.py's last lines write, run on NAVSIM's own per-token values (the fixture's
    ``navsim_result`` + ``script_row``): the reference for jaxdrive's CSV. Its code, line for line, on a table with
    the columns of compute_final_scores' output."""
    import io
    from dataclasses import fields
    import sys

    sys.path.insert(0, str(SHARED / "vendor" / "navsim-src"))
    try:
        from navsim.common.dataclasses import PDMResults
    except ImportError:  # its module-level imports need NAVSIM's dependencies
        PDMResults = None
    names = [f.name for f in fields(PDMResults)] if PDMResults else [
        "no_at_fault_collisions", "drivable_area_compliance", "driving_direction_compliance",
        "traffic_light_compliance", "ego_progress", "time_to_collision_within_bound", "lane_keeping",
        "history_comfort", "multiplicative_metrics_prod", "weighted_metrics", "weighted_metrics_array", "pdm_score"]
    order = [n for n in names if n not in ("weighted_metrics", "weighted_metrics_array", "multiplicative_metrics_prod")]
    script = ["valid", "log_name", "frame_type", "start_time", "endpoint_x", "endpoint_y", "start_point_x",
              "start_point_y"]
    pdm_score_df = pd.DataFrame([{"token": t, **{c: r[c] for c in order + script},
                                  "two_frame_extended_comfort": np.nan if r["two_frame_extended_comfort"] is None
                                  else r["two_frame_extended_comfort"], "score": r["score"]}
                                 for t, r in rows.items()])
    score_cols = [c for c in pdm_score_df.columns
                  if ((any(name in c for name in names) or c == "two_frame_extended_comfort" or c == "score")
                      and c != "pdm_score")]
    average_row = pdm_score_df[score_cols].mean(skipna=True)
    average_row["token"] = "average_all_frames"
    average_row["valid"] = pdm_score_df["valid"].all()
    pdm_score_df = pdm_score_df[["token", "valid"] + score_cols]
    pdm_score_df.loc[len(pdm_score_df)] = average_row
    return pd.read_csv(io.StringIO(pdm_score_df.to_csv()))


@pytest.mark.slow
def test_predictions_match_navsim_official_evaluation(tmp_path, capsys):
    """NAVSIM's per-token rows (every column of the one-stage script's table, EC and the final ``score`` included),
    its aggregate row, in parquet, and its CSV (same column names and order). Before: no EC, ``score`` with the EC
    weight dropped, no ``valid`` / ``log_name`` / ``frame_type`` / ``start_time`` / end and start points, no
    aggregate row, no CSV."""
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for token, path in find_caches(CACHE_DIR):
        write_scene(read_cache_scene(path), scenes / f"{token}.json")
    previous, rows = {}, {}
    preds, want = _official(-1, previous, rows)  # the scene's last proposal: the most varied agents
    np.savez(tmp_path / "P.npz", **preds, **{f"{t}/previous_frame_poses": p for t, p in previous.items()})
    assert main(["score", "--scenes", str(scenes), "--predictions", str(tmp_path / "P.npz"), "--out",
                 str(tmp_path / "out")]) == 0
    assert "score" in capsys.readouterr().out
    table = pd.read_parquet(tmp_path / "out" / "predictions.parquet")
    assert list(table.columns[:20]) == predictions_module.NAVSIM_COLUMNS
    df, average = table.iloc[:-1], table.iloc[-1]
    assert sorted(df.token) == sorted(want) and len(df) == 61
    failures = []
    for _, row in df.iterrows():
        w, r = want[row.token], rows[row.token]
        for col in EXACT + ["valid", "log_name", "frame_type", "start_time"]:
            if row[col] != r[col]:
                failures.append(f"{row.token} {col}: {row[col]} vs NAVSIM {r[col]}")
        for col in ("ego_progress", "pdm_score", "score"):
            if abs(row[col] - w[col]) > 1e-4:
                failures.append(f"{row.token} {col}: {row[col]} vs NAVSIM {w[col]}")
        for col in ("endpoint_x", "endpoint_y", "start_point_x", "start_point_y"):  # the fixture rounds to 1e-4
            if abs(row[col] - r[col]) > 1e-4:
                failures.append(f"{row.token} {col}: {row[col]} vs NAVSIM {r[col]}")
        ec = w["two_frame_extended_comfort"]
        if not (np.isnan(row.two_frame_extended_comfort) if ec is None else row.two_frame_extended_comfort == ec):
            failures.append(f"{row.token} EC: {row.two_frame_extended_comfort} vs NAVSIM {ec}")
    assert not failures, "\n".join(failures)
    assert average.token == "average_all_frames" and average.valid
    assert average.score == pytest.approx(np.mean([w["score"] for w in want.values()]), abs=1e-5)
    assert df["score"].mean() == pytest.approx(np.mean([w["score"] for w in want.values()]), abs=1e-5)

    ours = pd.read_csv(tmp_path / "out" / "predictions.csv")
    reference = navsim_csv(rows)
    assert list(ours.columns) == list(reference.columns)
    assert (tmp_path / "out" / "predictions.csv").read_text().splitlines()[0] == \
        ",token,valid," + ",".join(predictions_module.NAVSIM_SCORE_COLUMNS)
    ours, reference = ours.set_index("token"), reference.set_index("token")
    assert sorted(ours.index) == sorted(reference.index) and ours.index[-1] == "average_all_frames"
    reference = reference.loc[ours.index]
    assert (ours["valid"] == reference["valid"]).all()
    np.testing.assert_allclose(ours[predictions_module.NAVSIM_SCORE_COLUMNS].to_numpy(float),
                               reference[predictions_module.NAVSIM_SCORE_COLUMNS].to_numpy(float), atol=1e-4)


def test_prediction_files(tmp_path):
    preds, _ = _official(0)
    some = dict(list(preds.items())[:3])
    np.savez(tmp_path / "P.npz", **some)
    pq.write_table(pa.table({"token": list(some), "poses": [p.tolist() for p in some.values()]}), tmp_path / "P.parquet")
    pq.write_table(pa.table({"token": list(some), "poses": [p.ravel().tolist() for p in some.values()]}),
                   tmp_path / "flat.parquet")
    a, b, c = (load_predictions(tmp_path / n) for n in ("P.npz", "P.parquet", "flat.parquet"))
    for k in some:
        np.testing.assert_array_equal(a[k], b[k])
        np.testing.assert_array_equal(a[k], c[k])
    np.savez(tmp_path / "bad.npz", tok=np.zeros((6, 3)))
    with pytest.raises(ValueError, match="--predictions .*'tok'.*\\(8, 3\\)"):
        load_predictions(tmp_path / "bad.npz")


def test_unreadable_or_non_finite_prediction_files_are_named(tmp_path):
    """An empty .npz (an interrupted write) was an EOFError traceback, one array saved as .npy under an .npz name a
    TypeError traceback; a NaN pose said "expected 8 finite poses, shape (8, 3), got shape (8, 3)"."""
    (tmp_path / "empty.npz").write_bytes(b"")
    with open(tmp_path / "one.npz", "wb") as f:
        np.save(f, np.zeros((8, 3)))
    np.savez(tmp_path / "nan.npz", tok=np.where(np.arange(24).reshape(8, 3) == 7, np.nan, 1.0))
    for name, says in (("empty.npz", "cannot read"), ("one.npz", r"one array of shape \(8, 3\)"),
                       ("nan.npz", r"token 'tok': expected finite values, got nan at pose 2, field 1")):
        with pytest.raises(ValueError, match=rf"^--predictions {tmp_path / name}: .*{says}"):
            load_predictions(tmp_path / name)


def test_tokens_are_scored_once_and_what_is_left_out_is_said(tmp_path, capsys, monkeypatch):
    """One token in two scene files was scored twice (two rows, counted twice in the summary's means); scenes without
    a prediction were dropped without a word; a parquet token given twice kept its last row silently; ``--gates``,
    ``--proposals``, ``--ep-mode``, ``--reference-progress`` and ``--resume`` were read and ignored."""
    import shutil

    from conftest import EPDMS_FIXTURES
    from jaxdrive.data.scene_json import read_scene
    from jaxdrive.scoring import predictions as predictions_module

    files = sorted(EPDMS_FIXTURES.glob("*.json"))[:3]
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for f in files:
        shutil.copy(f, scenes)
    shutil.copy(files[0], scenes / "zz_copy.json")
    ids = [read_scene(f).id for f in files]
    np.savez(tmp_path / "P.npz", **{sid: np.zeros((8, 3)) for sid in ids[:2]})
    scored = []

    def fake_score(scene_list, agents, batch_size=16, notes=None):  # the pairing under test, not NAVSIM's numbers
        scored.extend(s.id for s in scene_list)
        return pd.DataFrame([{**{c: 1.0 for c in predictions_module.NAVSIM_COLUMNS + predictions_module.EXTRA_COLUMNS},
                              "token": s.id, "valid": True, "two_frame_extended_comfort": np.nan, "agent": "agent"}
                             for s in scene_list])

    monkeypatch.setattr(predictions_module, "score_agents", fake_score)
    args = ["score", "--scenes", str(scenes), "--predictions", str(tmp_path / "P.npz"), "--out", str(tmp_path / "o")]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert sorted(scored) == sorted(ids[:2]), scored
    assert "zz_copy.json" in err and repr(ids[0]) in err and "scored once" in err, err
    assert "1 scenes" in err and "no prediction" in err and repr(ids[2]) in err, err
    for extra, needle in ((["--proposals", "p.npz"], "--proposals"),
                          (["--ep-mode", "batch"], "--ep-mode batch"), (["--resume"], "--resume"),
                          (["--ep-mode", "reference", "--reference-progress", "r.json"], "--reference-progress")):
        assert main(args + extra) == 2
        err = capsys.readouterr().err
        assert needle in err and "would be ignored" in err, (extra, err)
    pq.write_table(pa.table({"token": [ids[0], ids[1], ids[0]], "poses": [np.zeros(24).tolist()] * 3}),
                   tmp_path / "dup.parquet")
    with pytest.raises(ValueError, match=f"token '{ids[0]}' has 2 rows"):
        load_predictions(tmp_path / "dup.parquet")


def test_prediction_files_of_strings_are_named(tmp_path):
    """A .npz holding string arrays said "could not convert string to float: 'a'", naming neither the flag nor the
    file; numeric strings were taken as numbers."""
    np.savez(tmp_path / "str.npz", tok=np.full((8, 3), "a"))
    np.savez(tmp_path / "num.npz", tok=np.full((8, 3), "1.5"))
    for name in ("str.npz", "num.npz"):
        with pytest.raises(ValueError, match=rf"^--predictions {tmp_path / name}: token 'tok': expected numeric "
                                             r"\(x, y, heading\) poses, got an array of <U\d+"):
            load_predictions(tmp_path / name)


def test_bad_agent_and_previous_frame_inputs_are_one_line(tmp_path, capsys):
    """Previous-frame poses of the wrong shape / non-finite / without the token's poses, an agent name given twice,
    a token missing from the caches: one line naming it. A previous frame for a frame without a log frame 0.5 s
    earlier (SYNTHETIC) and frames NAVSIM's SceneAggregator would stop on (one start time): a note, EC NaN."""
    import dataclasses

    from jaxdrive.scoring.predictions import AgentPredictions, _agents_of_flags, previous_frames, read_agents

    good = np.zeros((8, 3))
    np.savez(tmp_path / "shape.npz", tok=good, **{"tok/previous_frame_poses": np.zeros((7, 3))})
    np.savez(tmp_path / "nan.npz", **{"a/tok": good, "a/tok/previous_frame_poses": np.full((8, 3), np.inf)})
    np.savez(tmp_path / "orphan.npz", tok=good, **{"other/previous_frame_poses": good})
    for name, says in (("shape.npz", r"token 'tok': expected 8 finite \(x, y, heading\) previous-frame poses, shape "
                                     r"\(8, 3\), got shape \(7, 3\)"),
                       ("nan.npz", r"agent 'a': token 'tok': expected finite previous-frame values, got inf at pose 0"),
                       ("orphan.npz", r"token 'other': previous_frame_poses given without the token's poses")):
        with pytest.raises(ValueError, match=rf"^--predictions {tmp_path / name}: {says}"):
            read_agents(tmp_path / name)
    np.savez(tmp_path / "one.npz", tok=good)
    np.savez(tmp_path / "two.npz", **{"x/tok": good, "y/tok": good})
    assert list(_agents_of_flags([str(tmp_path / "one.npz"), f"b={tmp_path / 'one.npz'}"])) == ["agent", "b"]
    assert list(_agents_of_flags([str(tmp_path / "two.npz")])) == ["x", "y"]
    for flags, says in (([tmp_path / "one.npz", tmp_path / "one.npz"], "agent name 'agent' repeated"),
                        ([tmp_path / "two.npz", f"x={tmp_path / 'one.npz'}"], "agent name 'x' repeated"),
                        ([f"x={tmp_path / 'two.npz'}"], "holds 2 agents")):
        with pytest.raises(ValueError, match=says):
            _agents_of_flags([str(f) for f in flags])

    token, path = find_caches(CACHE_DIR)[0]
    scene = read_cache_scene(path)
    synthetic = dataclasses.replace(scene, id="syn", generator=dict(scene.generator, scene_type=1))
    twin = dataclasses.replace(scene, id="twin")
    preds = AgentPredictions({"syn": good, token: good, "twin": good}, {"syn": good})
    notes = []
    _, shift, source = previous_frames([synthetic, scene, twin], preds, np.zeros((3, 41, 11)), notes)
    assert shift.tolist() == [0, 0, 0] and source == ["", "", ""]
    assert len(notes) == 2, notes
    assert "token 'syn': previous_frame_poses given, but its frame is SYNTHETIC" in notes[0] and "EC NaN" in notes[0]
    assert "SceneAggregator stops" in notes[1] and "+0.000 s" in notes[1]

    (tmp_path / "scenes").mkdir()
    write_scene(scene, tmp_path / "scenes" / f"{token}.json")
    np.savez(tmp_path / "missing.npz", nope=good)
    assert main(["score", "--scenes", str(tmp_path / "scenes"), "--predictions", str(tmp_path / "missing.npz"),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "1 predicted tokens have no scene, e.g. ['nope']" in err and "no token matches a scene" in err, err


def test_gates_with_predictions(tmp_path, capsys, monkeypatch):
    """``--gates FILE`` with ``--predictions``: DriveJudge's gated score of each token (column ``gated_score``, equal
    to ``rules.epdms.gated_score`` on the row), global or per token, with scene scoring's one-line errors. Before:
    refused ("would be ignored")."""
    import json
    import shutil

    import jax.numpy as jnp

    from conftest import EPDMS_FIXTURES
    from jaxdrive.data.scene_json import read_scene
    from jaxdrive.rules.epdms import SubScores, gated_score
    from jaxdrive.scoring.predictions import gated_scores

    rng = np.random.default_rng(0)
    n = 64
    cols = {c: rng.choice([0.0, 0.5, 1.0], n) for c in predictions_module._GATED.values()}
    cols["ego_progress"] = rng.uniform(0, 1, n)
    cols["two_frame_extended_comfort"] = rng.choice([0.0, 1.0, np.nan], n)
    df = pd.DataFrame(cols)
    gates = rng.uniform(size=(n, 9)) < 0.5
    s = SubScores(**{m: jnp.asarray(df[c].to_numpy(), jnp.float32) for m, c in predictions_module._GATED.items()},
                  **{f: jnp.zeros(n) for f in SubScores.__dataclass_fields__
                     if f not in predictions_module._GATED})
    np.testing.assert_allclose(gated_scores(df, gates), np.asarray(gated_score(s, gates)), atol=1e-6)

    files = sorted(EPDMS_FIXTURES.glob("*.json"))[:2]
    (tmp_path / "scenes").mkdir()
    for f in files:
        shutil.copy(f, tmp_path / "scenes")
    ids = [read_scene(f).id for f in files]
    np.savez(tmp_path / "P.npz", **{sid: np.zeros((8, 3)) for sid in ids})

    def fake_score(scene_list, agents, batch_size=16, notes=None):
        return pd.DataFrame([{**{c: 1.0 for c in predictions_module.NAVSIM_COLUMNS + predictions_module.EXTRA_COLUMNS},
                              "token": s.id, "valid": True, "lane_keeping": 0.0, "two_frame_extended_comfort": np.nan,
                              "agent": "agent"} for s in scene_list])

    monkeypatch.setattr(predictions_module, "score_agents", fake_score)
    args = ["score", "--scenes", str(tmp_path / "scenes"), "--predictions", str(tmp_path / "P.npz"), "--out",
            str(tmp_path / "o"), "--gates", str(tmp_path / "g.json")]
    all_on_but_lk = [True] * 6 + [False] + [True] * 2
    (tmp_path / "g.json").write_text(json.dumps(all_on_but_lk))
    assert main(args) == 0
    table = pd.read_parquet(tmp_path / "o" / "predictions.parquet")
    assert table.gated_score.tolist() == [1.0, 1.0, 1.0]  # LK 0 gated off (the average row last)
    (tmp_path / "g.json").write_text(json.dumps({ids[0]: [all_on_but_lk], ids[1]: [True] * 9}))
    assert main(args) == 0
    table = pd.read_parquet(tmp_path / "o" / "predictions.parquet").set_index("token")
    assert table.loc[ids[0], "gated_score"] == 1.0 and table.loc[ids[1], "gated_score"] == pytest.approx(12 / 14)
    capsys.readouterr()
    for gates, says in (([True] * 8, "--gates: expected 9 booleans in the order nc, dac"),
                        ({ids[0]: [True] * 9}, f"--gates: no entry for scene '{ids[1]}'"),
                        ({ids[0]: [[True] * 9] * 2, ids[1]: [True] * 9}, f"--gates: scene '{ids[0]}': expected 1 rows"),
                        ([[True] * 9], "--gates: a global vector is 9 booleans")):
        (tmp_path / "g.json").write_text(json.dumps(gates))
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (gates, err)
    assert main(args[:-1] + ["judge:/nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gates judge:/nowhere" in err[0], err
