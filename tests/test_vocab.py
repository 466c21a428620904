"""``jaxdrive vocab``: GTRS semantics against the scorer with the reference prepended (GTRS's ``gen_gt`` progress, its
human-filter quirks), GTRS export layout, kill + resume, repeated scene ids, input errors, and the k-means demo
vocabulary."""

import dataclasses
import json
import os
import pickle

import jax
import numpy as np
import pandas as pd
import pytest

from jaxdrive.cli import main
from jaxdrive.rules import score
from jaxdrive.scene import batch_scenes
from jaxdrive.scoring.outputs import read_results
from jaxdrive.scoring.sources import SyntheticSource
from jaxdrive.vocab.build import build_vocabulary, human_trajectories, kmeans
from jaxdrive.vocab.core import gtrs_progress, reference_states, score_vocabulary, vocabulary_states
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


def test_gtrs_progress_known_answers():
    """GTRS's EP under PROGRESS_MODE=gen_gt: masked progress m = raw x M over max(m, R) where that exceeds 5 m, else 1.
    A trajectory with M = 0 gets 0 (NAVSIM's pairing would give raw / R, clipped: 1 here)."""
    raw = np.array([30.0, 30.0, 30.0, 10.0, 4.0, 4.0, 60.0])
    mult = np.array([0.0, 0.5, 1.0, 1.0, 1.0, 0.0, 0.5])
    np.testing.assert_allclose(gtrs_progress(raw, mult, 20.0), [0.0, 0.75, 1.0, 0.5, 0.2, 0.0, 1.0])
    np.testing.assert_allclose(gtrs_progress(raw[4:6], mult[4:6], 3.0), [1.0, 1.0])  # max(m, R) <= 5 m: 1
    assert gtrs_progress(raw, mult, 20.0).dtype == np.float32


def _gtrs_rows(plain, filtered, k: int) -> dict:
    """What GTRS's ``pdm_score_full_v2`` (PROGRESS_MODE=gen_gt) writes for rows 1..k of a [reference, vocabulary]
    batch, from the scorer's unfiltered (``plain``) and human-filtered (``filtered``) rows: EP by the gen_gt rule
    (spelled out here, not ``gtrs_progress``), pdm_score before the filter, EPDMS (no EC) after it."""
    get = lambda rows, m: np.asarray(getattr(rows, m), np.float64)[0]
    masked = get(plain, "raw_progress") * get(plain, "multiplier")
    d = np.maximum(masked[1:k + 1], masked[0])
    ep = np.where(d > 5.0, masked[1:k + 1] / np.where(d > 5.0, d, 1.0), 1.0)
    weighted = lambda rows: (5 * ep + 5 * get(rows, "ttc")[1:k + 1] + 2 * get(rows, "lk")[1:k + 1]
                             + 2 * get(rows, "hc")[1:k + 1]) / 14
    multiplier = lambda rows: np.prod([get(rows, m)[1:k + 1] for m in ("nc", "dac", "ddc", "tlc")], axis=0)
    out = {m: get(filtered, m)[1:k + 1] for m in ("nc", "dac", "ddc", "tlc", "ttc", "lk", "hc")}
    return out | {"ep": ep, "pdm_score": multiplier(plain) * weighted(plain),
                  "epdms": multiplier(filtered) * weighted(filtered)}


@pytest.mark.slow
@pytest.mark.parametrize("ep_mode,capacities", [("batch", "default"), ("pairwise", "default"), ("pairwise", "tiny"),
                                                ("gtrs", "default")])
def test_vocab_matches_score_with_reference_prepended(tmp_path, monkeypatch, ep_mode, capacities):
    """K = 256: every row of `vocab` equals the scorer's row k+1 on [reference, vocabulary states] (human filter on);
    pairwise = the scorer's ep_mode 'reference' with the reference's own raw progress x multiplier; gtrs = GTRS's
    gen_gt progress (``_gtrs_rows``), exercised on trajectories with a zero multiplier (EP 0 there, where the
    pairwise rule gives > 0). With tiny starting capacities every chunk's first scoring overflows and is re-scored at
    grown ones: the same rows."""
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
    fulls = []
    for scene in scenes:
        states = vocabulary_states(scene.history_states[-1], vocab)
        props = np.concatenate([scene.proposal_states[:1], states])
        fulls.append(dataclasses.replace(scene, proposal_states=props,
                                         proposal_names=[f"p{i}" for i in range(len(props))],
                                         proposal_families=[""] * len(props), previous_states=None,
                                         previous_kinds=None))
    sc, pr, _ = batch_scenes(fulls)  # both scenes in one batch: one compiled shape per scoring mode
    wants = fn(sc, pr, ep_mode="scene", apply_human_filter=True)
    if ep_mode in ("pairwise", "gtrs"):
        ref = np.asarray(wants.raw_progress[:, 0] * wants.multiplier[:, 0], np.float32)
        wants = fn(sc, pr, ep_mode="reference", reference_progress=ref, apply_human_filter=True)
    plains = fn(sc, pr, ep_mode="scene", apply_human_filter=False) if ep_mode == "gtrs" else None
    for b, scene in enumerate(scenes):
        want = jax.tree.map(lambda a: np.asarray(a)[b:b + 1], wants)
        rows = df[df.scene_id == scene.id].sort_values("proposal")
        assert list(rows.proposal) == list(range(256))
        if ep_mode == "gtrs":
            plain = jax.tree.map(lambda a: np.asarray(a)[b:b + 1], plains)
            gtrs = _gtrs_rows(plain, want, 256)
            zero = np.asarray(plain.multiplier)[0, 1:257] == 0
            assert zero.any() and (np.asarray(want.ep)[0, 1:257][zero] > 0).any()  # where the two rules differ
            for m, value in gtrs.items():
                np.testing.assert_allclose(rows[m].to_numpy(), value, atol=1e-5, err_msg=f"{scene.id} {m}")
            continue
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


@pytest.mark.parametrize("source", ["SceneDirSource", "SceneFileSource"])
def test_resume_scores_again_the_shard_of_an_edited_scene_file(tmp_path, capsys, source):
    """As ``jaxdrive score``: a scene file edited after its shard was scored (another scene's content, same id) is
    scored again on --resume and named; the other shard is kept; the rows equal a fresh run's over the edited files.
    The resume kept the old rows (the run's identity names the files, not their content); with ``SceneFileSource``,
    the source of ``jaxdrive vocab --scenes`` (e.g. scenes converted again from NAVSIM caches), it still did."""
    from jaxdrive.data.scene_json import scene_to_dict, write_scene
    from jaxdrive.scoring.sources import SceneDirSource
    from jaxdrive.vocab.job import SceneFileSource

    make_source = {"SceneDirSource": SceneDirSource, "SceneFileSource": SceneFileSource}[source]
    _, scenes = _scenes(count=2, seed=11)
    folder = tmp_path / "scenes"
    folder.mkdir()
    for i, scene in enumerate(scenes):
        write_scene(scene, folder / f"s{i}.json")
    vocab, options = _vocab(8, seed=1), VocabOptions(reference="first-proposal", chunk=8, shard_size=1)
    run_vocab(make_source(folder), vocab, tmp_path / "out", options, progress=False)
    (folder / "s0.json").write_text(json.dumps({**scene_to_dict(scenes[1]), "id": scenes[0].id}))
    stats = run_vocab(make_source(folder), vocab, tmp_path / "out", options, resume=True, progress=False)
    assert stats.skipped_shards == 1 and stats.scenes == 1
    assert "scoring shard 0 again: its input files changed since it was scored (size or modification time): " \
           "s0.json" in capsys.readouterr().err
    run_vocab(make_source(folder), vocab, tmp_path / "fresh", options, progress=False)
    pd.testing.assert_frame_equal(read_results(tmp_path / "out"), read_results(tmp_path / "fresh"))


@pytest.mark.slow
def test_gtrs_human_filter_quirks_and_second_stage_scenes():
    """GTRS's human filter, as ``pdm_score_full_v2`` runs it: a human that leaves the road (its DAC and so its own
    pdm_score 0) sets every trajectory's DAC to 1 and, since GTRS's loop over the human's columns does not skip
    ``pdm_score``, every pdm_score to 1 (pairwise keeps NAVSIM's unfiltered pdm_score). A second-stage scene
    (``generator.scene_type`` 1) is never filtered, here or in ``jaxdrive score``'s batches (``has_human``)."""
    src, (scene, _) = _scenes()
    off_road = scene.human_states.copy()
    off_road[:, 1] += 40.0  # 40 m to the side of the whole road
    scene = dataclasses.replace(scene, human_states=off_road)
    vocab = _vocab(8, seed=3)
    reference = reference_states(scene, "first-proposal")
    run = lambda s, mode: score_vocabulary(s, vocab, reference, ep_mode=mode, chunk=8)
    gtrs, pairwise = run(scene, "gtrs"), run(scene, "pairwise")
    np.testing.assert_array_equal(gtrs["dac"], 1.0)
    np.testing.assert_array_equal(gtrs["pdm_score"], 1.0)
    assert (pairwise["pdm_score"] < 1).any()
    second = dataclasses.replace(scene, generator={**scene.generator, "scene_type": 1})
    assert scene.filters_human and not second.filters_human
    unfiltered = score_vocabulary(scene, vocab, reference, ep_mode="gtrs", chunk=8, human_filter_on=False)
    for m, v in run(second, "gtrs").items():
        np.testing.assert_array_equal(v, unfiltered[m], err_msg=m)
    assert (unfiltered["dac"] < 1).any()
    sc, _, _ = batch_scenes([scene, second])
    assert np.asarray(sc.has_human).tolist() == [True, False]


def test_repeated_scene_ids_are_scored_once_and_bad_references_named(tmp_path, capsys):
    """One scene id in two files: the first is scored, the second named in errors.jsonl (exit 3), and the GTRS
    pickle holds K values per token (it held 2K). A reference with a NaN is an error naming the scene (it was scored
    as padding: R = NaN, so every EP became 1)."""
    from jaxdrive.data.scene_json import write_scene

    _, (scene,) = _scenes(count=1)
    for folder in ("a", "b"):
        (tmp_path / "scenes" / folder).mkdir(parents=True)
        write_scene(scene, tmp_path / "scenes" / folder / "s.json")
    np.save(tmp_path / "v.npy", _vocab(8))
    out = tmp_path / "run"
    assert main(["vocab", "--vocabulary", str(tmp_path / "v.npy"), "--scenes", str(tmp_path / "scenes"), "--out",
                 str(out), "--reference", "first-proposal", "--chunk", "8", "--export", "gtrs", "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "already scored in this run" in err and str(tmp_path / "scenes" / "b" / "s.json") in err, err
    assert len(read_results(out)) == 8
    with open(out / "gtrs_8.pkl", "rb") as f:
        table = pickle.load(f)
    assert list(table) == [scene.id] and table[scene.id]["pdm_score"].shape == (8,)

    bad = dataclasses.replace(scene, extra={"reference": {"states": scene.proposal_states[0].tolist()}})
    bad.extra["reference"]["states"][7][0] = float("nan")
    with pytest.raises(ValueError, match=r"reference.states: expected finite values"):
        reference_states(bad)


def test_bad_inputs_are_usage_errors(tmp_path, capsys):
    np.save(tmp_path / "bad.npy", np.zeros((4, 8, 3)))
    assert main(["vocab", "--vocabulary", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "o"), "--count", "1",
                 "--no-progress"]) == 2
    assert "--vocabulary" in capsys.readouterr().err
    np.save(tmp_path / "v.npy", _vocab(4))
    # synthetic scenes carry no PDM-Closed reference: reported by name, the run finishes (exit 3)
    assert main(["vocab", "--vocabulary", str(tmp_path / "v.npy"), "--out", str(tmp_path / "o2"), "--count", "1",
                 "--no-progress", "--chunk", "8", "--export", "gtrs"]) == 3
    assert "no reference trajectory" in capsys.readouterr().err
    with open(tmp_path / "o2" / "gtrs_4.pkl", "rb") as f:  # nothing scored: an empty table (it was a traceback)
        assert pickle.load(f) == {}
    (tmp_path / "empty.npy").write_bytes(b"")
    np.savez(tmp_path / "v.npz", vocab=_vocab(4))
    for path, says in ((tmp_path / "empty.npy", "cannot read a .npy array"), (tmp_path / "v.npz", ".npz archive")):
        assert main(["vocab", "--vocabulary", str(path), "--out", str(tmp_path / "o3"), "--count", "1",
                     "--no-progress"]) == 2
        assert says in capsys.readouterr().err



@pytest.mark.parametrize("mangle,says", [
    (lambda v: v * np.array([1.0, 1.0, 180.0 / np.pi]), r"heading .* exceeds 2π: expected radians"),
    (lambda v: v + np.array([664000.0, 3997000.0, 0.0]),
     r"[0-9.e+]+ m/s into \(trajectory, pose\) \(\d+, 0\).*ego rear-axle"),
    (lambda v: v * np.array([100.0, 100.0, 1.0]), r"[0-9.e+]+ m/s into .*other units"),
    (lambda v: np.concatenate([v[:, 4::5]] * 5, axis=1), r"[0-9.e+]+ m/s into .*another sampling"),
])
def test_vocabulary_in_another_frame_or_units_is_named(tmp_path, capsys, mangle, says):
    """A vocabulary in degrees, in a global (UTM) frame, in centimetres or at 0.5 s steps was scored silently (every
    trajectory far off the road or spinning): the CLI now refuses it, naming --vocabulary and the worst entry."""
    from jaxdrive.vocab.core import check_vocabulary

    good = _vocab(6)
    assert check_vocabulary(good).shape == (6, 40, 3)
    assert check_vocabulary(build_vocabulary(4, 16, seed=1)).shape == (4, 40, 3)
    with pytest.raises(ValueError, match="--vocabulary: " + says):
        check_vocabulary(mangle(good))
    np.save(tmp_path / "bad.npy", mangle(good))
    assert main(["vocab", "--vocabulary", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "o"), "--count", "1",
                 "--no-progress"]) == 2
    assert "--vocabulary" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()

def test_vocab_scenes_that_are_no_folder_of_scene_files_name_the_flag(tmp_path, capsys, monkeypatch):
    """``--scenes`` naming a missing folder or a file said "PATH: not a directory" (no flag); a scene store (what
    ``scenes from-navsim --store`` writes) said "no *.json scene files found"; a NaN in the vocabulary was located as
    "(np.int64(2), np.int64(5), np.int64(1))"; Ctrl-C said "interrupted" without how to continue."""
    np.save(tmp_path / "v.npy", _vocab(2))
    assert main(["scenes", "generate", "--count", "1", "--num-proposals", "1", "--store",
                 "--out", str(tmp_path / "store")]) == 0
    capsys.readouterr()
    for scenes, says in ((tmp_path / "nowhere", "not a directory"), (tmp_path / "v.npy", "not a directory"),
                         (tmp_path / "store", "is a scene store")):
        assert main(["vocab", "--vocabulary", str(tmp_path / "v.npy"), "--scenes", str(scenes),
                     "--out", str(tmp_path / "o"), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"--scenes {scenes}" in err and says in err, err
    bad = _vocab(3)
    bad[2, 5, 1] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    assert main(["vocab", "--vocabulary", str(tmp_path / "nan.npy"), "--out", str(tmp_path / "o"), "--count", "1",
                 "--no-progress"]) == 2
    assert "got NaN/inf at (trajectory, pose, field) (2, 5, 1)" in capsys.readouterr().err

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("jaxdrive.vocab.job.run_vocab", interrupted)
    assert main(["vocab", "--vocabulary", str(tmp_path / "v.npy"), "--out", str(tmp_path / "o"), "--count", "1",
                 "--reference", "first-proposal", "--no-progress"]) == 130
    assert f"--resume --out {tmp_path / 'o'}" in capsys.readouterr().err


def test_vocab_build_checks_its_flags_first_and_writes_the_file_named_whole(tmp_path, capsys, monkeypatch):
    """``vocab build``: ``--out DIR`` wrote ``DIR.npy`` and said "wrote DIR"; ``--out NAME`` (no suffix) wrote
    ``NAME.npy`` and said NAME, so ``vocab --vocabulary NAME`` failed; a folder below a file was a FileExistsError
    traceback after the clustering; ``--from-scenes 0`` said "cannot reshape array of size 0"; an interrupted write
    left a truncated .npy at ``--out``."""
    (tmp_path / "f").write_text("x")
    for scenes, out, says in (("4", tmp_path, f"--out {tmp_path}: is a directory"),
                              ("4", tmp_path / "f" / "v.npy", f"--out {tmp_path / 'f' / 'v.npy'}: "),
                              ("0", tmp_path / "v.npy", "--from-scenes: expected")):
        assert main(["vocab", "build", "--size", "2", "--from-scenes", scenes, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err
    assert not (tmp_path.parent / f"{tmp_path.name}.npy").exists() and not (tmp_path / "v.npy").exists()
    assert main(["vocab", "build", "--size", "2", "--from-scenes", "4", "--out", str(tmp_path / "plain")]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'plain'}: ")
    assert np.load(tmp_path / "plain").shape == (2, 40, 3) and not (tmp_path / "plain.npy").exists()

    def interrupted(file, arr, **kwargs):
        (open(file, "wb") if isinstance(file, (str, os.PathLike)) else file).write(b"\x93NUMPY")
        raise KeyboardInterrupt
    monkeypatch.setattr(np, "save", interrupted)
    assert main(["vocab", "build", "--size", "2", "--from-scenes", "4", "--out", str(tmp_path / "cut.npy")]) == 130
    assert list(tmp_path.glob("cut*")) == []


def test_kmeans_and_demo_vocabulary():
    pts = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    centres, labels = kmeans(pts, 2, seed=0)
    assert sorted(centres[:, 0].tolist()) == [0.0, 10.0] and len(set(labels[:5])) == len(set(labels[5:])) == 1
    vocab = build_vocabulary(6, 24, seed=3)
    assert vocab.shape == (6, 40, 3) and vocab.dtype == np.float32 and np.all(np.isfinite(vocab))
    assert np.all(np.abs(vocab[:, 0, :2]) < 5.0)  # 0.1 s after the ego pose
    assert np.all(np.abs(vocab[..., 2]) <= np.pi)


def test_vocab_synthetic_flags_with_scenes_are_refused(tmp_path, capsys):
    """``vocab --scenes DIR --count N`` (or ``--seed S``) ignored the synthetic-only flags silently; ``jaxdrive
    score`` refuses the same combination."""
    np.save(tmp_path / "v.npy", _vocab(2))
    (tmp_path / "scenes").mkdir()
    for extra, named in ((["--count", "3"], "--count"), (["--seed", "1"], "--seed"),
                         (["--count", "3", "--seed", "1"], "--count, --seed")):
        assert main(["vocab", "--vocabulary", str(tmp_path / "v.npy"), "--scenes", str(tmp_path / "scenes"),
                     "--out", str(tmp_path / "o"), "--no-progress", *extra]) == 2
        err = capsys.readouterr().err
        assert f"{named}: only for the built-in synthetic scenes; --scenes {tmp_path / 'scenes'}" in err, err
    assert not (tmp_path / "o").exists()


def test_vocab_build_checks_size_before_generating_trajectories(tmp_path, capsys, monkeypatch):
    """``vocab build --size K`` out of 1..--from-scenes was refused only after the synthetic human trajectories were
    generated (the slow part)."""
    def generated(*args, **kwargs):
        raise AssertionError("trajectories generated before --size was checked")
    monkeypatch.setattr("jaxdrive.vocab.build.human_trajectories", generated)
    for size in ("0", "5"):
        assert main(["vocab", "build", "--size", size, "--from-scenes", "4", "--out", str(tmp_path / "v.npy")]) == 2
        err = capsys.readouterr().err
        assert f"--size: expected 1..4 clusters (at most one per trajectory), got {size}" in err, err
