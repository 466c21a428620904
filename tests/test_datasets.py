"""TFDS dataset builders (jaxdrive.datasets) and their grain loaders.

Each builder is built from a tiny fixture of its documented source layout (docs/datasets.md), written here, and read
back through TFDS (``builder_from_directory(...).as_data_source()``); every field, images as bytes included, must equal
what the source files hold. The grain loader must resume from a training checkpoint exactly where it stopped and its
process shards must be disjoint and cover the split. Malformed sources fail naming the file and the field.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from jaxdrive.cli import main
from jaxdrive.data.openread_cot import load_lingoqa, load_omnidrive
from jaxdrive.datasets import BUILDERS, get_builder
from jaxdrive.datasets.base import DATASET_META, SourceError, read_all
from jaxdrive.datasets.loader import grain_loader
from jaxdrive.eval.cot_format import format_cot
from jaxdrive.eval.trajectory_text import format_trajectory


def _image(path: Path, seed: int, fmt: str = "PNG") -> None:
    """A tiny random image written as a real PNG / JPEG file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 255, (6, 8, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    path.write_bytes(buf.getvalue())


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# ---------------------------------------------------------------------------------------------- fixture layouts

def make_drivejudge(root: Path) -> None:
    """docs/drivejudge-data.md: scenes/, images/, records.jsonl, pairs.jsonl (two scenes, train and test)."""
    from jaxdrive.data.scene_json import write_scene
    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.judge.dataset import Pair, Record, write_jsonl
    from jaxdrive.judge.gates import RULE_LABELS

    records, pairs = [], []
    for s, split in ((1, "train"), (2, "test")):
        scene = generate_scene(s, num_proposals=4)
        (root / "scenes").mkdir(parents=True, exist_ok=True)
        write_scene(scene, root / "scenes" / f"{scene.id}.json")
        for k in (0, 3):
            rid = f"{scene.id}_p{k}"
            _image(root / "images" / f"{rid}.png", 10 * s + k)
            records.append(Record(
                id=rid, scene=f"scenes/{scene.id}.json", proposal=k, proposal_name=scene.proposal_names[k],
                label=int(k == 0), split=split, image=f"images/{rid}.png", justification=f"why {rid}",
                subscores={"nc": 1.0, "ec": None, "epdms": 0.5 + k / 10}, gates={r: k % 2 for r in RULE_LABELS},
                context={"rule": "nominal", "flags": [s, k]}))
        pairs.append(Pair(id=f"{scene.id}_pair", scene=f"scenes/{scene.id}.json", a=3, b=0, preferred="b",
                          split=split, a_record=f"{scene.id}_p3", b_record=f"{scene.id}_p0", justification="safer"))
    pairs.append(Pair(id="no_records", scene=pairs[0].scene, a=1, b=2, preferred="a", split="train"))
    write_jsonl(root / "records.jsonl", records)
    write_jsonl(root / "pairs.jsonl", pairs)


CAMS = ("CAM_FRONT", "CAM_BACK")


def make_drivelmm(root: Path) -> None:
    """<split>.json (a list) and <split>.jsonl items with nuScenes-style image paths under samples/."""
    def item(token: str, q: int) -> dict:
        paths = [f"samples/{c}/{token}__{c}.jpg" for c in CAMS]
        for i, p in enumerate(paths):
            _image(root / p, ord(token[0]) * 10 + i, "JPEG")
        return {"idx": f"{token}_{token[::-1]}_{q}", "image": paths, "question": f"Q{q} about {token}?",
                "final_answer": "A) Slow down." if q in (2, 3) else f"It is {token}.",
                "steps": "\n1. Look left.\n2. Look right.", "lidar": f"{token}.pcd.bin"}
    (root / "train.json").write_text(json.dumps([item("aa", 1), item("aa", 2), item("bb", 3)], indent=1))
    row = item("cc", 4)
    del row["lidar"]
    _jsonl(root / "test.jsonl", [row])


def make_openread_cot(root: Path) -> None:
    """<split>.jsonl of OpenREAD CoT records (planning with a trajectory, knowledge with images and extras)."""
    traj = np.round(np.cumsum(np.full((6, 2), 0.75), 0), 2).tolist()
    _image(root / "imgs" / "a.png", 1)
    _image(root / "imgs" / "b.png", 2)
    _jsonl(root / "train.jsonl", [
        {"id": "p0", "task": "planning", "question": "Plan.", "think": "Go on.", "answer": format_trajectory(traj),
         "trajectory": traj},
        {"id": "k0", "task": "knowledge", "question": "What is ahead?", "think": "I look.", "answer": "A car.",
         "images": ["imgs/a.png", "imgs/b.png"], "references": ["A car.", "One car."], "source": "fixture",
         "target": "rebuilt from think and answer",
         "weight": 0.5}])
    _jsonl(root / "val.jsonl", [{"id": "c0", "task": "counterfactual", "question": "Would (1, 2) be fine?",
                                 "think": "It leaves the road.", "answer": "No."}])


def make_omnidrive(root: Path) -> None:
    """{vqa,conv}/<split>/<token>.json lists of {question, answer}."""
    plan = format_trajectory(np.arange(12, dtype=float).reshape(6, 2) / 4)
    files = {"vqa/train/t1.json": [{"question": "Please plan the trajectory.", "answer": f"Keep lane: {plan}"},
                                   {"question": "What is the weather?", "answer": "Sunny."}],
             "conv/train/t2.json": [{"question": "Is the path (1.0, 2.0) safe?", "answer": "Yes."}],
             "vqa/val/t3.json": [{"question": "How many cars?", "answer": "Two."}]}
    for rel, items in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(items))


def make_lingoqa(root: Path) -> None:
    """action/train.parquet and evaluation/val.parquet with frame paths under images/."""
    def frames(seg: str) -> list[str]:
        paths = [f"images/{seg}/{i}.jpg" for i in range(2)]
        for i, p in enumerate(paths):
            _image(root / p, int(seg[1:]) * 10 + i, "JPEG")
        return paths
    (root / "action").mkdir(parents=True)
    (root / "evaluation").mkdir(parents=True)
    pq.write_table(pa.table({"question_id": ["q1", "q2"], "segment_id": ["s1", "s2"],
                             "question": ["Why stop?", "What now?"], "answer": ["A red light.", "Go."],
                             "images": [frames("s1"), frames("s2")]}), root / "action" / "train.parquet")
    pq.write_table(pa.table({"question_id": ["e1"], "segment_id": ["s3"], "question": ["Any cyclists?"],
                             "answers": [["No.", "None."]], "images": [frames("s3")]}),
                   root / "evaluation" / "val.parquet")


MAKERS = {"drivejudge": make_drivejudge, "drivecritic": make_drivejudge, "drivelmm_o1": make_drivelmm,
          "openread_cot": make_openread_cot, "omnidrive": make_omnidrive, "lingoqa": make_lingoqa}


# ---------------------------------------------------------------------------------------------- expected records

def expected_drivejudge(root: Path) -> dict[str, list[dict]]:
    out = {}
    for line in (root / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        split = r.pop("split")
        r.update(scene_json=(root / r["scene"]).read_bytes(), image_bytes=(root / r["image"]).read_bytes())
        out.setdefault(split, []).append(r)
    return out


def expected_drivecritic(root: Path) -> dict[str, list[dict]]:
    images = {json.loads(l)["id"]: json.loads(l)["image"] for l in (root / "records.jsonl").read_text().splitlines()}
    out = {}
    for line in (root / "pairs.jsonl").read_text().splitlines():
        p = json.loads(line)
        split = p.pop("split")
        paths = [images[p["a_record"]] if p["a_record"] else "", images[p["b_record"]] if p["b_record"] else ""]
        p.update(scene_json=(root / p["scene"]).read_bytes(), image_paths=paths,
                 images=[(root / x).read_bytes() if x else b"" for x in paths])
        out.setdefault(split, []).append(p)
    return out


def expected_drivelmm(root: Path) -> dict[str, list[dict]]:
    rows = {"train": json.loads((root / "train.json").read_text()),
            "test": [json.loads(l) for l in (root / "test.jsonl").read_text().splitlines()]}
    return {s: [{**r, "lidar": r.get("lidar", ""), "image_bytes": [(root / p).read_bytes() for p in r["image"]]}
                for r in items] for s, items in rows.items()}


def _cot(rec: dict, root: Path) -> dict:
    rec = {**rec, "images": list(rec.get("images", [])), "references": list(rec.get("references", [])),
           "target": format_cot(rec["think"], rec["answer"])}
    rec["image_bytes"] = [(root / p).read_bytes() for p in rec["images"]]
    rec["trajectory"] = np.asarray(rec.get("trajectory", np.zeros((0, 2))), np.float32)
    return rec


def expected_openread_cot(root: Path) -> dict[str, list[dict]]:
    return {s: [_cot(json.loads(l), root) for l in (root / f"{s}.jsonl").read_text().splitlines()]
            for s in ("train", "val")}


def expected_omnidrive(root: Path) -> dict[str, list[dict]]:
    return {s: [_cot(r, root) for r in load_omnidrive(root, s)] for s in ("train", "val")}


def expected_lingoqa(root: Path) -> dict[str, list[dict]]:
    out = {}
    for r in load_lingoqa(root):
        r["images"] = [str(Path(p).relative_to(root)) for p in r["images"]]
        out.setdefault("val" if "/evaluation/" in r["id"] else "train", []).append(_cot(r, root))
    return out


EXPECTED = {"drivejudge": expected_drivejudge, "drivecritic": expected_drivecritic, "drivelmm_o1": expected_drivelmm,
            "openread_cot": expected_openread_cot, "omnidrive": expected_omnidrive, "lingoqa": expected_lingoqa}


def assert_same(got: dict, want: dict, where: str) -> None:
    assert sorted(got) == sorted(want), f"{where}: fields {sorted(got)} != {sorted(want)}"
    for k, v in want.items():
        if isinstance(v, np.ndarray):
            assert got[k].dtype == v.dtype and got[k].shape == v.shape, f"{where}.{k}"
            np.testing.assert_array_equal(got[k], v, err_msg=f"{where}.{k}")
        else:
            assert type(got[k]) is type(v) and got[k] == v, f"{where}.{k}: {got[k]!r} != {v!r}"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """kind -> (source directory, built dataset directory), each built with `jaxdrive data build`."""
    out = {}
    for kind in BUILDERS:
        src = tmp_path_factory.mktemp(f"src_{kind}")
        MAKERS[kind](src)
        dst = tmp_path_factory.mktemp(f"ds_{kind}") / "ds"
        assert main(["data", "build", kind, str(src), "--out", str(dst), "--no-progress"]) == 0
        out[kind] = (src, dst)
    return out


def test_every_builder_has_a_fixture():
    assert set(MAKERS) == set(BUILDERS) == set(EXPECTED)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_builder_reads_back_identical_records(built, kind):
    import tensorflow_datasets as tfds

    src, dst = built[kind]
    want = EXPECTED[kind](src)
    meta = json.loads((dst / DATASET_META).read_text())
    assert meta["kind"] == kind and {s: v["examples"] for s, v in meta["splits"].items()} == {
        s: len(v) for s, v in want.items()}
    for split, rows in want.items():
        raw = tfds.builder_from_directory(str(dst)).as_data_source(split=split)  # plain TFDS, no jaxdrive decoding
        assert len(raw) == len(rows)
        got = read_all(dst, split)
        for i, (g, w) in enumerate(zip(got, rows)):
            assert_same(g, w, f"{kind}/{split}[{i}]")
    assert "tensorflow" not in sys.modules  # built and read without TensorFlow
    if kind in ("drivelmm_o1", "openread_cot", "lingoqa"):  # multi-image records: images really are the file bytes
        rec = next(r for rows in want.values() for r in rows if len(r["image_bytes"]) > 1)
        assert Image.open(io.BytesIO(rec["image_bytes"][1])).size == (8, 6)


def test_a_decoded_source_iterates_and_indexes_like_a_list(cot_many):
    """``for r in DecodedSource(...)`` (Python's iteration by ``__getitem__``) and ``list(src)`` failed at the end
    with the data source's "Record key should be in [0, num_records)" ValueError instead of stopping; ``src[-1]``
    failed the same way."""
    from jaxdrive.datasets.base import DecodedSource

    src = DecodedSource(cot_many, "train")
    ids = [r["id"] for r in src]
    assert sorted(ids) == [f"r{i:02d}" for i in range(13)] and src[-1]["id"] == ids[-1]
    assert src[np.int64(2)]["id"] == ids[2]
    with pytest.raises(IndexError, match=r"split 'train': record index 13 out of range \[0, 13\)"):
        src[13]
    with pytest.raises(TypeError, match="record index: expected an int, got str"):
        src["r00"]


def test_build_refuses_to_overwrite(built):
    src, dst = built["openread_cot"]
    with pytest.raises(ValueError, match="already holds a dataset"):
        get_builder("openread_cot").build(src, dst)


_KILL_AT_META = """
import os, sys
from pathlib import Path
from jaxdrive import atomic
from jaxdrive.datasets import get_builder

def killed(path, text, **kw):  # the process dies between the TFDS files and jaxdrive_dataset.json
    os._exit(9 if (Path(path).parent / "dataset_info.json").is_file() else 3)

atomic.write_text = killed
get_builder("openread_cot").build(sys.argv[1], sys.argv[2])
"""


def _interrupt_at_meta(how: str, src: Path, out: Path, monkeypatch) -> None:
    """Runs a build of ``src`` into ``out`` that stops where ``jaxdrive_dataset.json`` is written, after the TFDS
    files: an exception in this process ("exception", Ctrl-C) or the death of a child process ("kill", no cleanup)."""
    if how == "kill":
        repo = str(Path(__file__).resolve().parents[1])
        run = subprocess.run([sys.executable, "-c", _KILL_AT_META, str(src), str(out)], capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": repo}, timeout=300)
        assert run.returncode == 9, run.stderr
        return
    from jaxdrive import atomic

    def killed(path, text, **kw):
        assert (Path(path).parent / "dataset_info.json").is_file()
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "write_text", killed)
    with pytest.raises(KeyboardInterrupt):
        get_builder("openread_cot").build(src, out)
    monkeypatch.undo()


@pytest.mark.parametrize("how", ["exception", "kill"])
def test_a_build_interrupted_before_its_metadata_does_not_block_the_rerun(how, tmp_path, monkeypatch):
    """A build interrupted after TFDS's dataset_info.json was written but before jaxdrive_dataset.json left a folder
    that every re-run refused ("already holds a dataset") until the user deleted it by hand. Now ``--out`` appears
    only complete, the re-run builds it and no temporary folder is left beside it."""
    src, out = tmp_path / "src", tmp_path / "out"
    make_openread_cot(src)
    _interrupt_at_meta(how, src, out, monkeypatch)
    assert not (out / "dataset_info.json").exists()
    get_builder("openread_cot").build(src, out)
    assert [r["id"] for r in read_all(out, "train")] == ["p0", "k0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]


def test_an_unfinished_build_left_in_out_is_rebuilt(built, tmp_path):
    """A folder an earlier version left when interrupted (TFDS files, no jaxdrive_dataset.json) is replaced by the
    re-run; a complete dataset is still refused (test_build_refuses_to_overwrite)."""
    src, out = built["openread_cot"][0], tmp_path / "out"
    shutil.copytree(built["openread_cot"][1], out)
    (out / DATASET_META).unlink()
    get_builder("openread_cot").build(src, out)
    assert [r["id"] for r in read_all(out, "val")] == ["c0"]


def test_out_holding_other_files_is_refused_and_kept(tmp_path):
    """``--out`` is the dataset directory to create: a folder holding files of something else is not written into
    (the build replaces ``--out`` as a whole when it is complete)."""
    src, out = tmp_path / "src", tmp_path / "out"
    make_openread_cot(src)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes.txt"):
        get_builder("openread_cot").build(src, out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()  # an empty folder is fine
    get_builder("openread_cot").build(src, out)
    assert (out / DATASET_META).is_file()



def test_out_below_a_file_is_a_usage_error(tmp_path, capsys):
    """``--out FILE/sub`` (a file where a folder of the path should be) was a NotADirectoryError traceback (exit 1)
    from making the temporary build folder, after the whole source had been read."""
    src = tmp_path / "src"
    make_openread_cot(src)
    (tmp_path / "f").write_text("x")
    out = tmp_path / "f" / "sub"
    assert main(["data", "build", "openread_cot", str(src), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}" in err and "is a file" in err and "Traceback" not in err, err


# ---------------------------------------------------------------------------------------------- grain

@pytest.fixture(scope="module")
def cot_many(tmp_path_factory):
    """An openread_cot dataset of 13 knowledge records (odd, so shards are unequal)."""
    src = tmp_path_factory.mktemp("cot_many_src")
    _jsonl(src / "train.jsonl", [{"id": f"r{i:02d}", "task": "knowledge", "question": f"q{i}", "think": "t",
                                  "answer": f"a{i}"} for i in range(13)])
    dst = tmp_path_factory.mktemp("cot_many") / "ds"
    get_builder("openread_cot").build(src, dst)
    return dst


def _ids(batch) -> list[str]:
    return [r["id"] for r in batch]


def test_grain_iterator_resumes_from_a_checkpoint_where_it_stopped(cot_many, tmp_path):
    from jaxdrive.train.checkpoint import Checkpointer

    make = lambda: iter(grain_loader(cot_many, "train", seed=7, batch_size=3, shard_index=0, shard_count=1))
    it = make()
    seen = [_ids(next(it)) for _ in range(3)]
    ckpt = Checkpointer(str(tmp_path / "ckpt"), async_save=False)
    ckpt.save(3, {"w": np.arange(4.0)}, {"step": 3}, data_iterator=it)
    reference = [_ids(next(it)) for _ in range(10)]  # crosses two epochs of 13 (batches span them)

    resumed = make()
    state, meta = Checkpointer(str(tmp_path / "ckpt"), async_save=False).restore({"w": np.zeros(4)},
                                                                                  data_iterator=resumed)
    assert meta["step"] == 3 and np.array_equal(state["w"], np.arange(4.0))
    assert [_ids(next(resumed)) for _ in range(10)] == reference
    fresh = make()
    assert [_ids(next(fresh)) for _ in range(3)] == seen  # deterministic from the seed ...
    assert [_ids(next(fresh)) for _ in range(10)] == reference
    stream = sum(seen + reference, [])
    assert sorted(stream[:13]) == [f"r{i:02d}" for i in range(13)] and stream[:13] != sorted(stream[:13])  # epoch 0
    assert sorted(stream[13:26]) == sorted(stream[:13]) and stream[13:26] != stream[:13]  # epoch 1: a new order
    other = iter(grain_loader(cot_many, "train", seed=8, batch_size=3, shard_index=0, shard_count=1))
    assert [_ids(next(other)) for _ in range(3)] != seen


def test_restore_without_saved_iterator_state_is_an_error(cot_many, tmp_path):
    from jaxdrive.train.checkpoint import Checkpointer

    ckpt = Checkpointer(str(tmp_path / "ckpt"), async_save=False)
    ckpt.save(1, {"w": np.zeros(2)}, {"step": 1})
    it = iter(grain_loader(cot_many, "train", shard_index=0, shard_count=1))
    with pytest.raises(ValueError, match="holds no data iterator state"):
        ckpt.restore({"w": np.zeros(2)}, data_iterator=it)
    state, meta = ckpt.restore({"w": np.zeros(2)})  # a checkpoint without it still restores
    assert meta == {"step": 1}


def test_process_shards_are_disjoint_and_cover_the_split(cot_many):
    every = [f"r{i:02d}" for i in range(13)]
    shards = [[r["id"] for r in grain_loader(cot_many, "train", seed=3, num_epochs=1, shard_index=i, shard_count=2)]
              for i in range(2)]
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == every and all(len(set(s)) == len(s) for s in shards)
    assert abs(len(shards[0]) - len(shards[1])) <= 1
    single = [r["id"] for r in grain_loader(cot_many, "train", seed=3, num_epochs=1)]  # this process: 0 of 1
    assert sorted(single) == every
    with pytest.raises(ValueError, match="shard_index"):
        grain_loader(cot_many, "train", shard_index=2, shard_count=2)


# ---------------------------------------------------------------------------------------------- malformed sources

def _drop_field(path: Path, line: int, field: str) -> None:
    rows = [json.loads(l) for l in path.read_text().splitlines()]
    del rows[line][field]
    _jsonl(path, rows)


def _break_drivelmm(root: Path) -> None:
    items = json.loads((root / "train.json").read_text())
    del items[1]["steps"]
    (root / "train.json").write_text(json.dumps(items))


def _break_lingoqa(root: Path) -> None:
    table = pq.read_table(root / "action" / "train.parquet").drop_columns(["question"])
    pq.write_table(table, root / "action" / "train.parquet")


BREAKS = {
    "drivejudge": (lambda r: _drop_field(r / "records.jsonl", 1, "label"), ["records.jsonl:2", "'label'"]),
    "drivecritic": (lambda r: _drop_field(r / "pairs.jsonl", 0, "preferred"), ["pairs.jsonl:1", "'preferred'"]),
    "drivelmm_o1": (_break_drivelmm, ["train.json item 1", "missing field 'steps'"]),
    "openread_cot": (lambda r: _drop_field(r / "train.jsonl", 1, "think"), ["train.jsonl:2", "missing field 'think'"]),
    "omnidrive": (lambda r: (r / "vqa/train/t1.json").write_text(json.dumps([{"question": "no answer"}])),
                  ["t1.json", "question, answer"]),
    "lingoqa": (_break_lingoqa, ["action/train.parquet", "'question'"]),
}


@pytest.mark.parametrize("kind,name,key", [("openread_cot", "train.jsonl", "id"), ("drivelmm_o1", "train.json", "idx"),
                                           ("drivelmm_o1", "test.jsonl", "idx")])
def test_an_item_given_twice_in_a_split_is_refused(kind, name, key, tmp_path, capsys):
    """A record repeated in a split's file (e.g. a file concatenated twice) was stored twice: trained on twice, and
    a DriveLMM-o1 item answered twice (``eval vqa`` refuses an idx given twice)."""
    src = tmp_path / "src"
    MAKERS[kind](src)
    path = src / name
    if name.endswith(".json"):
        items = json.loads(path.read_text())
        path.write_text(json.dumps(items + items[:1]))
    else:
        rows = [json.loads(l) for l in path.read_text().splitlines()]
        _jsonl(path, rows + rows[:1])
    first = (json.loads(path.read_text())[0] if name.endswith(".json")
             else json.loads(path.read_text().splitlines()[0]))[key]
    assert main(["data", "build", kind, str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"field '{key}': {first!r} is already" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_malformed_source_names_file_and_field(kind, tmp_path, capsys):
    src = tmp_path / "src"
    MAKERS[kind](src)
    breaker, needles = BREAKS[kind]
    breaker(src)
    assert main(["data", "build", kind, str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxdrive data:") and "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "out" / DATASET_META).exists()


def test_openread_cot_planning_record_needs_six_points(tmp_path, capsys):
    """A planning record's trajectory must be [6, 2] (Eq. 7 reads 6 points): 5 points were stored and only failed
    when a training run encoded the record."""
    src = tmp_path / "src"
    make_openread_cot(src)
    rows = [json.loads(l) for l in (src / "train.jsonl").read_text().splitlines()]
    rows[0]["trajectory"] = rows[0]["trajectory"][:5]
    _jsonl(src / "train.jsonl", rows)
    assert main(["data", "build", "openread_cot", str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "train.jsonl:1" in err and "'trajectory'" in err and "(5, 2)" in err


@pytest.mark.parametrize("kind,rel", [("drivejudge", "images"), ("drivelmm_o1", "samples"), ("lingoqa", "images")])
def test_missing_image_file_names_the_record_and_field(kind, rel, tmp_path):
    src = tmp_path / "src"
    MAKERS[kind](src)
    victim = sorted((src / rel).rglob("*.*"))[0]
    victim.unlink()
    with pytest.raises(SourceError, match=f"field '(image|images)': file '{victim.relative_to(src)}' not found"):
        get_builder(kind).build(src, tmp_path / "out")


def _set_lingoqa_image(root: Path, row: int, rel: str) -> None:
    """Replaces the first frame path of ``row`` of action/train.parquet by ``rel``."""
    table = pq.read_table(root / "action" / "train.parquet").to_pylist()
    table[row]["images"][0] = rel
    pq.write_table(pa.Table.from_pylist(table), root / "action" / "train.parquet")


@pytest.mark.parametrize("outside", ["absolute", "../outside.jpg", "images/../../outside.jpg"])
def test_lingoqa_image_path_outside_the_source_names_file_row_and_path(outside, tmp_path, capsys):
    """A frame path that leaves the source folder was a bare "'/x.jpg' is not in the subpath of ..." (no file, no
    row), or, through '..', an image outside the source stored without a word."""
    src = tmp_path / "src"
    make_lingoqa(src)
    _image(tmp_path / "outside.jpg", 0, "JPEG")
    rel = str(tmp_path / "outside.jpg") if outside == "absolute" else outside
    _set_lingoqa_image(src, 1, rel)
    assert main(["data", "build", "lingoqa", str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    for needle in (str(src / "action" / "train.parquet"), "row 1", "question_id 'q2'", repr(rel), "relative to"):
        assert needle in err, (needle, err)
    assert not (tmp_path / "out").exists()


def test_lingoqa_missing_image_names_the_parquet_file(tmp_path):
    """A missing frame was named by the record id only ("lingoqa/action/q2: ..."), not by its parquet file."""
    src = tmp_path / "src"
    make_lingoqa(src)
    _set_lingoqa_image(src, 1, "images/s2/gone.jpg")
    with pytest.raises(SourceError, match="field 'images': file 'images/s2/gone.jpg' not found") as e:
        get_builder("lingoqa").build(src, tmp_path / "out")
    assert f"{src / 'action' / 'train.parquet'} record 'lingoqa/action/q2'" in str(e.value)


def test_unknown_kind_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["data", "build", "nuplan", str(tmp_path), "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_record_dataclasses_are_the_drivejudge_fields():
    """The decoded drivejudge / drivecritic records carry every Record / Pair field but ``split`` (the TFDS split)."""
    from jaxdrive.judge.dataset import Pair, Record

    for cls, kind in ((Record, "drivejudge"), (Pair, "drivecritic")):
        names = {f.name for f in dataclasses.fields(cls)} - {"split"}
        assert names <= set(get_builder(kind).features().keys())


def test_openread_tfds_training_dataset_equals_the_source_records(built):
    """``data.kind = "openread_tfds"`` (registry.DATASETS) gives the examples the JSONL records encode to."""
    from ml_collections import ConfigDict

    from jaxdrive.train.openread_recipe import encode_record
    from jaxdrive.train.openread_tiny import train_tokenizer
    from jaxdrive.train.registry import DATASETS

    src, dst = built["openread_cot"]
    want_records = expected_openread_cot(src)["train"]
    tok = train_tokenizer([r["question"] + " " + r["target"] for r in want_records], vocab_size=300)
    got = DATASETS.get("openread_tfds")(ConfigDict({"path": str(dst), "split": "train"}), tok)
    want = [encode_record(r, tok) for r in want_records]
    assert [g["id"] for g in got] == [w["id"] for w in want] == ["p0", "k0"]
    for g, w in zip(got, want):
        assert sorted(g) == sorted(w)
        for k in w:
            np.testing.assert_array_equal(g[k], w[k], err_msg=k)
    with pytest.raises(ValueError, match="openread_tfds reads"):
        DATASETS.get("openread_tfds")(ConfigDict({"path": str(built["drivelmm_o1"][1])}), tok)


def _one_knowledge_line(i: int = 0) -> str:
    return json.dumps({"id": f"k{i}", "task": "knowledge", "question": "Qü 日本?", "think": "t", "answer": "a"}) + "\n"


def test_empty_split_fails_before_anything_is_written(tmp_path, capsys):
    """An empty ``val.jsonl`` beside a good ``train.jsonl`` used to be found only while writing: train's shard was
    already in --out (docs: "fails before anything is written") and the message named no source."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "train.jsonl").write_text(_one_knowledge_line())
    (src / "val.jsonl").write_text("\n")
    assert main(["data", "build", "openread_cot", str(src), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "split 'val' has no example" in err and str(src) in err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("stem", ["train.v2", "my split", "all"])
def test_split_names_tfds_cannot_read_are_refused_before_writing(stem, tmp_path, capsys):
    """Split names come from file stems; "train.v2", "my split" and "all" were written, and then every read of the
    split failed inside TFDS ("Unrecognized split format", a RecursionError for "all")."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / f"{stem}.jsonl").write_text(_one_knowledge_line())
    assert main(["data", "build", "openread_cot", str(src), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"split {stem!r}" in err and "rename" in err
    assert not out.exists() or not any(out.iterdir())


def test_unicode_and_dash_split_names_read_back(tmp_path):
    """What TFDS reads back is still accepted: '-' and non-ASCII letters in split names, non-ASCII text."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    for stem in ("train-v2", "trainé"):
        (src / f"{stem}.jsonl").write_text(_one_knowledge_line())
    get_builder("openread_cot").build(src, out)
    for stem in ("train-v2", "trainé"):
        assert [r["question"] for r in read_all(out, stem)] == ["Qü 日本?"]


@pytest.mark.parametrize("kind,name,data,needle", [
    ("omnidrive", "vqa/train/t1.json", b"5", "expected a JSON list"),
    ("omnidrive", "vqa/train/t1.json", b'{"question": "q", "answer": "a"}', "expected a JSON list"),
    ("omnidrive", "vqa/train/t1.json", b"\xff\xfe[]", "invalid JSON"),
    ("openread_cot", "train.jsonl", b"\xff\xfe{}\n", "not UTF-8"),
    ("drivelmm_o1", "train.json", b"\xff\xfe[]", "not JSON"),
])
def test_source_file_of_the_wrong_shape_or_encoding_is_named(kind, name, data, needle, tmp_path, capsys):
    """An OmniDrive QA file holding a number was a TypeError traceback (exit 1), one holding an object was read as
    its keys ("item 0 is not a {question, answer} object"); a file that is not UTF-8 failed without its name."""
    src = tmp_path / "src"
    MAKERS[kind](src)
    (src / name).write_bytes(data)
    assert main(["data", "build", kind, str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(src / name) in err and needle in err, err


@pytest.mark.parametrize("field,value,needle", [
    ("trajectory", [[float("nan"), 1.0]] + [[1.0, 1.0]] * 5, "expected finite numbers"),
    ("trajectory", [[1e39, 1.0]] + [[1.0, 1.0]] * 5, "expected finite numbers"),
    ("references", [{"text": "A car."}, 3], "expected a list of strings"),
    ("trajectory", [[True, 1.0]] + [[1.0, 1.0]] * 5, "expected finite numbers"),
    ("trajectory", [["1.5", 1.0]] + [[1.0, 1.0]] * 5, "expected finite numbers"),
])
def test_openread_cot_non_finite_trajectory_or_non_text_reference_is_refused(field, value, needle, tmp_path, capsys):
    """A NaN waypoint (JSON's NaN extension) or one beyond float32 was stored as the planning ground truth, and
    references that are not strings were stored as their Python repr ("{'text': 'A car.'}", "3"); a ``true`` or a
    ``"1.5"`` waypoint was stored as 1.0 or 1.5."""
    src = tmp_path / "src"
    make_openread_cot(src)
    rows = [json.loads(l) for l in (src / "train.jsonl").read_text().splitlines()]
    rows[0][field] = value
    _jsonl(src / "train.jsonl", rows)
    assert main(["data", "build", "openread_cot", str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "train.jsonl:1" in err and f"'{field}'" in err and needle in err, err
