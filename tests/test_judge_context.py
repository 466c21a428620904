"""The judge's context facts (``judge.context``): what they read, what they never read, and known answers.

A judge trained on labelled logs must see only what a real log has: the tests rename or drop every proposal name,
family, agent id and role and the generator block, and check that the judge's text, its BEV image and the non-VLM
baseline's features are unchanged (issue 49, item 5).
"""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from jaxdrive.data.scene_json import read_scene
from jaxdrive.data.synthetic import generate_scene
from jaxdrive.judge import context as C
from jaxdrive.judge import prompt as P
from jaxdrive.judge.bev import BevConfig, render_bev_batch
from jaxdrive.scene import PadSpec, batch_scenes

LABELLED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "drivejudge_labels" / "scenes"


def _stripped(scene):
    """The scene as a real log gives it: proposals, agents and lanes renamed, no roles, families, generator or
    NAVSIM expectations."""
    s = copy.deepcopy(scene)
    s.proposal_names = [f"traj{i}" for i in range(s.num_proposals)]
    s.proposal_families = ["" for _ in range(s.num_proposals)]
    s.agents = [dataclasses.replace(a, id=f"obj{i}", role="") for i, a in enumerate(s.agents)]
    s.generator, s.expected, s.previous_kinds = {}, None, None
    return s


def _inputs(scene, spec):
    """Every proposal's judge text (with the description and rule checks) and BEV image, and the feature rows."""
    texts = [P.messages(scene, k, describe=True, answer=P.answer_text([True] * 7), broken=["LK", "EP"])
             for k in range(scene.num_proposals)]
    sc, pr, _ = batch_scenes([scene] * scene.num_proposals, spec)
    k = np.arange(scene.num_proposals)
    images = np.asarray(render_bev_batch(sc, np.asarray(pr.states)[k, k], BevConfig(size=32)))
    return texts, images, C.context_features(scene)[1]


@pytest.mark.parametrize("source", ["labelled", "synthetic"])
def test_the_judge_sees_nothing_a_real_log_lacks(source):
    scene = (read_scene(LABELLED / "dj_scene_0007.json") if source == "labelled"
             else generate_scene(3, num_proposals=12))
    if source == "synthetic":
        assert any(a.role for a in scene.agents) and len(set(scene.proposal_families)) > 3  # something to strip
    stripped = _stripped(scene)
    spec = PadSpec.fit([scene])
    texts, images, feats = _inputs(scene, spec)
    texts2, images2, feats2 = _inputs(stripped, spec)
    assert texts == texts2
    np.testing.assert_array_equal(images, images2)
    np.testing.assert_array_equal(feats, feats2)
    for k in range(scene.num_proposals):  # and no proposal name reaches the text
        assert scene.proposal_names[k] not in str(texts[k]).replace(",", " ").split()


def _straight_scene():
    """A generated scene with its agents removed and its lights cleared: the facts of a known road."""
    scene = generate_scene(0, num_proposals=4)
    scene.agents, scene.traffic_lights = [], {}
    return scene


def test_context_facts_known_answers():
    scene = _straight_scene()
    sf = C.scene_facts(scene)
    assert sf.lead_gap == C.NONE and sf.blocker == C.NONE and sf.pedestrian == C.NONE and sf.cut_in == C.NONE
    assert not (sf.red_now or sf.red_later or sf.green_later)
    # a stopped car 20 m ahead on the centre line, a pedestrian walking from 6 m left toward the road at 30 m
    cl = scene.centerline
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(cl[:, :2], axis=0), axis=-1))])
    ego = arc[np.argmin(np.linalg.norm(cl[:, :2] - scene.origin, axis=-1))]

    def at(ahead, left):
        i = int(np.searchsorted(arc, ego + ahead))
        h = cl[i, 2]
        return cl[i, :2] + left * np.array([-np.sin(h), np.cos(h)]), h

    from jaxdrive.scene import AgentType
    from jaxdrive.scene.host import Agent

    car_xy, h = at(20.0, 0.0)
    car = np.tile(np.r_[car_xy, h, 0.0, 0.0], (41, 1))
    ped = np.zeros((41, 5))
    for t in range(41):
        xy, hp = at(30.0, 6.0 - 0.1 * t)  # 1 m/s toward the centre line: 2 m left at 4 s
        ped[t] = np.r_[xy, hp, np.sin(hp) * 1.0, -np.cos(hp) * 1.0]
    scene.agents = [Agent("a", AgentType.VEHICLE, 4.0, 2.0, 1.5, car), Agent("b", AgentType.PEDESTRIAN, 0.5, 0.5, 1.7, ped)]
    sf = C.scene_facts(scene)
    assert sf.blocker == pytest.approx(20.0 - 2.0 - C.EGO_FRONT, abs=0.8)  # centre line points ~0.5 m apart
    assert sf.lead_gap == pytest.approx(sf.blocker, abs=1e-6) and sf.lead_speed == pytest.approx(0.0, abs=1e-6)
    assert sf.pedestrian == pytest.approx(30.0, abs=0.8) and sf.pedestrian_lat == pytest.approx(2.0, abs=0.2)
    text = C.describe_context(scene, 0)
    assert "Stopped object in lane" in text and "Pedestrian 30 m ahead comes to 2.0 m" in text


def test_plan_facts_of_a_stopping_plan():
    scene = _straight_scene()
    names, x = C.context_features(scene)
    assert x.shape == (scene.num_proposals, len(names)) and np.isfinite(x[:, [n.startswith("plan_") for n in names]]).all()
    for k in range(scene.num_proposals):
        pf = C.plan_facts(scene, k)
        v = scene.proposal_states[k, :, 3]
        assert pf.speeds == pytest.approx(tuple(v[[10, 20, 30, 40]]))
        assert (pf.stops_at == C.NONE) == bool((v >= 0.5).all())
        assert pf.max_left >= 0 and pf.max_right >= 0 and pf.off_route == 0
