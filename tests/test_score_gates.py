"""``jaxdrive score --gates FILE``: one global vector, per-scene vectors and per-proposal rows, on the packed path.

The sub-score columns of a gated run are the ungated sub-scores, and ``epdms`` is DriveJudge's Eq. 14 of them under
each row's gates: checked against an obvious per-row loop. Gates of the wrong length, non-booleans, a scene without an
entry and a per-proposal list of the wrong length are one-line errors naming ``--gates`` (exit 2).
"""

from __future__ import annotations

import glob
import json
import math
import shutil

import numpy as np
import pytest

from jaxdrive.cli import EXIT_USAGE, main
from jaxdrive.data.scene_json import read_scene
from jaxdrive.metrics import GATES
from jaxdrive.scoring.outputs import read_results
from conftest import EPDMS_FIXTURES

FILES = sorted(glob.glob(f"{EPDMS_FIXTURES}/scene_*.json"))[:4]
WEIGHTS = {"ep": 5.0, "ttc": 5.0, "lk": 2.0, "hc": 2.0, "ec": 2.0}


def eq14(row, gates) -> float:
    """Eq. 14 for one row: product of the gated multipliers x gated weighted mean (a missing EC is gated off)."""
    on = dict(zip(GATES, gates))
    prod = math.prod(row[m] if on[m] else 1.0 for m in ("nc", "dac", "ddc", "tlc"))
    terms = [(w, row[m]) for m, w in WEIGHTS.items() if on[m] and not (m == "ec" and math.isnan(row[m]))]
    den = sum(w for w, _ in terms)
    return prod * (sum(w * v for w, v in terms) / den if den else 1.0)


@pytest.fixture(scope="module")
def scenes_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("scenes")
    for f in FILES:
        shutil.copy(f, d)
    return d


def run(scenes_dir, tmp_path, gates) -> tuple[int, object]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "gates.json"
    path.write_text(json.dumps(gates))
    out = tmp_path / "out"
    rc = main(["score", "--scenes", str(scenes_dir), "--gates", str(path), "--out", str(out), "--no-progress"])
    return rc, (read_results(out) if rc == 0 else None)


@pytest.mark.slow  # one compile (gates are traced arrays: both runs share it)
def test_global_per_scene_and_per_proposal_gates_follow_eq14(scenes_dir, tmp_path, capsys):
    rng = np.random.default_rng(0)
    scenes = [read_scene(f) for f in FILES]
    per = {"scene of another set": [True] * len(GATES)}  # not an error, but said (it was dropped silently)
    for i, s in enumerate(scenes):  # scenes 0, 2: one vector; 1, 3: one row per proposal
        per[s.id] = (rng.random(len(GATES)) < 0.6).tolist() if i % 2 == 0 else \
            (rng.random((s.num_proposals, len(GATES))) < 0.6).tolist()
    rc, rows = run(scenes_dir, tmp_path / "per", per)
    assert rc == 0 and len(rows) == sum(s.num_proposals for s in scenes)
    err = capsys.readouterr().err
    assert "--gates" in err and "1 of its 5 scene ids name no scene scored" in err and "another set" in err, err
    changed = 0
    for r in rows.itertuples():
        g = per[r.scene_id] if isinstance(per[r.scene_id][0], bool) else per[r.scene_id][r.proposal]
        row = r._asdict()
        assert r.epdms == pytest.approx(eq14(row, g), rel=1e-6, abs=1e-6), (r.scene_id, r.proposal, g)
        changed += not math.isclose(r.epdms, eq14(row, [True] * len(GATES)), rel_tol=1e-6, abs_tol=1e-6)
    assert changed > 0, "the random gates must change some scores"

    only_nc_and_ep = [m in ("nc", "ep") for m in GATES]
    rc, rows = run(scenes_dir, tmp_path / "global", only_nc_and_ep)
    assert rc == 0 and "name no scene scored" not in capsys.readouterr().err
    np.testing.assert_allclose(rows.epdms.to_numpy(), (rows.nc * rows.ep).to_numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("gates,needle", [
    ([True] * 8, "9 booleans"),
    ([1] * 9, "9 booleans"),
    ({"not-a-scene": [True] * 9}, "no entry for 4 of the run's 4 scenes"),
])
def test_bad_gates_are_one_line_errors(scenes_dir, tmp_path, capsys, gates, needle):
    rc, _ = run(scenes_dir, tmp_path, gates)
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and "--gates" in err and needle in err, err
    assert "Traceback" not in err
    # found before or during the run, a bad --gates leaves no run behind: the same --out takes the next command
    assert not (tmp_path / "out").exists()
    rc, _ = run(scenes_dir, tmp_path, gates)
    assert rc == EXIT_USAGE and "already holds a run" not in capsys.readouterr().err


def test_per_proposal_gates_of_the_wrong_length_are_refused(scenes_dir, tmp_path, capsys):
    scenes = [read_scene(f) for f in FILES]
    gates = {s.id: [[True] * 9] * (s.num_proposals + 1) for s in scenes}
    rc, _ = run(scenes_dir, tmp_path, gates)
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and "--gates" in err and "rows (one per proposal)" in err, err
    assert not (tmp_path / "out").exists()


def test_judge_gates_render_the_image_size_the_judge_was_trained_on(tmp_path, monkeypatch):
    """``--gates judge:DIR[,describe][,size=N]``: the judge sees BEV images of N pixels (default 64, the size of
    ``jaxdrive judge data``); it used to get ``BevConfig()``'s 96 whatever it was trained on (a judge trained on
    64-pixel images was shown another scale and another number of image tokens). Bad options name ``--gates``."""
    from jaxdrive.judge import policy, score_gates

    (tmp_path / "config.json").write_text("{}")
    seen = []
    monkeypatch.setattr(policy.DriveJudge, "from_pretrained", classmethod(lambda cls, path, **kw: seen.append(kw)))
    for spec, size, describe in ((f"judge:{tmp_path}", 64, False), (f"judge:{tmp_path},size=32", 32, False),
                                 (f"judge:{tmp_path},describe,size=128", 128, True)):
        assert score_gates.gates_from_judge(spec, [], None, progress=False) == {}
        assert seen[-1]["bev"].size == size and seen[-1]["describe"] is describe
    for bad in (",size=4", ",size=x", ",big"):
        with pytest.raises(ValueError, match="--gates"):
            score_gates.parse_spec(f"judge:{tmp_path}{bad}")


def test_scenes_missing_from_the_gates_are_named_before_anything_is_read_or_compiled(tmp_path, monkeypatch, capsys):
    """A per-scene --gates table without some of the run's scenes is refused up front, naming the first missing ids
    and how many there are. It used to stop at the first batch holding one: here the prescan reads batch 0 (whose
    scenes have gates), the scorer compiled, and the run stopped at batch 1; in a long run, perhaps hours in."""
    import jaxdrive.scoring.runner as runner

    monkeypatch.setattr(runner, "PRESCAN_SCENES", 0)
    monkeypatch.setattr(runner, "PRESCAN_BATCHES", 1)  # the prescan reads batch 0 alone
    monkeypatch.setattr(runner, "build_step", lambda *a, **k: pytest.fail("compiled before --gates was checked"))
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    files = sorted(glob.glob(f"{EPDMS_FIXTURES}/scene_*.json"))[:8]
    for f in files:
        shutil.copy(f, scenes)
    ids = [read_scene(f).id for f in files]
    gates = tmp_path / "gates.json"
    gates.write_text(json.dumps({sid: [True] * len(GATES) for sid in ids[:2]}))
    out = tmp_path / "out"
    rc = main(["score", "--scenes", str(scenes), "--gates", str(gates), "--out", str(out), "--batch-size", "2",
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and "--gates" in err and "no entry for 6 of the run's 8 scenes" in err, err
    assert all(repr(sid) in err for sid in ids[2:5]) and repr(ids[-1]) not in err, err
    assert not out.exists()


def test_scene_ids_are_known_before_the_scenes_are_read(tmp_path):
    """``SceneSource.scene_ids``: a scene file's id from its first bytes (``write_scene``'s key order) or else from the
    whole file, None for a file that is no scene (the run reports it); synthetic ids without generating a scene;
    with --proposals, None for a scene without an array (an error of the run, not a missing gate)."""
    from jaxdrive.scoring.proposal_files import SceneDirProposalSource
    from jaxdrive.scoring.sources import SceneDirSource, SyntheticSource

    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for f in FILES[:2]:
        shutil.copy(f, scenes)
    moved = json.loads(open(FILES[2]).read())  # "id" last: found by reading the whole file
    (scenes / "a_moved.json").write_text(json.dumps({**{k: v for k, v in moved.items() if k != "id"},
                                                     "id": moved["id"]}))
    (scenes / "b_broken.json").write_text('{"format": "epdms-scene/1", "ego": ')
    source = SceneDirSource(scenes)
    want = [read_scene(f).id for f in FILES[:2]]
    assert [f.name for f in source.files][:2] == ["a_moved.json", "b_broken.json"]
    assert source.scene_ids() == [moved["id"], None, *want]
    np.savez(tmp_path / "p.npz", **{want[0]: np.zeros((1, 41, 11))})
    assert SceneDirProposalSource(scenes, tmp_path / "p.npz").scene_ids() == [None, None, want[0], None]
    synthetic = SyntheticSource(3, seed=5, num_proposals=2)
    assert synthetic.scene_ids() == [synthetic.load(i).id for i in range(3)]


def _refused_rows(err: str, ids: list[str], expected: list[int], given: list[int], shown: int = 3) -> None:
    """``err`` is one up-front refusal naming --gates, the first ``shown`` scenes with their expected and given row
    counts, and how many more there are."""
    assert "--gates" in err and "Traceback" not in err, err
    assert f"{len(ids)} of the run's" in err, err
    for sid, k, rows in list(zip(ids, expected, given))[:shown]:
        assert f"{sid!r} (expected {k} rows, got {rows})" in err, err
    assert all(repr(sid) not in err for sid in ids[shown:]), err
    if len(ids) > shown:
        assert f"and {len(ids) - shown} more" in err, err


@pytest.mark.parametrize("kind", ["synthetic", "proposals npz"])
def test_per_proposal_rows_of_another_count_are_refused_before_anything_is_read_or_compiled(
        kind, scenes_dir, tmp_path, monkeypatch, capsys):
    """Per-proposal --gates rows whose count is not the scene's proposal count K are refused up front (exit 2) where
    K is known without reading the scenes: the synthetic scenes' --num-proposals, the arrays of --proposals P.npz.
    They used to stop the run at the first batch holding one, after the scorer compiled (perhaps hours in)."""
    import jaxdrive.data.synthetic as synthetic
    import jaxdrive.scoring.runner as runner
    from jaxdrive.scoring.sources import SceneDirSource

    monkeypatch.setattr(runner, "build_step", lambda *a, **k: pytest.fail("compiled before --gates rows were checked"))
    monkeypatch.setattr(synthetic, "generate_scene", lambda *a, **k: pytest.fail("a scene was generated"))
    monkeypatch.setattr(SceneDirSource, "read", lambda *a, **k: pytest.fail("a scene file was read"))
    out = tmp_path / "out"
    if kind == "synthetic":
        ids = [synthetic.scene_id(i) for i in range(5)]
        k = [3] * 5
        args = ["--count", "5", "--num-proposals", "3"]
    else:
        ids = [read_scene(f).id for f in FILES]
        k = [1, 2, 3, 2]
        np.savez(tmp_path / "p.npz", **{sid: np.tile(read_scene(f).proposal_states[:1], (n, 1, 1))
                                        for sid, f, n in zip(ids, FILES, k)})
        args = ["--scenes", str(scenes_dir), "--proposals", str(tmp_path / "p.npz")]
    given = [n + 1 for n in k]
    given[0] = k[0]  # scene 0's rows are right
    gates = tmp_path / "gates.json"
    gates.write_text(json.dumps({sid: [[True] * len(GATES)] * n for sid, n in zip(ids, given)}))
    rc = main(["score", *args, "--gates", str(gates), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE, err
    _refused_rows(err, ids[1:], k[1:], given[1:])
    assert not out.exists()  # no shard written, no run left behind


def _stand_in_step(seen: list):
    """A ``runner.build_step`` that compiles nothing: its step gives every proposal zero sub-scores and records the
    gates [B, K, 9] of each batch in ``seen`` (these tests are about which rows reach the step, not the scores)."""
    import dataclasses

    from jaxdrive.rules.epdms import SubScores

    def build(mesh, options, capacity, stats=None):
        def step(scene, proposals, gates, reference):
            seen.append(np.asarray(gates))
            b, k = np.shape(proposals.valid)
            return SubScores(**{f.name: np.zeros((b, k, 6) if f.name == "hc_checks" else (b, k))
                                for f in dataclasses.fields(SubScores)}), np.False_
        return step

    return build


def test_per_proposal_rows_of_the_right_count_still_score(tmp_path, monkeypatch, capsys):
    """The up-front row check lets a table of one row per proposal through: every scene is scored, each proposal
    under its own row."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.data.synthetic import scene_id

    seen = []
    monkeypatch.setattr(runner, "build_step", _stand_in_step(seen))
    ids = [scene_id(i) for i in range(2)]
    rows = {sid: [[m != "ep" or (j + k) % 2 == 0 for m in GATES] for k in range(3)] for j, sid in enumerate(ids)}
    (tmp_path / "gates.json").write_text(json.dumps(rows))
    out = tmp_path / "out"
    rc = main(["score", "--count", "2", "--num-proposals", "3", "--gates", str(tmp_path / "gates.json"),
               "--out", str(out), "--no-progress", "--batch-size", "2"])
    assert rc == 0, capsys.readouterr().err
    got = read_results(out)
    assert len(got) == 6 and list(got.scene_id.unique()) == ids
    (gates,) = seen
    for j, sid in enumerate(ids):
        np.testing.assert_array_equal(gates[j, :3], rows[sid])


def test_rows_of_another_count_in_scene_files_stop_the_run_there_and_resume_after_the_file_is_fixed(
        scenes_dir, tmp_path, monkeypatch, capsys):
    """Scene files' own proposals are counted only when a file is read (``SceneDirSource``): a per-proposal --gates
    entry of another row count stops the run at that scene (exit 2). The message names the scene and its file, and
    says what was kept: after the scene file is corrected, --resume scores the rest (a corrected --gates table is
    another run: its --resume is refused, as the message says)."""
    import jaxdrive.scoring.runner as runner

    monkeypatch.setattr(runner, "PRESCAN_SCENES", 0)
    monkeypatch.setattr(runner, "PRESCAN_BATCHES", 1)  # the prescan reads batch 0 alone
    monkeypatch.setattr(runner, "build_step", _stand_in_step([]))
    scenes = tmp_path / "scenes"
    shutil.copytree(scenes_dir, scenes)
    files = sorted(scenes.glob("*.json"))
    read = [read_scene(f) for f in files]
    table = {s.id: [[True] * len(GATES)] * s.num_proposals for s in read}
    table[read[2].id] = table[read[2].id][:-1]  # scene 2: one row short
    gates = tmp_path / "gates.json"
    gates.write_text(json.dumps(table))
    out = tmp_path / "out"
    command = ["score", "--scenes", str(scenes), "--gates", str(gates), "--out", str(out), "--no-progress",
               "--batch-size", "1", "--shard-size", "1"]
    assert main(command) == EXIT_USAGE
    err = capsys.readouterr().err
    k = read[2].num_proposals
    assert f"--gates: scene {read[2].id!r} ({files[2]}): expected {k} rows (one per proposal), got {k - 1}" in err
    assert "stopped" in err and f"2 shard(s) completed before it are kept in {out}" in err and "--resume" in err, err
    assert sorted(p.name for p in out.glob("part-*.parquet")) == ["part-00000.parquet", "part-00001.parquet"]

    fixed_table = tmp_path / "fixed.json"
    fixed_table.write_text(json.dumps({**table, read[2].id: [[True] * len(GATES)] * k}))
    assert main([*command[:4], str(fixed_table), *command[5:], "--resume"]) == EXIT_USAGE
    assert "differs in: gates" in capsys.readouterr().err

    scene = json.loads(files[2].read_text())
    scene["proposals"] = scene["proposals"][:-1]  # the file corrected to the table's rows
    files[2].write_text(json.dumps(scene))
    assert main([*command, "--resume"]) == 0, capsys.readouterr().err
    got = read_results(out)
    assert len(got) == sum(s.num_proposals for s in read) - 1 and got.scene_id.nunique() == 4
