"""Issue 12's review findings, each with a test that fails on the old behaviour (no scoring, no compile):

* a malformed value (``"height": "tall"``, a boolean where a number belongs) is a ``SceneFileError`` naming the file
  and key (the runner then writes it to errors.jsonl by name: ``test_score_store``);
* the manifest identity holds the batch size when ``--ep-mode batch`` makes results depend on it;
* a NaN, non-numeric or misplaced ``--reference-progress`` is a usage error naming the flag and the scene;
* ``gated_score`` leaves the weighted average only for a missing EC; a NaN elsewhere surfaces as NaN;
* scene validation rejects partial track rows, lights on lanes or areas that are not connectors, duplicate ids,
  non-finite velocities, out-of-range headings;
* ``parallel`` fails on an unknown logical axis and warns when a dimension does not divide;
* the one-module constants and the metric registry agree with the rule code.
"""

from __future__ import annotations

import copy
import glob
import json

import jax.numpy as jnp
import numpy as np
import pytest

from jaxdrive.cli import EXIT_USAGE, main
from jaxdrive.data.scene_json import SceneFileError, read_scene, scene_from_dict
from jaxdrive.rules.epdms import SubScores, gated_score
from jaxdrive.scene import LaneKind, SceneValidationError, validate_host_scene
from jaxdrive.scoring.outputs import RunDir, RunDirError
from jaxdrive.scoring.runner import ScoreOptions
from conftest import EPDMS_FIXTURES

FILE = sorted(glob.glob(f"{EPDMS_FIXTURES}/*.json"))[0]


def _raw() -> dict:
    return json.loads(open(FILE).read())


@pytest.mark.parametrize("edit, key", [
    (lambda d: d["agents"][0].__setitem__("height", "tall"), "agents[0].height"),
    (lambda d: d["agents"][0].__setitem__("length", True), "agents[0].length"),
    (lambda d: d["proposals"][0]["states"][3].__setitem__(2, True), "proposals[0].states"),
])
def test_malformed_values_are_named(edit, key):
    d = _raw()
    edit(d)
    with pytest.raises(SceneFileError, match=key.replace("[", r"\[").replace("]", r"\]")):
        scene_from_dict(d, source="bad.json")


def test_manifest_identity_holds_batch_composition(tmp_path):
    a = ScoreOptions(ep_mode="batch", batch_size=8).identity()
    b = ScoreOptions(ep_mode="batch", batch_size=16).identity()
    assert a != b
    assert ScoreOptions(batch_size=8).identity() == ScoreOptions(batch_size=16).identity()  # per-scene EP: no effect
    RunDir(tmp_path, a, resume=False)
    with pytest.raises(RunDirError, match="batch_size"):
        RunDir(tmp_path, b, resume=True)


def test_scene_folders_skip_the_json_of_stores_and_runs_inside_them(tmp_path):
    """``jaxdrive score --scenes DIR`` searches DIR recursively: the JSON metadata of a scene store converted into a
    subfolder (``jaxdrive_store.json``, ``features.json``, ...) and of a scoring run written there (manifest,
    gate table) are not scenes, and are listed as skipped rather than reported unreadable."""
    from jaxdrive.data.scene_json import scene_files, write_scene
    from jaxdrive.scoring.sources import SceneDirSource

    for i, f in enumerate(sorted(glob.glob(f"{EPDMS_FIXTURES}/*.json"))[:2]):
        (tmp_path / "a").mkdir(exist_ok=True)
        write_scene(read_scene(f), tmp_path / "a" / f"s{i}.json")
    store, run = tmp_path / "store", tmp_path / "runs" / "r1"
    for folder, names in ((store, ["jaxdrive_store.json", "features.json", "dataset_info.json"]),
                          (store / "padded", ["x.json"]),
                          (run, ["manifest.json", "judge_gates.json"])):
        folder.mkdir(parents=True)
        for name in names:
            (folder / name).write_text("{}")
    (run / "errors.jsonl").write_text("")
    (tmp_path / "index.json").write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in scene_files(tmp_path)] == ["a/s0.json", "a/s1.json"]
    assert SceneDirSource(tmp_path).skipped == ["index.json", "runs/r1/judge_gates.json", "runs/r1/manifest.json",
                                                "store/dataset_info.json", "store/features.json",
                                                "store/jaxdrive_store.json", "store/padded/x.json"]
    (run / "errors.jsonl").unlink()  # a manifest.json alone may be a user's scene file name
    assert "runs/r1/manifest.json" in [p.relative_to(tmp_path).as_posix() for p in scene_files(tmp_path)]


def test_options_that_would_be_ignored_are_usage_errors(tmp_path, capsys):
    """``--reference-progress`` without ``--ep-mode reference`` (it was read, recorded and ignored), and
    ``--proposals`` with a scene store (it was read as a JSON folder: every store file "unreadable")."""
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"scene-x": 30.0}))
    rc = main(["score", "--scenes", str(EPDMS_FIXTURES), "--reference-progress", str(ref), "--out",
               str(tmp_path / "o1"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and "--reference-progress" in err and "--ep-mode reference" in err, err
    store = tmp_path / "store"
    store.mkdir()
    (store / "jaxdrive_store.json").write_text("{}")
    rc = main(["score", "--scenes", str(store), "--proposals", str(tmp_path / "p.npz"), "--out", str(tmp_path / "o2"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and "--proposals" in err and "scene store" in err, err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_values_that_were_taken_silently(tmp_path, capsys):
    """Float gates in the Python API (DriveJudge probabilities passed as gates were cast to bool: 0.3 -> on), a
    non-positive ``scenes preview --extent`` (a mirrored picture), ``--resume`` into a directory without a run
    (said nothing: a mistyped --out restarted from scratch silently)."""
    import jaxdrive
    from jaxdrive.scene import batch_scenes

    sc, pr, _ = batch_scenes([read_scene(FILE)])
    with pytest.raises(ValueError, match="gates: expected booleans"):
        jaxdrive.score(sc, pr, gates=jnp.full(9, 0.5))
    assert main(["scenes", "preview", "--extent", "-5", "--out", str(tmp_path / "p.png")]) == EXIT_USAGE
    assert "--extent" in capsys.readouterr().err and not (tmp_path / "p.png").exists()
    rc = main(["score", "--count", "1", "--batch-size", "0", "--resume", "--out", str(tmp_path / "new")])
    assert rc == EXIT_USAGE and "holds no run yet" in capsys.readouterr().err


def test_large_gate_tables_enter_the_manifest_as_a_digest(tmp_path):
    """The manifest is rewritten after every shard: a judge's per-proposal gate table (3,000 scenes x 16 x 9 here,
    ~5 MB of JSON before) and a large reference map are stored as their SHA-256, which still tells a changed table
    on resume; a global vector and small tables stay readable."""
    table = {f"syn_default_{i}": [[True] * 9] * 16 for i in range(3000)}
    ident = ScoreOptions(gates=table).identity()
    assert set(ident["gates"]) == {"sha256", "json_bytes"} and ident["gates"]["json_bytes"] > 1_000_000
    RunDir(tmp_path, ident, resume=False)
    assert (tmp_path / "manifest.json").stat().st_size < 4096
    RunDir(tmp_path, ScoreOptions(gates=dict(table)).identity(), resume=True)  # the same table: resumes
    changed = dict(table, syn_default_7=[[True] * 8 + [False]] * 16)
    with pytest.raises(RunDirError, match="gates"):
        RunDir(tmp_path, ScoreOptions(gates=changed).identity(), resume=True)
    reference = {f"s{i}": float(i) for i in range(1000)}
    assert set(ScoreOptions(ep_mode="reference", reference_progress=reference).identity()["reference_progress"]) == \
        {"sha256", "json_bytes"}
    assert ScoreOptions(gates=np.ones(9, bool)).identity()["gates"] == [True] * 9
    assert ScoreOptions(gates={"a": [True] * 9}).identity()["gates"] == {"a": [True] * 9}
    with pytest.raises(ValueError, match=r"got \[\[1, 2\]") as err:
        ScoreOptions(gates={"a": [[1, 2]] * 100_000}).validate()
    assert len(str(err.value)) < 600  # not the whole value echoed


@pytest.mark.parametrize("value, what", [(float("nan"), "nan"), ("far", "far"), (True, "True"), (-5.0, "-5.0"),
                                         # beyond float64: an OverflowError traceback before
                                         pytest.param(10**400, "1000", id="int-beyond-float64")])
def test_bad_reference_progress_names_flag_and_scene(tmp_path, capsys, value, what):
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"scene-x": value}, allow_nan=True))
    rc = main(["score", "--scenes", str(EPDMS_FIXTURES), "--ep-mode", "reference", "--reference-progress", str(ref),
               "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and "--reference-progress" in err and "scene-x" in err and what in err, err
    ref.write_text("[1, 2]")
    assert main(["score", "--scenes", str(EPDMS_FIXTURES), "--ep-mode", "reference", "--reference-progress",
                 str(ref), "--out", str(tmp_path / "out2"), "--no-progress"]) == EXIT_USAGE


def test_gated_score_only_drops_a_missing_ec():
    base = {name: jnp.ones((2,)) for name in SubScores.__dataclass_fields__}
    base.update(hc_checks=jnp.ones((2, 6), bool), **{n: jnp.full((2,), -1) for n in SubScores.__dataclass_fields__
                                                     if n.endswith("_step")})
    s = SubScores(**base).replace(ec=jnp.array([jnp.nan, 1.0]), ep=jnp.array([0.5, jnp.nan]))
    got = np.asarray(gated_score(s))
    np.testing.assert_allclose(got[0], (5 * 0.5 + 5 + 2 + 2) / 14, rtol=1e-6)  # EC missing: /14
    assert np.isnan(got[1])  # a NaN EP is a bug upstream: it must not be averaged away


def _scene():
    return read_scene(FILE)


def _reject(scene, match):
    with pytest.raises(SceneValidationError, match=match):
        validate_host_scene(scene)


def test_scene_validation_rejections():
    s = _scene()
    s.agents[0].track = s.agents[0].track.copy()
    s.agents[0].track[5, 2] = np.nan  # heading missing, position present
    _reject(s, r"agents\[0\]\.track\[5\]")
    s = _scene()
    s.agents[0].track = s.agents[0].track.copy()
    row = np.flatnonzero(~np.isnan(s.agents[0].track).any(1))[0]
    s.agents[0].track[row, 3] = np.inf
    _reject(s, r"agents\[0\]\.track")
    s = _scene()
    s.agents[0].track = s.agents[0].track.copy()
    s.agents[0].track[row, 2] = 7.0
    _reject(s, "heading")
    s = _scene()
    s.agents.append(copy.deepcopy(s.agents[0]))
    _reject(s, "unique agent ids")
    s = _scene()
    s.areas.append(copy.deepcopy(s.areas[0]))
    _reject(s, "unique area ids")
    s = _scene()
    lane = next(l for l in s.lanes if l.kind == LaneKind.LANE)
    s.traffic_lights = {lane.id: "R" * 41}
    _reject(s, "not a connector")
    s = _scene()
    s.traffic_lights = {s.areas[0].id: "R" * 41}
    _reject(s, "drivable area")


def test_parallel_unknown_axis_fails_and_non_dividing_dimension_warns():
    from jaxdrive.parallel import logical_to_spec, make_mesh, named_sharding

    with pytest.raises(ValueError, match="'embedd'"):
        logical_to_spec(("embedd",))
    with pytest.warns(UserWarning, match="not divisible by mesh axis 'fsdp'"):
        named_sharding(("embed",), (7,), make_mesh(1, 2, 1))


def test_constants_and_metric_registry_agree_with_the_rules():
    from jaxdrive import constants as C, metrics
    from jaxdrive.broadphase import CENTERLINE_REACH_M, TTC_HORIZON_S, TTC_STEPS
    from jaxdrive.rules import epdms, lk, ttc

    assert TTC_STEPS == ttc.LAST_EGO_STEP + 1 and ttc.OFFSETS[-1] * C.DT == TTC_HORIZON_S
    assert CENTERLINE_REACH_M >= lk.DEVIATION_M
    assert epdms.METRICS == metrics.GATES and set(epdms.WEIGHTS) | set(epdms.MULTIPLIERS) == set(metrics.GATES)
    assert set(metrics.STEPS) == {f for f in SubScores.__dataclass_fields__ if f.endswith("_step")}


def _bad_proposals(kind: str) -> np.ndarray:
    a = np.zeros((3, 41, 11))
    if kind == "shape":
        return a[:, :40]
    if kind == "dtype":
        return a.astype(np.int64)
    if kind == "nan":
        a[1, 5, 0] = np.nan
    if kind == "degrees":  # a planner writing [0, 2 pi) or degrees: NAVSIM's states hold wrapped radians
        a[2, 7, 2] = 4.0
    return a


@pytest.mark.parametrize("kind,needle", [
    ("shape", r"expected shape \[K >= 1, 41, 11\], got \[3, 40, 11\]"), ("dtype", "expected floats, got dtype int64"),
    ("nan", r"expected finite values, got nan at \(1, 5, 0\)"),
    ("degrees", r"expected headings in radians in \(-pi, pi\], got 4.0000 at proposal 2, step 7")])
def test_proposal_file_arrays_are_checked_naming_the_key(tmp_path, kind, needle):
    """Each bad array of P.npz is an error naming the file, the key and what is wrong; headings out of (-pi, pi] are
    refused as in scene files (they were scored as given)."""
    from jaxdrive.scoring.proposal_files import load_proposal_npz

    np.savez(tmp_path / "p.npz", ok=np.zeros((1, 41, 11)), s1=_bad_proposals(kind))
    with pytest.raises(ValueError, match=rf"--proposals {tmp_path / 'p.npz'}: array 's1': {needle}"):
        load_proposal_npz(tmp_path / "p.npz")


def test_a_single_npy_given_as_proposals_is_a_usage_error(tmp_path, capsys):
    """``--proposals P.npy`` (one array, not an .npz of one array per scene id) was a TypeError traceback (exit 1):
    "'numpy.ndarray' object does not support the context manager protocol"; an empty file an EOFError traceback."""
    scenes = tmp_path / "scenes"
    assert main(["scenes", "generate", "--count", "1", "--num-proposals", "2", "--out", str(scenes)]) == 0
    np.save(tmp_path / "p.npy", np.zeros((2, 41, 11)))
    (tmp_path / "empty.npz").write_bytes(b"")  # an EOFError traceback too
    (tmp_path / "p.json").write_text('{"s": []}')  # said "Cannot load file containing pickled data when allow_pickle=False"
    for name, says in (("empty.npz", "cannot read an .npz"), ("p.npy", "np.savez"),
                       ("p.json", "(not an .npz file (a zip of .npy arrays, as np.savez writes); it starts with b'{\"s\": ')")):
        assert main(["score", "--scenes", str(scenes), "--proposals", str(tmp_path / name), "--out",
                     str(tmp_path / "o"), "--no-progress"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"--proposals {tmp_path / name}: " in err and says in err and "Traceback" not in err, err


def test_proposal_file_source_names_bad_files_and_missing_ids(tmp_path):
    """`score --scenes DIR --proposals P.npz` reads the directory as `--scenes DIR` does (same recursive listing, same
    per-file errors) and takes each scene's proposals from its array; a malformed file and a scene id without an array
    are each a SourceError naming the file, not an abort."""
    from jaxdrive.scoring.proposal_files import SceneDirProposalSource
    from jaxdrive.scoring.sources import SourceError

    files = sorted(glob.glob(f"{EPDMS_FIXTURES}/*.json"))[:3]
    good, no_array, bad = (json.loads(open(f).read()) for f in files)
    bad["agents"][0]["height"] = "tall"
    (tmp_path / "sub").mkdir()
    for name, d in (("a.json", good), ("b.json", no_array), ("sub/c.json", bad)):
        (tmp_path / name).write_text(json.dumps(d))
    states = read_scene(files[0]).proposal_states[:2]
    np.savez(tmp_path / "p.npz", **{good["id"]: states, bad["id"]: states})
    source = SceneDirProposalSource(tmp_path, tmp_path / "p.npz")
    assert len(source) == 3
    scene = source.load(0)
    np.testing.assert_array_equal(scene.proposal_states, states)
    assert scene.proposal_names == ["p0", "p1"] and scene.previous_states is None
    missing, malformed = source.load(1), source.load(2)
    assert isinstance(missing, SourceError) and "b.json" in missing.name and "no array" in missing.message
    assert isinstance(malformed, SourceError) and "c.json" in malformed.name and "height" in malformed.message
    described = source.describe()
    assert described["kind"] == "scene_dir+proposals" and described["files"] == ["a.json", "b.json", "sub/c.json"]
