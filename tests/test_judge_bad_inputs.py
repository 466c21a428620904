"""Malformed DriveJudge inputs to ``jaxdrive judge data|baselines|run`` are usage errors (exit 2) naming the file,
line or record, and field, reported before anything runs: never a traceback, a silently wrong result, or a run
that fails only at its end. ``judge run`` reads its inputs before it loads the model, so a directory with a
``config.json`` stands in for one here."""
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from jaxdrive.cli import EXIT_USAGE, main
from jaxdrive.judge.dataset import SUBSCORE_KEYS
from jaxdrive.judge.gates import RULE_LABELS


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A valid hand-made set (docs/drivejudge-data.md): one train and one test scene of 4 proposals, two records and
    a pair each, 8-pixel images, meta.json."""
    from jaxdrive.data.scene_json import write_scene
    from jaxdrive.data.synthetic import generate_scene

    root = tmp_path_factory.mktemp("judge_bad_inputs") / "data"
    (root / "scenes").mkdir(parents=True)
    (root / "images").mkdir()
    records, pairs = [], []
    for s, split in ((1, "train"), (2, "test")):
        scene = generate_scene(s, num_proposals=4)
        write_scene(scene, root / "scenes" / f"{scene.id}.json")
        for k in (0, 3):
            rid = f"{scene.id}_p{k}"
            Image.new("RGB", (8, 8), (40 * k, 60, 20 * s)).save(root / "images" / f"{rid}.png")
            records.append({"id": rid, "scene": f"scenes/{scene.id}.json", "proposal": k,
                            "proposal_name": scene.proposal_names[k], "label": int(k == 0), "split": split,
                            "image": f"images/{rid}.png", "subscores": {m: 1.0 - k / 10 for m in SUBSCORE_KEYS},
                            "gates": {g: int(k == 0 or g != "NC") for g in RULE_LABELS}})
        pairs.append({"id": f"{scene.id}_pair", "scene": f"scenes/{scene.id}.json", "a": 3, "b": 0,
                      "preferred": "b", "split": split, "a_record": f"{scene.id}_p3", "b_record": f"{scene.id}_p0"})
    _write(root / "records.jsonl", records)
    _write(root / "pairs.jsonl", pairs)
    (root / "meta.json").write_text(json.dumps({"image_size": 8}))
    model = root.parent / "model"  # judge run stops at its inputs before it loads a model
    model.mkdir()
    (model / "config.json").write_text("{}")
    return root


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _test_record(**fields):
    """Sets fields of the first test record (records.jsonl line 3)."""
    def edit(root):
        rows = _rows(root / "records.jsonl")
        rows[2].update(fields)
        _write(root / "records.jsonl", rows)
    return edit


def _test_pair(**fields):
    def edit(root):
        rows = _rows(root / "pairs.jsonl")
        rows[1].update(fields)
        _write(root / "pairs.jsonl", rows)
    return edit


def _nested(field, key, value):
    def edit(root):
        rows = _rows(root / "records.jsonl")
        if value is None and field == "gates":
            rows[2][field] = {}
        else:
            rows[2][field][key] = value
        _write(root / "records.jsonl", rows)
    return edit


def _text(name, text):
    return lambda root: (root / name).write_text(text)


def _duplicate_id(root):
    rows = _rows(root / "records.jsonl")
    rows[3]["id"] = rows[2]["id"]
    _write(root / "records.jsonl", rows)


def _broken_copy(source, tmp_path, edit):
    root = tmp_path / "data"
    shutil.copytree(source, root)
    edit(root)
    return root


def _usage_error(argv, capsys, *needles) -> str:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_the_valid_set_makes_every_baseline(source, tmp_path, capsys):
    assert main(["judge", "baselines", "--data", str(source), "--out", str(tmp_path / "out")]) == 0
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"test_dqc_epdms.parquet", "test_dqc_logreg.parquet", "test_tps_ade.parquet",
            "test_tps_oracle.parquet"} <= names


def test_baselines_leave_no_file_of_an_earlier_run(source, tmp_path, capsys):
    """Re-run on a set without a train split (regenerated with --train 0), `judge baselines` wrote no logreg files
    and left the earlier set's test_*_logreg*.parquet beside its own: `jaxdrive eval tps --predictions
    DIR/test_tps_*.parquet` (docs/drivejudge-data.md) reported them without a word."""
    out = tmp_path / "out"
    assert main(["judge", "baselines", "--data", str(source), "--out", str(out)]) == 0
    assert (out / "test_tps_logreg.parquet").exists()
    (out / "train_dqc_epdms.parquet").write_text("another split's")
    root = _broken_copy(source, tmp_path, lambda root: _write(root / "records.jsonl", [
        r for r in _rows(root / "records.jsonl") if r["split"] == "test"]))
    _write(root / "pairs.jsonl", [p for p in _rows(root / "pairs.jsonl") if p["split"] == "test"])
    assert main(["judge", "baselines", "--data", str(root), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"test_dqc_{m}.parquet" for m in ("epdms", "oracle")] +
        [f"test_tps_{m}.parquet" for m in ("epdms", "oracle", "ade", "fde")] + ["train_dqc_epdms.parquet"])


# what records.jsonl / pairs.jsonl say, refused by every reader: before, a traceback ("int" line, index out of range),
# pyarrow's words naming no file (bool label), or a result from a wrong value (string index, NaN, "yes" gate, a
# second record of the same id, a pair naming no record) without a word
BAD_LINES = [
    ("line_not_an_object", _text("records.jsonl", "5\n"), "records.jsonl:1: expected a JSON object, got int"),
    ("bool_label", _test_record(label=True), "records.jsonl:3: label: expected 0 or 1 (1 = reasonable), got True"),
    ("string_proposal", _test_record(proposal="3"), "records.jsonl:3: proposal: expected a proposal index"),
    ("null_scene", _test_record(scene=None), "records.jsonl:3: scene: expected a string, got None"),
    ("nan_subscore", _nested("subscores", "epdms", float("nan")),
     "records.jsonl:3: subscores: epdms: expected a finite number or null, got nan"),
    ("huge_int_subscore", _nested("subscores", "epdms", 10**400),  # beyond float64: numpy's TypeError before
     "records.jsonl:3: subscores: epdms: expected a finite number or null, got 1000"),
    ("percent_subscore", _nested("subscores", "nc", 95.0),  # the oracle's gated score was 1e8, exit 0
     "records.jsonl:3: subscores: nc: expected a score in [0, 1], got 95.0"),
    ("negative_subscore", _nested("subscores", "ep", -0.5), "records.jsonl:3: subscores: ep: expected a score in"),
    ("string_gate", _nested("gates", "NC", "yes"), "records.jsonl:3: gates: NC: expected 0 or 1"),
    ("duplicate_id", _duplicate_id, "records.jsonl:4: field 'id': 'syn_default_2_p0' is already the id of line 3"),
    ("pair_names_no_record", _test_pair(a_record="nope"),
     "pairs.jsonl pair 'syn_default_2_pair': field 'a_record': no record 'nope' in records.jsonl"),
    ("pair_record_of_another_trajectory", _test_pair(a=1),
     "field 'a_record': record 'syn_default_2_p3' is proposal 3 of scenes/syn_default_2.json (test), the pair's is "
     "proposal 1"),
    ("pair_index_out_of_range", _test_pair(a=9, a_record="", b_record=""),
     "pairs.jsonl pair 'syn_default_2_pair': field 'a': proposal 9 out of range (scene scenes/syn_default_2.json "
     "has 4)"),
    ("string_pair_index", _test_pair(b="0"), "pairs.jsonl:2: b: expected a proposal index"),
]


@pytest.mark.parametrize("edit,needle", [c[1:] for c in BAD_LINES], ids=[c[0] for c in BAD_LINES])
def test_malformed_records_and_pairs_are_named(source, tmp_path, capsys, edit, needle):
    root = _broken_copy(source, tmp_path, edit)
    _usage_error(["judge", "baselines", "--data", str(root), "--out", str(tmp_path / "out")], capsys, needle)
    assert not (tmp_path / "out").exists()


# what the rule-based baselines read: before, a KeyError traceback (no gates, no sub-scores), a NaN score without a
# word (a sub-score missing) or a FileNotFoundError traceback (the classifiers' images)
BASELINE_FIELDS = [
    ("no_gates", _nested("gates", None, None), "record 'syn_default_2_p0': field 'gates': empty"),
    ("subscore_missing", _nested("subscores", "nc", None),
     "record 'syn_default_2_p0': field 'subscores': no value for ['nc']"),
    ("image_missing", _test_record(image="images/nope.png"),
     "record 'syn_default_2_p0': field 'image': file 'images/nope.png' not found"),
    # PIL's UnidentifiedImageError / "image file is truncated" tracebacks, naming no record
    ("image_not_an_image", _text("images/syn_default_2_p0.png", "not a PNG"),
     "record 'syn_default_2_p0': field 'image': ", "syn_default_2_p0.png: not a readable image (cannot identify"),
    ("image_cut_short", lambda root: (root / "images/syn_default_2_p0.png").write_bytes(
        (root / "images/syn_default_2_p0.png").read_bytes()[:50]),  # in its IDAT chunk
     "record 'syn_default_2_p0': field 'image': ", "syn_default_2_p0.png: not a readable image ("),
]


@pytest.mark.parametrize("edit,needle", [(c[1], c[2:]) for c in BASELINE_FIELDS], ids=[c[0] for c in BASELINE_FIELDS])
def test_baselines_name_the_record_missing_what_they_read(source, tmp_path, capsys, edit, needle):
    root = _broken_copy(source, tmp_path, edit)
    _usage_error(["judge", "baselines", "--data", str(root), "--out", str(tmp_path / "out")], capsys,
                 f"{root / 'records.jsonl'} {needle[0]}", *needle[1:])
    assert not any((tmp_path / "out").glob("*.parquet"))


# the scene a record names, checked before the model loads: before, read from outside the set ('..', absolute) or
# with another trajectory than the record's (a proposal_name the scene contradicts) without a word, or a message
# naming no record (a missing file, an index out of range)
SCENE_REFS = [
    ("dotdot_scene", _test_record(scene="../data/scenes/syn_default_2.json"),
     "field 'scene': '../data/scenes/syn_default_2.json' is not a path inside the source directory"),
    ("absolute_scene", lambda root: _test_record(scene=str(root / "scenes" / "syn_default_2.json"))(root),
     "field 'scene': '/", "syn_default_2.json' is not a path inside the source directory"),
    ("missing_scene", _test_record(scene="scenes/nope.json"), "field 'scene': "),
    # the report embedded any PNG a record named, wherever it was
    ("dotdot_image", _test_record(image="../elsewhere.png"),
     "field 'image': '../elsewhere.png' is not a path inside the source directory"),
    ("proposal_out_of_range", _test_record(proposal=7),
     "field 'proposal': proposal 7 out of range (scene scenes/syn_default_2.json has 4)"),
    ("proposal_name_contradicted", _test_record(proposal_name="not_this_one"),
     "field 'proposal_name': 'not_this_one' but proposal 0 of scenes/syn_default_2.json is"),
]


@pytest.mark.parametrize("edit,needle", [(c[1], c[2:]) for c in SCENE_REFS], ids=[c[0] for c in SCENE_REFS])
def test_judge_run_checks_the_scenes_records_name(source, tmp_path, capsys, edit, needle):
    root = _broken_copy(source, tmp_path, edit)
    _usage_error(["judge", "run", "--model", str(source.parent / "model"), "--data", str(root), "--out",
                  str(tmp_path / "out"), "--no-progress"], capsys,
                 f"{root / 'records.jsonl'} record 'syn_default_2_p0': {needle[0]}", *needle[1:])
    assert not (tmp_path / "out").exists()


# meta.json: before, json's words naming no file, a KeyError / AttributeError traceback, int()'s words
BAD_META = [
    ("not_json", "{", "meta.json: cannot read JSON"),
    ("not_an_object", "[8]", "meta.json: expected a JSON object, got list"),
    ("thresholds_incomplete", json.dumps({"thresholds": {"LK": 0.5}}),
     "meta.json: thresholds: expected a finite number"),
    # a NaN threshold made every check of its rule False; 1e39 was inf in float32; 400 digits an OverflowError
    *[(f"threshold_{name}", json.dumps({"thresholds": {r: (v if r == "NC" else 0.5) for r in RULE_LABELS}}),
       "meta.json: thresholds: expected a finite number") for name, v in
      (("nan", float("nan")), ("beyond_float32", 1e39), ("integer_beyond_float64", 10**400))],
    ("image_size_text", json.dumps({"image_size": "big"}), "meta.json: image_size: expected a positive integer"),
]


@pytest.mark.parametrize("text,needle", [c[1:] for c in BAD_META], ids=[c[0] for c in BAD_META])
def test_a_malformed_meta_json_is_named(source, tmp_path, capsys, text, needle):
    root = _broken_copy(source, tmp_path, _text("meta.json", text))
    _usage_error(["judge", "run", "--model", str(source.parent / "model"), "--data", str(root), "--out",
                  str(tmp_path / "out"), "--no-progress"], capsys, f"{root / needle}")


def test_outputs_that_cannot_be_written_are_refused_before_the_run(source, tmp_path, capsys):
    """--out naming a file, or --report a directory or a path in a missing folder: a FileExistsError /
    IsADirectoryError traceback, the report's only after the whole set was judged."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    run = ["judge", "run", "--model", str(source.parent / "model"), "--data", str(source), "--no-progress"]
    _usage_error([*run, "--out", str(a_file)], capsys, f"--out {a_file}: is a file; expected an output directory")
    _usage_error([*run, "--out", str(tmp_path / "o"), "--report", str(tmp_path)], capsys,
                 f"--report {tmp_path}: is a directory")
    _usage_error([*run, "--out", str(tmp_path / "o"), "--report", str(tmp_path / "no" / "r.html")], capsys,
                 f"folder {tmp_path / 'no'} does not exist")
    _usage_error(["judge", "baselines", "--data", str(source), "--out", str(a_file)], capsys,
                 f"--out {a_file}: is a file")
    _usage_error(["judge", "data", "--out", str(a_file), "--train", "1", "--test", "0", "--no-progress"], capsys,
                 f"--out {a_file}: is a file")
    assert not (tmp_path / "o").exists()


def _missing_image(root):
    (root / "images" / "syn_default_2_p0.png").unlink()


# the training data kinds (jaxdrive train, data.kind judge_gates / judge_direct / judge_pairs) read the same files:
# before, a pair without records was a KeyError, a missing image a FileNotFoundError, a '..' scene read from outside
# the set, each while encoding, after the tokenizer loaded
TRAINING_INPUTS = [
    ("gate_examples", "../data/scenes/syn_default_2.json", None,
     "record 'syn_default_2_p0': field 'scene': '../data/scenes/syn_default_2.json' is not a path inside"),
    ("direct_examples", None, _missing_image, "record 'syn_default_2_p0': field 'image': file "),
    ("pair_examples", None, _test_pair(a_record=""),
     "pair 'syn_default_2_pair': fields 'a_record' / 'b_record': judge_pairs trains on both"),
    ("pair_examples", None, _test_pair(b_record="nope"), "pair 'syn_default_2_pair': field 'b_record': no record"),
]


@pytest.mark.parametrize("kind,scene,edit,needle", TRAINING_INPUTS, ids=[f"{c[0]}-{i}" for i, c in
                                                                           enumerate(TRAINING_INPUTS)])
def test_training_data_kinds_check_their_inputs_before_loading_anything(source, tmp_path, monkeypatch, kind, scene,
                                                                        edit, needle):
    import ml_collections

    from jaxdrive.judge import recipes

    monkeypatch.setattr(recipes, "encoder_for", lambda *a: pytest.fail("the tokenizer was loaded"))
    root = _broken_copy(source, tmp_path, edit or (_test_record(scene=scene) if scene else lambda root: None))
    cfg = ml_collections.ConfigDict({"path": str(root), "split": "test", "model_path": "unused", "max_len": 64})
    with pytest.raises(ValueError) as e:
        getattr(recipes, kind)(cfg)
    assert needle in str(e.value), str(e.value)


class _FakeJudge:
    """Stands in for ``DriveJudge.from_pretrained``: every gate p = 0.9 (no model to load)."""

    def __init__(self, *args, batch_size=8, **kwargs):
        self.batch_size = batch_size

    def score(self, scenes, proposals):
        import types

        import numpy as np

        n = len(proposals)
        return types.SimpleNamespace(score=np.full(n, 0.5), score_hard=np.full(n, 0.5), epdms=np.full(n, 0.5),
                                     probs=np.full((n, len(RULE_LABELS)), 0.9), rationale=["r"] * n)


def test_judge_run_leaves_no_output_of_an_earlier_run(source, tmp_path, monkeypatch, capsys):
    """A run that writes no tps.parquet (--limit 1: no pair has both records) or is interrupted left an earlier
    run's tps.parquet / gates.json beside its own dqc.parquet without a word: `jaxdrive eval tps` then read the
    previous model's scores. Likewise the --report file an interrupted or failed run did not rewrite."""
    from jaxdrive.judge import policy

    monkeypatch.setattr(policy.DriveJudge, "from_pretrained", _FakeJudge)
    out = tmp_path / "out"
    out.mkdir()
    for name in ("dqc.parquet", "tps.parquet", "gates.json"):
        (out / name).write_text("an earlier run's")
    run = ["judge", "run", "--model", str(source.parent / "model"), "--data", str(source), "--out", str(out),
           "--no-progress"]
    assert main([*run, "--limit", "1"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["dqc.parquet", "gates.json"]
    assert json.loads((out / "gates.json").read_text())["perfect_match"] in (0.0, 100.0)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("jaxdrive.judge.run.judge_records", interrupted)
    report = tmp_path / "report.html"
    report.write_text("an earlier run's report")  # was kept: opened after the failed run, it showed the old model's
    assert main([*run, "--report", str(report)]) == 130
    assert list(out.iterdir()) == [] and not report.exists()


def test_judge_run_and_baselines_remove_the_eval_metrics_of_what_they_replace(source, tmp_path, monkeypatch,
                                                                              capsys):
    """`jaxdrive eval dqc|tps` writes P.dqc.json / P.dqc.png / P.tps.json beside P.parquet. `judge run` and `judge
    baselines` replaced P but kept those: after judging with another model (or an interrupted run), judge/dqc.dqc.json
    still held the previous model's AUC beside the new dqc.parquet."""
    from jaxdrive.judge import policy

    monkeypatch.setattr(policy.DriveJudge, "from_pretrained", _FakeJudge)
    stale = ["dqc.dqc.json", "dqc.dqc.png", "tps.tps.json", "test_dqc_epdms.dqc.json", "test_dqc_epdms.dqc.png",
             "test_tps_ade.tps.json"]
    for d in ("judge", "base"):
        (tmp_path / d).mkdir()
        for name in stale:
            (tmp_path / d / name).write_text("metrics of an earlier run's predictions")
    assert main(["judge", "run", "--model", str(source.parent / "model"), "--data", str(source), "--out",
                 str(tmp_path / "judge"), "--no-progress"]) == 0
    assert main(["judge", "baselines", "--data", str(source), "--out", str(tmp_path / "base")]) == 0
    left = {d: sorted(p.name for p in (tmp_path / d).iterdir() if p.name in stale) for d in ("judge", "base")}
    assert left == {"judge": stale[3:], "base": stale[:3]}  # each removes only the metrics of its own outputs


@pytest.mark.parametrize("kind", ["gate_examples", "direct_examples"])
@pytest.mark.parametrize("where", ["missing", "a_file"])
def test_training_data_path_without_records_is_named(tmp_path, kind, where):
    """`jaxdrive train sft --config configs/judge_sft_tiny.py data.path=WRONG`: a FileNotFoundError /
    NotADirectoryError traceback for WRONG/records.jsonl."""
    import ml_collections

    from jaxdrive.judge import recipes

    path = tmp_path / "nope"
    if where == "a_file":
        path.write_text("x")
    cfg = ml_collections.ConfigDict({"path": str(path), "split": "train", "model_path": "unused", "max_len": 64})
    with pytest.raises(ValueError, match=f"^{path / 'records.jsonl'}: no such file"):
        getattr(recipes, kind)(cfg)


class _ProposalJudge:
    """Stands in for ``DriveJudge.from_pretrained``: each record's outputs follow its proposal k (so a record judged
    in the wrong place shows); its ``score`` raises KeyboardInterrupt at call ``interrupt_at`` (Ctrl-C after that
    many batches) and records the proposals of every call in ``calls``."""

    calls: list = []
    interrupt_at = None

    def __init__(self, *args, **kwargs):
        pass

    def score(self, scenes, proposals):
        import types

        import numpy as np

        if len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls.append(list(proposals))
        k = np.asarray(proposals, float)
        return types.SimpleNamespace(score=k / 10, score_hard=k / 20, epdms=1 - k / 10,
                                     probs=np.repeat(0.1 + k[:, None] / 5, len(RULE_LABELS), 1),
                                     rationale=[f"proposal {j}" for j in proposals])


@pytest.fixture
def four_records(source, tmp_path, monkeypatch):
    """A copy of the set whose test split has 4 records (proposals 0..3 of one scene), a model directory of its
    own, and ``_ProposalJudge`` as the judge; returns the `judge run` command line (out: tmp_path/out)."""
    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.judge import policy

    root = tmp_path / "data"
    shutil.copytree(source, root)
    rows = _rows(root / "records.jsonl")
    names = generate_scene(2, num_proposals=4).proposal_names
    for k in (1, 2):
        rid = rows[2]["id"].replace("_p0", f"_p{k}")
        Image.new("RGB", (8, 8), (10 * k, 60, 40)).save(root / "images" / f"{rid}.png")
        rows.insert(2 + k, {**rows[2], "id": rid, "proposal": k, "proposal_name": names[k],
                            "image": f"images/{rid}.png", "label": k % 2})
    _write(root / "records.jsonl", rows)
    model = tmp_path / "model"
    shutil.copytree(source.parent / "model", model)
    monkeypatch.setattr(policy.DriveJudge, "from_pretrained", _ProposalJudge)
    monkeypatch.setattr(_ProposalJudge, "calls", [])
    return ["judge", "run", "--model", str(model), "--data", str(root), "--out", str(tmp_path / "out"),
            "--batch-size", "1"]


OUTPUT_FILES = ("dqc.parquet", "tps.parquet", "gates.json")


def _interrupted_after(run, batches, capsys, monkeypatch) -> str:
    """Runs ``run`` with Ctrl-C after ``batches`` judged batches: exit 130; returns its stderr."""
    monkeypatch.setattr(_ProposalJudge, "interrupt_at", batches)
    assert main([*run, "--no-progress"]) == 130
    monkeypatch.setattr(_ProposalJudge, "interrupt_at", None)
    return capsys.readouterr().err


@pytest.mark.parametrize("batch_size", ["1", "3"])
def test_judge_run_resume_judges_only_what_an_interrupted_run_did_not_keep(four_records, tmp_path, capsys,
                                                                           monkeypatch, batch_size):
    """Ctrl-C in `jaxdrive judge run` (hours with a Qwen-VL judge) kept nothing: every record was judged again. The
    judged batches are now committed in OUT/partial; the same command plus --resume judges only the others (its bar
    starting at those kept) and writes exactly an uninterrupted run's files, then removes partial/."""
    import pyarrow.parquet as pq

    run = [*four_records[:-1], batch_size]
    full = tmp_path / "full"
    assert main([*run[:-4], "--out", str(full), "--batch-size", batch_size, "--no-progress"]) == 0
    uninterrupted = list(_ProposalJudge.calls)
    _ProposalJudge.calls.clear()
    out = tmp_path / "out"
    err = _interrupted_after(run, 1, capsys, monkeypatch)
    kept = int(batch_size)
    assert (f"interrupted: {kept} of 4 records judged are kept in {out}; continue with the same arguments plus "
            f"--resume") in err, err
    assert sorted(p.name for p in (out / "partial").glob("part-*.parquet")) == ["part-00000.parquet"]
    assert main([*run, "--resume"]) == 0
    assert f"{kept}/4 [" in capsys.readouterr().err  # the bar starts at the records kept
    assert _ProposalJudge.calls == uninterrupted  # the kept batch once, the others once
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)  # partial/ removed
    for name in OUTPUT_FILES:
        assert (out / name).read_bytes() == (full / name).read_bytes(), name
    assert pq.read_table(out / "dqc.parquet").column("id").to_pylist() == [
        r["id"] for r in _rows(tmp_path / "data" / "records.jsonl") if r["split"] == "test"]


def test_judge_run_without_resume_starts_afresh(four_records, tmp_path, capsys, monkeypatch):
    """Without --resume a run into a folder holding an interrupted run's batches judges every record again and
    leaves none of them behind."""
    _interrupted_after(four_records, 2, capsys, monkeypatch)
    _ProposalJudge.calls.clear()
    assert main([*four_records, "--no-progress"]) == 0
    assert "removing the judged batches of an earlier run" in capsys.readouterr().err
    assert _ProposalJudge.calls == [[0], [1], [2], [3]]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(OUTPUT_FILES)


def _touch_weights(run):
    (Path(run[run.index("--model") + 1]) / "model.safetensors").write_bytes(b"other weights")
    return run


@pytest.mark.parametrize("change, differs", [
    (lambda run: [*run[:-1], "2"], "batch_size"),
    (lambda run: [*run, "--limit", "3"], "records"),
    (lambda run: [*run, "--split", "train"], "records, scenes, split"),
    (_touch_weights, "model"),
])
def test_judge_run_resume_refuses_another_run(four_records, tmp_path, capsys, monkeypatch, change, differs):
    """--resume with other arguments, data or model than the interrupted run's would mix two runs' judgements: a
    usage error naming what differs, before the model is loaded, and the kept batches stay."""
    _interrupted_after(four_records, 2, capsys, monkeypatch)
    _ProposalJudge.calls.clear()
    _usage_error([*change(four_records), "--resume", "--no-progress"], capsys, f"(differs in: {differs})")
    assert _ProposalJudge.calls == []
    assert len(list((tmp_path / "out" / "partial").glob("part-*.parquet"))) == 2


def test_judge_run_resume_with_a_limit_that_selects_the_same_records(four_records, tmp_path, capsys, monkeypatch):
    """--limit entered the run's identity as given: an interrupted run resumed with --limit 10 (4 records: the same
    ones) was refused ("differs in: limit"). The identity holds the records judged, which is what --limit changes."""
    _interrupted_after(four_records, 2, capsys, monkeypatch)
    _ProposalJudge.calls.clear()
    assert main([*four_records, "--limit", "10", "--resume", "--no-progress"]) == 0
    assert _ProposalJudge.calls == [[2], [3]]
