"""Judging at scale compiles once per run (issue 49, item 6): ``jaxdrive score --gates judge:DIR``
(``score_gates.judge_gate_table``) over scenes of different shapes pads them to one run-wide shape, so the BEV
renderer, the VLM forward and the scorer each compile once, and the gates equal those of judging each scene alone."""
import jax
import numpy as np
import pytest

from jaxdrive import scorer
from jaxdrive.data.synthetic import generate_scene
from jaxdrive.judge import bev, policy
from jaxdrive.judge.bev import BevConfig
from jaxdrive.judge.gates import expand_gates
from jaxdrive.judge.policy import DriveJudge
from jaxdrive.judge.score_gates import judge_gate_table
from jaxdrive.judge.tiny import save_tiny_judge
from jaxdrive.scene import PadSpec

CHUNK = 4
PROGRAMS = {"render": bev._render_tiled_batch, "vlm": policy._slot_logits, "scorer": scorer._score_culled}


class Scenes:
    """A scoring source (``scoring.sources.SceneSource``'s ``len`` / ``load``) of host scenes."""

    def __init__(self, scenes):
        self.scenes = scenes

    def __len__(self):
        return len(self.scenes)

    def load(self, i):
        return self.scenes[i]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = save_tiny_judge(tmp_path_factory.mktemp("compiles") / "judge")
    scenes = [generate_scene(seed, num_proposals=3 + seed % 3, validate=False) for seed in range(6)]
    assert len({PadSpec.fit([s]) for s in scenes}) >= 3  # scenes of different shapes
    return path, scenes


def compiles(run):
    """{program: compiles while ``run()`` runs}, from a cleared cache."""
    jax.clear_caches()
    run()
    return {name: f._cache_size() for name, f in PROGRAMS.items()}


def test_judging_scenes_of_different_shapes_compiles_once(setup):
    path, scenes = setup
    judge = DriveJudge.from_pretrained(path, bev=BevConfig(size=32), batch_size=CHUNK)
    table = {}
    n = compiles(lambda: table.update(judge_gate_table(judge, Scenes(scenes), progress=False)))
    assert n == {"render": 1, "vlm": 1, "scorer": 0}, n  # no scorer: the gates need no sub-scores without describe
    rows = [(s, k) for s in scenes for k in range(s.num_proposals)]
    run = judge.probs([s for s, _ in rows], [k for _, k in rows])
    assert {name: f._cache_size() for name, f in PROGRAMS.items()} == n  # any number of rows: the same programs
    alone = []
    for s in scenes:  # each scene alone, in a fresh judge (its own fitted shapes)
        fresh = DriveJudge(judge.model, judge.encoder, judge.image_cfg, bev=judge.bev, batch_size=CHUNK)
        alone.append(fresh.probs([s] * s.num_proposals, list(range(s.num_proposals))))
        np.testing.assert_array_equal(table[s.id], np.asarray(expand_gates(alone[-1] > 0.5)))
    np.testing.assert_allclose(run, np.concatenate(alone), atol=1e-6)


@pytest.mark.slow
def test_described_judging_scores_once(setup):
    """With the text description the gates need the rule sub-scores: the scorer compiles once too (capacities fixed
    from every scene of the run before judging), and ``DriveJudge.score`` calls of other scene shapes and row counts
    reuse the run's programs."""
    path, scenes = setup
    judge = DriveJudge.from_pretrained(path, bev=BevConfig(size=32), batch_size=CHUNK, describe=True)
    table = {}
    n = compiles(lambda: table.update(judge_gate_table(judge, Scenes(scenes), progress=False)))
    assert n == {"render": 1, "vlm": 1, "scorer": 1}, n
    out = judge.score(scenes[:3], [0, 1, 2])
    out2 = judge.score(scenes[3:], [0, 1, 2])
    assert {name: f._cache_size() for name, f in PROGRAMS.items()} == n
    np.testing.assert_array_equal(np.asarray(expand_gates(np.concatenate([out.gates, out2.gates]))),
                                  [table[s.id][k] for s, k in zip(scenes, [0, 1, 2, 0, 1, 2])])
