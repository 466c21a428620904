"""``jaxdrive score --predictions P --gates judge:DIR`` (DriveJudge's Table 4: a planner's score under context-aware
gates), on the tiny random judge: the judge reads each token's scene as NAVSIM scores it ([PDM-Closed, agent]) and
judges the agent's simulated trajectory; ``gated_score`` is Eq. 14 under its gates, which are written as the
``--gates FILE`` table of each agent; a bad judge is one line naming ``--gates``, before any scoring. Before: refused
("not read with --predictions yet")."""

import json

import numpy as np
import pandas as pd
import pytest

from jaxdrive.cli import main
from jaxdrive.data.navsim_cache import find_caches, read_cache_scene
from jaxdrive.data.scene_json import write_scene
from jaxdrive.judge import score_gates
from jaxdrive.judge.tiny import save_tiny_judge
from jaxdrive.scoring import predictions as predictions_module
from jaxdrive.sim import simulate_trajectories
from conftest import SHARED

OFFICIAL = SHARED / "fixtures" / "navsim_official"
CACHE_DIR = SHARED / "fixtures" / "navsim_cache"

pytestmark = pytest.mark.slow  # one scoring compile and one judge compile


def test_judge_gates_with_predictions(tmp_path, capsys, monkeypatch):
    caches = find_caches(CACHE_DIR)[:3]
    (tmp_path / "scenes").mkdir()
    scenes = {}
    for token, path in caches:
        scenes[token] = read_cache_scene(path)
        write_scene(scenes[token], tmp_path / "scenes" / f"{token}.json")
    keys = {}
    for token, _ in caches:
        agents = json.loads((OFFICIAL / f"{token}.json").read_text())["agents"]
        keys[f"first/{token}"], keys[f"last/{token}"] = np.asarray(agents[0]["poses"]), np.asarray(agents[-1]["poses"])
    np.savez(tmp_path / "P.npz", **keys)
    model = save_tiny_judge(tmp_path / "judge")

    seen = []
    real = score_gates.judge_gates_of_proposals

    def spy(spec, pair_scenes, proposals, **kw):
        seen.append((list(pair_scenes), list(proposals)))
        return real(spec, pair_scenes, proposals, **kw)

    monkeypatch.setattr(score_gates, "judge_gates_of_proposals", spy)
    out = tmp_path / "o"
    assert main(["score", "--scenes", str(tmp_path / "scenes"), "--predictions", str(tmp_path / "P.npz"),
                 "--gates", f"judge:{model}", "--out", str(out), "--no-progress"]) == 0
    table = pd.read_parquet(out / "predictions.parquet")
    rows = table[table.token != predictions_module.AVERAGE_TOKEN]
    assert len(rows) == 6 and rows.gated_score.notna().all()

    # the judged proposal: the agent's trajectory simulated as NAVSIM does, beside PDM-Closed, in the rows' order
    (pairs, proposals), = seen
    assert proposals == [1] * 6 and all(p.proposal_names == ["pdm_closed", "agent"] for p in pairs)
    for pair, (_, row) in zip(pairs, rows.iterrows()):
        scene = scenes[row.token]
        poses = keys[f"{row.agent}/{row.token}"]
        want = simulate_trajectories(scene.history_states[-1][None], poses[None],
                                     t0_us=np.array([scene.generator["timepoint_us"]], np.int64))[0]
        np.testing.assert_allclose(pair.proposal_states[1], want, atol=1e-9)
        np.testing.assert_allclose(pair.proposal_states[0], scene.extra["reference"]["states"], atol=1e-9)

    # gated_score = Eq. 14 under the written gates (each agent's table, as --gates FILE reads it); all on = score
    for agent in ("first", "last"):
        gates = json.loads((out / f"judge_gates_{agent}.json").read_text())
        mine = rows[rows.agent == agent]
        assert sorted(gates) == sorted(mine.token) and all(np.shape(g) == (1, 9) for g in gates.values())
        g = predictions_module.gates_per_row(gates, list(mine.token))
        assert g[:, 3].all() and (g[:, 7] == g[:, 8]).all()  # TLC always on, HC == EC (COMFORT)
        np.testing.assert_allclose(mine.gated_score, predictions_module.gated_scores(mine, g), atol=1e-12)
        on = g.all(1)
        np.testing.assert_allclose(mine.gated_score[on], mine.score[on], atol=1e-12)
    assert "gated_score" in capsys.readouterr().out

    # a bad judge: one line naming --gates, before the scenes are scored
    monkeypatch.setattr(predictions_module, "score_agents", lambda *a, **k: pytest.fail("scored"))
    for spec, says in ((f"judge:{model},size=3", "expected judge:DIR[,describe][,size=N]"),
                       (f"judge:{tmp_path}", "is not a pretrained judge directory")):
        assert main(["score", "--scenes", str(tmp_path / "scenes"), "--predictions", str(tmp_path / "P.npz"),
                     "--gates", spec, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--gates {spec}" in err[0] and says in err[0], err
