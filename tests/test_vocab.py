"""``jaxdrive vocab``: GTRS semantics against the scorer with the reference prepended, GTRS export layout, kill + resume,
input errors, and the k-means demo vocabulary."""

import dataclasses
import pickle

import jax
import numpy as np
import pytest

from jaxdrive.cli import main
from jaxdrive.rules import score
from jaxdrive.scene import batch_scenes
from jaxdrive.scoring.outputs import read_results
from jaxdrive.scoring.sources import SyntheticSource
from jaxdrive.vocab.build import build_vocabulary, human_trajectories, kmeans
from jaxdrive.vocab.core import vocabulary_states
from jaxdrive.vocab.job import GTRS_KEYS, VocabOptions, run_vocab

METRICS = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc", "pdm_score", "epdms")


def _vocab(k: int, seed: int = 0) -> np.ndarray:
    """k trajectories: synthetic human futures, stretched and bent (ego frame, (k, 40, 3))."""
    base = human_trajectories(4, seed=100 + seed)
    rng = np.random.default_rng(seed)
    out = base[rng.integers(0, 4, k)].copy()
    stretch = rng.uniform(0.3, 1.3, (k, 1))
    bend = rng.normal(0.0, 0.03, (k, 1))
    s = np.linspace(0.025, 1.0, 40)[None]
    out[..., 0] *= stretch
    out[..., 1] = out[..., 1] * stretch + bend * (out[..., 0] ** 2) / 2
    out[..., 2] += bend * out[..., 0] * s / np.maximum(s, 1e-3)
    return out


def _scenes(count=2, seed=7):
    src = SyntheticSource(count, seed=seed, num_proposals=2)
    return src, [src.load(i) for i in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("ep_mode,capacities", [("batch", "default"), ("pairwise", "default"), ("pairwise", "tiny")])
def test_vocab_matches_score_with_reference_prepended(tmp_path, monkeypatch, ep_mode, capacities):
    """K = 256: every row of `vocab` equals the scorer's row k+1 on [reference, vocabulary states] (human filter on);
    pairwise = the scorer's ep_mode 'reference' with the reference's own raw progress x multiplier. With tiny starting
    capacities every chunk's first scoring overflows and is re-scored at grown ones: the same rows."""
    from jaxdrive.vocab import core

    monkeypatch.setattr(core, "_GROWN", {})
    if capacities == "tiny":
        generous = core.default_capacity
        monkeypatch.setattr(core, "default_capacity",
                            lambda k: dataclasses.replace(generous(k), lane_tiles=1, ttc_pairs=1, near_segments=1))
    vocab = _vocab(256)
    src, scenes = _scenes()
    run_vocab(src, vocab, tmp_path / "run", VocabOptions(ep_mode=ep_mode, reference="first-proposal", chunk=256),
              progress=False)
    df = read_results(tmp_path / "run")
    assert len(df) == 2 * 256
    fn = jax.jit(score, static_argnames=("ep_mode", "apply_human_filter"))
    for scene in scenes:
        states = vocabulary_states(scene.history_states[-1], vocab)
        props = np.concatenate([scene.proposal_states[:1], states])
        full = dataclasses.replace(scene, proposal_states=props, proposal_names=[f"p{i}" for i in range(len(props))],
                                   proposal_families=[""] * len(props), previous_states=None, previous_kinds=None)
        sc, pr, _ = batch_scenes([full])
        want = fn(sc, pr, ep_mode="scene", apply_human_filter=True)
        if ep_mode == "pairwise":
            ref = np.asarray(want.raw_progress[:, 0] * want.multiplier[:, 0], np.float32)
            want = fn(sc, pr, ep_mode="reference", reference_progress=ref, apply_human_filter=True)
        rows = df[df.scene_id == scene.id].sort_values("proposal")
        assert list(rows.proposal) == list(range(256))
        for m in METRICS:
            np.testing.assert_allclose(rows[m].to_numpy(), np.asarray(getattr(want, m))[0, 1:257], atol=1e-5,
                                       err_msg=f"{scene.id} {m}")
        assert rows.ep.nunique() > 10 and (rows.epdms < 1).any()  # a vocabulary that exercises the rules


@pytest.mark.slow
def test_gtrs_export_and_kill_resume_identical(tmp_path):
    vocab = _vocab(8, seed=1)
    src, _ = _scenes(count=3, seed=11)
    options = VocabOptions(reference="first-proposal", chunk=8, shard_size=1, export="gtrs")
    run_vocab(src, vocab, tmp_path / "full", options, progress=False)

    class Killed(Exception):
        pass

    def kill(shard):
        if shard == 0:
            (tmp_path / "killed" / "part-00001.parquet.tmp").write_bytes(b"half a file")  # a kill mid-write
            raise Killed

    with pytest.raises(Killed):
        run_vocab(src, vocab, tmp_path / "killed", options, progress=False, on_shard=kill)
    assert not (tmp_path / "killed" / "gtrs_8.pkl").exists()
    stats = run_vocab(src, vocab, tmp_path / "killed", options, resume=True, progress=False)
    assert stats.skipped_shards == 1 and stats.scenes == 2
    names = sorted(p.name for p in (tmp_path / "full").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "killed").iterdir())
    for name in names:
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "killed" / name).read_bytes(), name

    with open(tmp_path / "full" / "gtrs_8.pkl", "rb") as f:
        table = pickle.load(f)
    df = read_results(tmp_path / "full")
    assert sorted(table) == sorted(df.scene_id.unique()) and len(table) == 3
    for token, metrics in table.items():
        assert set(metrics) == set(GTRS_KEYS)
        for key, arr in metrics.items():
            assert isinstance(arr, np.ndarray) and arr.dtype == np.float16 and arr.shape == (8,)
            want = df[df.scene_id == token].sort_values("proposal")[GTRS_KEYS[key]].to_numpy(np.float16)
            np.testing.assert_array_equal(arr, want)


def test_bad_inputs_are_usage_errors(tmp_path, capsys):
    np.save(tmp_path / "bad.npy", np.zeros((4, 8, 3)))
    assert main(["vocab", "--vocabulary", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "o"), "--count", "1",
                 "--no-progress"]) == 2
    assert "--vocabulary" in capsys.readouterr().err
    np.save(tmp_path / "v.npy", _vocab(4))
    # synthetic scenes carry no PDM-Closed reference: reported by name, the run finishes (exit 3)
    assert main(["vocab", "--vocabulary", str(tmp_path / "v.npy"), "--out", str(tmp_path / "o2"), "--count", "1",
                 "--no-progress", "--chunk", "8"]) == 3
    assert "no reference trajectory" in capsys.readouterr().err


def test_kmeans_and_demo_vocabulary():
    pts = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    centres, labels = kmeans(pts, 2, seed=0)
    assert sorted(centres[:, 0].tolist()) == [0.0, 10.0] and len(set(labels[:5])) == len(set(labels[5:])) == 1
    vocab = build_vocabulary(6, 24, seed=3)
    assert vocab.shape == (6, 40, 3) and vocab.dtype == np.float32 and np.all(np.isfinite(vocab))
    assert np.all(np.abs(vocab[:, 0, :2]) < 5.0)  # 0.1 s after the ego pose
    assert np.all(np.abs(vocab[..., 2]) <= np.pi)
