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
from jaxdrive.scoring.predictions import load_predictions
from conftest import SHARED

OFFICIAL = SHARED / "fixtures" / "navsim_official"
CACHE_DIR = SHARED / "fixtures" / "navsim_cache"
EXACT = ["no_at_fault_collisions", "drivable_area_compliance", "driving_direction_compliance",
         "traffic_light_compliance", "time_to_collision_within_bound", "lane_keeping", "history_comfort",
         "multiplicative_metrics_prod"]


def _official(agent_index: int):
    preds, want = {}, {}
    for f in sorted(OFFICIAL.glob("*.json")):
        o = json.loads(f.read_text())
        a = o["agents"][agent_index]
        preds[o["token"]], want[o["token"]] = np.asarray(a["poses"]), a["navsim_result"]
    return preds, want


@pytest.mark.slow
def test_predictions_match_navsim_official_evaluation(tmp_path, capsys):
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for token, path in find_caches(CACHE_DIR):
        write_scene(read_cache_scene(path), scenes / f"{token}.json")
    preds, want = _official(-1)  # the scene's last proposal: the most varied agents
    np.savez(tmp_path / "P.npz", **preds)
    assert main(["score", "--scenes", str(scenes), "--predictions", str(tmp_path / "P.npz"), "--out",
                 str(tmp_path / "out")]) == 0
    assert "score" in capsys.readouterr().out
    df = pd.read_parquet(tmp_path / "out" / "predictions.parquet")
    assert sorted(df.token) == sorted(want) and len(df) == 61
    failures = []
    for _, row in df.iterrows():
        w = want[row.token]
        for col in EXACT:
            if row[col] != w[col]:
                failures.append(f"{row.token} {col}: {row[col]} vs NAVSIM {w[col]}")
        for col, key in (("ego_progress", "ego_progress"), ("pdm_score", "pdm_score"), ("score", "score_ec_dropped")):
            if abs(row[col] - w[key]) > 1e-4:
                failures.append(f"{row.token} {col}: {row[col]} vs NAVSIM {w[key]}")
    assert not failures, "\n".join(failures)
    assert df["score"].mean() == pytest.approx(np.mean([w["score_ec_dropped"] for w in want.values()]), abs=1e-5)


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

    def fake_score(scene_list, preds, batch_size=16, notes=None):  # the pairing under test, not NAVSIM's numbers
        scored.extend(s.id for s in scene_list)
        return pd.DataFrame([{"token": s.id, **{c: 1.0 for c in predictions_module.COLUMNS.values()},
                              "two_frame_extended_comfort": np.nan, "score": 1.0} for s in scene_list])

    monkeypatch.setattr(predictions_module, "score_predictions", fake_score)
    args = ["score", "--scenes", str(scenes), "--predictions", str(tmp_path / "P.npz"), "--out", str(tmp_path / "o")]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert sorted(scored) == sorted(ids[:2]), scored
    assert "zz_copy.json" in err and repr(ids[0]) in err and "scored once" in err, err
    assert "1 scenes" in err and "no prediction" in err and repr(ids[2]) in err, err
    for extra, needle in ((["--gates", "g.json"], "--gates"), (["--proposals", "p.npz"], "--proposals"),
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
