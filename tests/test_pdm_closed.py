"""PDM-Closed in JAX against NAVSIM's own planner (shared/fixtures/pdm_closed, README there).

Stage by stage on a few scenes (IDM states, leading objects, proposal poses, tracked proposals, proposal scores), the
selected proposal and the scored trajectory on all 61 fixture scenes (slow), the STRtree order that breaks
equal-distance leaders, and the `jaxdrive scenes add-pdm-closed` hook.
"""

import json
import shutil

import numpy as np
import pytest
from conftest import SHARED

from jaxdrive.data.scene_json import read_scene
from jaxdrive.planners.pdm_closed import plan, plan_batch, str_tree_order

PDM = SHARED / "fixtures" / "pdm_closed"
EPDMS = SHARED / "fixtures" / "epdms"
ALL = sorted(p.relative_to(PDM).as_posix() for p in PDM.rglob("*.json"))
# 0009: the leading-object row NAVSIM shares between a path's proposals carries a moving leader's speed into
# free-road rows; 0023: a red light and moving leaders; 0031: two leaders touching the ego (STRtree order decides).
STAGED = ["scene_0009.json", "scene_0023.json", "scene_0031.json"]
FIXTURE_ATOL = 2e-6  # fixtures are rounded to 6 decimals


def _load(rel: str):
    with open(PDM / rel) as f:
        return read_scene(EPDMS / rel), json.load(f)["expected_pdm_closed"]


def _wrapped(a, b):
    return np.abs(np.angle(np.exp(1j * (np.asarray(a) - np.asarray(b)))))


def _check_selected(out: dict, expected: dict) -> None:
    assert out["selected_proposal"] == expected["selected_proposal"]
    states = np.asarray(expected["states"])
    assert out["states"].shape == (41, 11)
    assert np.abs(out["states"][:, :2] - states[:, :2]).max() < 1e-2
    assert _wrapped(out["states"][:, 2], states[:, 2]).max() < 1e-3
    trajectory = np.asarray(expected["planner_trajectory"])
    assert out["trajectory"].shape == (51, 3)
    assert np.abs(out["trajectory"][:, :2] - trajectory[:, :2]).max() < 1e-2
    assert _wrapped(out["trajectory"][:, 2], trajectory[:, 2]).max() < 1e-3


def test_fixture_set_is_complete():
    assert len(ALL) == 61


def test_stages_and_selection_match_navsim():
    for rel in STAGED:
        scene, expected = _load(rel)
        out = plan(scene)
        internals = expected["planner_internals"]
        np.testing.assert_allclose(out["idm_states"], internals["idm_states"], atol=FIXTURE_ATOL, err_msg=rel)
        np.testing.assert_allclose(out["leading_agent"], internals["leading_agent"], atol=FIXTURE_ATOL, err_msg=rel)
        poses = np.asarray(internals["proposal_poses"])
        np.testing.assert_allclose(out["proposal_poses"][..., :2], poses[..., :2], atol=FIXTURE_ATOL, err_msg=rel)
        assert _wrapped(out["proposal_poses"][..., 2], poses[..., 2]).max() < FIXTURE_ATOL, rel
        simulated = np.asarray(internals["simulated_states"])
        np.testing.assert_allclose(out["simulated_states"][..., :3], simulated[..., :3], atol=1e-5, err_msg=rel)
        np.testing.assert_allclose(out["pdm_scores"], expected["planner_pdm_scores"], atol=1e-5, err_msg=rel)
        np.testing.assert_allclose(out["trajectory_idm_states"], internals["selected_idm_states"], atol=FIXTURE_ATOL,
                                   err_msg=rel)
        np.testing.assert_allclose(out["trajectory"][:, :2], np.asarray(expected["planner_trajectory"])[:, :2],
                                   atol=FIXTURE_ATOL, err_msg=rel)
        _check_selected(out, expected)


@pytest.mark.slow
def test_selected_proposal_and_states_on_every_fixture():
    loaded = [_load(rel) for rel in ALL]
    outs = plan_batch([scene for scene, _ in loaded])
    mismatched = [rel for rel, (_, e), o in zip(ALL, loaded, outs) if o["selected_proposal"] != e["selected_proposal"]]
    assert not mismatched
    for rel, (_, expected), out in zip(ALL, loaded, outs):
        _check_selected(out, expected)


def test_str_tree_order_is_shapelys_query_order():
    shapely = pytest.importorskip("shapely")
    rng = np.random.default_rng(0)
    for n in (1, 7, 10, 11, 37, 150):
        centres, half = rng.uniform(-50, 50, (n, 2)), rng.uniform(0.5, 3.0, (n, 2))
        envelopes = np.concatenate([centres - half, centres + half], axis=1)
        tree = shapely.STRtree([shapely.box(*e) for e in envelopes], 10)
        assert str_tree_order(envelopes) == tree.query(shapely.box(-1e6, -1e6, 1e6, 1e6)).tolist()


def test_rejects_bad_speed_limit():
    scene, _ = _load(STAGED[0])
    with pytest.raises(ValueError, match="speed_limit"):
        plan(scene, speed_limit=-3.0)


def test_add_pdm_closed_cli(tmp_path):
    from jaxdrive.cli import main

    rel = STAGED[0]
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(EPDMS / rel, src / rel)
    assert main(["scenes", "add-pdm-closed", str(src), "--out", str(tmp_path / "out"), "--speed-limit", "-1"]) == 2
    assert main(["scenes", "add-pdm-closed", str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    reference = read_scene(tmp_path / "out" / rel).extra["reference"]
    _, expected = _load(rel)
    assert reference["selected_proposal"] == expected["selected_proposal"]
    np.testing.assert_allclose(reference["states"], expected["states"], atol=1e-5)
    np.testing.assert_allclose(np.asarray(reference["poses"])[:, :2],
                               np.asarray(expected["planner_trajectory"])[:, :2], atol=1e-5)


@pytest.mark.slow
def test_vocab_reference_pdm_closed_on_synthetic_scenes(tmp_path):
    """Synthetic scenes have no cached reference: `--reference pdm-closed` plans one (rows equal the vocabulary
    scored against `plan(scene)['states']`)."""
    from jaxdrive.scoring.outputs import read_results
    from jaxdrive.scoring.sources import SyntheticSource
    from jaxdrive.vocab.build import human_trajectories
    from jaxdrive.vocab.core import score_vocabulary
    from jaxdrive.vocab.job import VocabOptions, run_vocab

    src = SyntheticSource(1, seed=3, num_proposals=2)
    vocab = human_trajectories(8, seed=5)
    stats = run_vocab(src, vocab, tmp_path / "run", VocabOptions(reference="pdm-closed", chunk=16), progress=False)
    assert not stats.errors
    rows = read_results(tmp_path / "run").sort_values("proposal")
    scene = src.load(0)
    reference = plan(scene)["states"]
    np.testing.assert_allclose(reference[0], scene.history_states[-1], atol=1e-9)
    want = score_vocabulary(scene, vocab, reference, chunk=16)
    for m in ("ep", "pdm_score", "epdms"):
        np.testing.assert_allclose(rows[m].to_numpy(), want[m], atol=1e-6, err_msg=m)


def test_a_short_last_chunk_is_tracked_and_scored_at_the_chunks_shapes(monkeypatch):
    """``plan_batch`` fills a short last chunk with copies and scores every chunk at one PadSpec: tracking and
    scoring each see one shape per call (one compile; the last chunk and each chunk's own map sizes compiled again
    before), and the filled rows change no real scene's result."""
    from jaxdrive.planners import pdm_closed

    seen = {"track": set(), "score": set()}
    track, batch = pdm_closed.track_poses, pdm_closed.batch_scenes

    def tracked(egos, poses):
        seen["track"].add(poses.shape)
        return track(egos, poses)

    def batched(views, spec, **kw):
        seen["score"].add((len(views), spec))
        return batch(views, spec, **kw)

    monkeypatch.setattr(pdm_closed, "track_poses", tracked)
    monkeypatch.setattr(pdm_closed, "batch_scenes", batched)
    loaded = [_load(rel) for rel in ["scene_0031.json", *STAGED[:2], "sanity/sanity_head_on.json"]]
    outs = plan_batch([scene for scene, _ in loaded], chunk=3)
    assert len(seen["track"]) == 1 and len(seen["score"]) == 1, seen
    for (_, expected), out in zip(loaded, outs):
        _check_selected(out, expected)
        np.testing.assert_allclose(out["pdm_scores"], expected["planner_pdm_scores"], atol=1e-5)
