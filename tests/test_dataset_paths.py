"""Where a dataset build reads and writes: the file paths an annotation file names, and its temporary folder.

Every converter of ``jaxdrive data build`` applies one rule (``jaxdrive.datasets.base.source_path``) to the image and
scene paths its annotation files name: relative to the source directory and without '..'; anything else is refused,
naming the annotation file, the record and the path, even when the file exists. A build's temporary folder
(``<out>.<host>.<pid>.tmp``) carries the host name, so a build on a filesystem shared between machines removes only
the stale folders of its own host.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxdrive import atomic
from jaxdrive.cli import main
from jaxdrive.datasets import get_builder
from jaxdrive.datasets.base import DATASET_META, read_all
from test_datasets import MAKERS, _image, _jsonl, make_drivelmm, make_openread_cot

# ---------------------------------------------------------------------------------------------- file paths


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _drivejudge_image(src: Path, bad: str) -> str:
    rows = _rows(src / "records.jsonl")
    rows[1]["image"] = bad
    _jsonl(src / "records.jsonl", rows)
    return f"{src / 'records.jsonl'} record {rows[1]['id']!r}: field 'image'"


def _drivejudge_scene(src: Path, bad: str) -> str:
    rows = _rows(src / "records.jsonl")
    rows[0]["scene"] = bad
    _jsonl(src / "records.jsonl", rows)
    return f"{src / 'records.jsonl'} record {rows[0]['id']!r}: field 'scene'"


def _drivecritic_scene(src: Path, bad: str) -> str:
    """The pair that names no record (a pair naming records must name their scene)."""
    rows = _rows(src / "pairs.jsonl")
    i = next(i for i, r in enumerate(rows) if not r["a_record"] and not r["b_record"])
    rows[i]["scene"] = bad
    _jsonl(src / "pairs.jsonl", rows)
    return f"{src / 'pairs.jsonl'} pair {rows[i]['id']!r}: field 'scene'"


def _drivecritic_image(src: Path, bad: str) -> str:
    """The pair's images are its records' ``image`` paths: the error names records.jsonl, the record and the pair."""
    pair = _rows(src / "pairs.jsonl")[0]
    rows = _rows(src / "records.jsonl")
    for r in rows:
        if r["id"] == pair["a_record"]:
            r["image"] = bad
    _jsonl(src / "records.jsonl", rows)
    return f"{src / 'records.jsonl'} record {pair['a_record']!r} (a of {src / 'pairs.jsonl'} pair {pair['id']!r})"


def _drivelmm_json(src: Path, bad: str) -> str:
    items = json.loads((src / "train.json").read_text())
    items[1]["image"][0] = bad
    (src / "train.json").write_text(json.dumps(items))
    return f"{src / 'train.json'} item 1 (idx {items[1]['idx']!r}): field 'image'"


def _drivelmm_jsonl(src: Path, bad: str) -> str:
    rows = _rows(src / "test.jsonl")
    rows[0]["image"][1] = bad
    _jsonl(src / "test.jsonl", rows)
    return f"{src / 'test.jsonl'}:1 (idx {rows[0]['idx']!r}): field 'image'"


def _openread_cot(src: Path, bad: str) -> str:
    rows = _rows(src / "train.jsonl")
    rows[1]["images"][1] = bad
    _jsonl(src / "train.jsonl", rows)
    return f"{src / 'train.jsonl'}:2 (id {rows[1]['id']!r}): field 'images'"


def _lingoqa(src: Path, bad: str) -> str:
    table = pq.read_table(src / "action" / "train.parquet").to_pylist()
    table[1]["images"][0] = bad
    pq.write_table(pa.Table.from_pylist(table), src / "action" / "train.parquet")
    return f"{src / 'action' / 'train.parquet'} row 1 (question_id 'q2'): field 'images'"


#: (kind, what the annotation names, how to set one of its paths -> the expected "<file> <record>: field" prefix)
CASES = [("drivejudge", "image", _drivejudge_image), ("drivejudge", "scene", _drivejudge_scene),
         ("drivecritic", "scene", _drivecritic_scene), ("drivecritic", "image", _drivecritic_image),
         ("drivelmm_o1", "image", _drivelmm_json), ("drivelmm_o1", "image", _drivelmm_jsonl),
         ("openread_cot", "image", _openread_cot), ("lingoqa", "image", _lingoqa)]


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
@pytest.mark.parametrize("kind,what,set_path", CASES, ids=[f.__name__.strip("_") for _, _, f in CASES])
def test_a_path_outside_the_source_is_refused_naming_file_record_and_path(kind, what, set_path, how, tmp_path,
                                                                          capsys):
    """Only LingoQA refused an absolute or '..' path; the other converters stored whatever file it named (the file
    exists here, so only the rule can refuse it)."""
    src = tmp_path / "src"
    MAKERS[kind](src)
    if what == "scene":  # a copy of the scene the record / pair names (the first's), so only the path is wrong
        name = "outside.json"
        rows = _rows(src / ("records.jsonl" if kind == "drivejudge" else "pairs.jsonl"))
        shutil.copy(src / rows[0]["scene"], tmp_path / name)
    else:
        name = "outside.jpg" if kind in ("drivelmm_o1", "lingoqa") else "outside.png"
        _image(tmp_path / name, 0, "JPEG" if name.endswith(".jpg") else "PNG")
    bad = str(tmp_path / name) if how == "absolute" else f"../{name}"
    assert (src / bad).is_file()
    prefix = set_path(src, bad)
    assert main(["data", "build", kind, str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in (prefix, f"{bad!r} is not a path inside the source directory {src}", "relative to it"):
        assert needle in err, (needle, err)
    assert not (tmp_path / "out").exists()


def test_image_paths_through_a_symlinked_folder_under_the_source_are_followed(tmp_path):
    """The rule is about the path as written, not where it leads: nuScenes' samples/ linked under the DriveLMM-o1
    source (as docs/datasets.md suggests) is read as before."""
    src = tmp_path / "src"
    make_drivelmm(src)
    shutil.move(src / "samples", tmp_path / "nuscenes_samples")
    (src / "samples").symlink_to(tmp_path / "nuscenes_samples", target_is_directory=True)
    get_builder("drivelmm_o1").build(src, tmp_path / "out")
    item = json.loads((src / "train.json").read_text())[0]
    got = read_all(tmp_path / "out", "train", [0])[0]
    assert got["image"] == item["image"]
    assert got["image_bytes"] == [(src / p).read_bytes() for p in item["image"]]


# ---------------------------------------------------------------------------------------------- temporary folders


def _dead_pid() -> int:
    """The id of a process that has ended (a child of this test, waited for)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_temporary_folder_is_named_for_this_host_and_process(tmp_path, monkeypatch):
    """``<out>.<host>.<pid>.tmp``, the host name made safe for a file name (no '.', '/' or space)."""
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-7.pod/ns local")
    src, out = tmp_path / "src", tmp_path / "out"
    make_openread_cot(src)
    folders, write_text = [], atomic.write_text

    def spy(path, text, **kw):
        if Path(path).name == DATASET_META:
            folders.append(Path(path).parent.name)
        return write_text(path, text, **kw)

    monkeypatch.setattr(atomic, "write_text", spy)
    get_builder("openread_cot").build(src, out)
    assert folders == [f"out.gpu-7_pod_ns_local.{os.getpid()}.tmp"]
    assert (out / DATASET_META).is_file()


def test_only_stale_temporary_folders_of_this_host_are_removed(tmp_path, monkeypatch):
    """On a filesystem shared between machines, another host's live build has a process id that is not alive here:
    its folder is left alone (with a warning naming it). This host's folders go when their process is gone; a live
    one stays. Folders of the earlier naming (``<out>.<pid>.tmp``, no host) are treated as before."""
    monkeypatch.setattr(socket, "gethostname", lambda: "this-host.lab")
    src, out = tmp_path / "src", tmp_path / "out"
    make_openread_cot(src)
    dead, live = _dead_pid(), os.getppid()
    assert live != os.getpid()
    keep = {f"out.other-host.{dead}.tmp", f"out.this-host_lab.{live}.tmp", f"out.{live}.tmp"}
    gone = {f"out.this-host_lab.{dead}.tmp", f"out.{dead}.tmp"}
    for name in keep | gone:
        (tmp_path / name).mkdir()
        (tmp_path / name / "dataset_info.json").write_text("{}")
    with pytest.warns(UserWarning, match="left alone") as warned:
        get_builder("openread_cot").build(src, out)
    assert {p.name for p in tmp_path.iterdir()} == keep | {"src", "out"}
    assert [r["id"] for r in read_all(out, "train")] == ["p0", "k0"]
    warned = [str(w.message) for w in warned if "left alone" in str(w.message)]
    assert len(warned) == 1 and str(tmp_path / f"out.other-host.{dead}.tmp") in warned[0], warned
    assert "on host other-host (this is this-host_lab)" in warned[0]
