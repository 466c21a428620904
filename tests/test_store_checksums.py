"""Scene stores carry checksums (issue 54, item 3): a crc32 per record (``STORE/records.crc32.npy``) and per padded
row of every leaf (``STORE/padded/crc32.npy``), written by ``write_store`` and verified as they are read. A changed
value or a truncated file names the file and the scenes it holds; those scenes go to errors.jsonl, the rest are
scored (exit 3). Stores written before (no checksums) are read as before, with a note."""
from __future__ import annotations

import glob
import json

import numpy as np
import pytest

from jaxdrive.cli import main
from jaxdrive.data import store as store_mod
from jaxdrive.data.scene_json import read_scene
from jaxdrive.data.store import PaddedStore, SceneStore, write_store
from jaxdrive.scoring.outputs import read_results
from jaxdrive.scoring.sources import SceneStoreSource, SourceError
from conftest import EPDMS_FIXTURES

FILES = sorted(glob.glob(f"{EPDMS_FIXTURES}/*.json"))[:4]


def _change_one_value(path, row):
    mm = np.load(path, mmap_mode="r+")
    flat = mm[row].reshape(-1)
    flat[7] = flat[7] + 1.0
    mm.flush()


def test_a_changed_padded_value_is_named_with_its_file_and_scene(tmp_path):
    """The issue's case: one value of ``padded/proposals.states.npy`` changed (not in scene 0, the only scene
    ``PaddedStore.open`` compares) was scored silently; its row now fails its checksum and is left out of the batch."""
    write_store([read_scene(f) for f in FILES[:3]], tmp_path / "store")
    store = SceneStore(tmp_path / "store")
    clean = PaddedStore.open(store).batch(0, 3, 4)
    _change_one_value(tmp_path / "store" / "padded" / "proposals.states.npy", 2)
    copy = PaddedStore.open(store)
    assert copy is not None
    scene, props, good, bad = copy.checked_batch(0, 3, 4)
    assert good == [0, 1] and list(bad) == [2], bad
    assert str(tmp_path / "store" / "padded" / "proposals.states.npy") in bad[2] and "checksum" in bad[2], bad
    assert copy.ids[2] in bad[2]
    np.testing.assert_array_equal(props["states"][:2], clean[1]["states"][:2])
    np.testing.assert_array_equal(props["states"][2:], np.broadcast_to(clean[1]["states"][0], (2,) + clean[1]["states"].shape[1:]))


def test_a_record_that_fails_its_checksum_or_a_truncated_record_file_names_the_file_and_its_scenes(tmp_path,
                                                                                                    monkeypatch):
    """A record whose bytes differ from those written, and a truncated array_record file (with the padded copy
    present, its first scene's record was read to check the copy: a Riegeli traceback, exit 1): each scene it holds is
    a ``SourceError`` naming the file and the scenes it holds; the other files' scenes read."""
    monkeypatch.setattr(store_mod, "SCENES_PER_SHARD", 2)
    write_store([read_scene(f) for f in FILES], tmp_path / "store")
    crc = np.load(tmp_path / "store" / store_mod.RECORD_CRC)
    crc[3] ^= 1
    np.save(tmp_path / "store" / store_mod.RECORD_CRC, crc)
    source = SceneStoreSource(tmp_path / "store")
    err = source.load(3)
    assert isinstance(err, SourceError) and "checksum" in err.message, err
    assert "-00001-of-00002" in err.message and "scenes 2-3" in err.message, err.message
    assert source.load(2).id == read_scene(FILES[2]).id
    first = sorted((tmp_path / "store").glob("*.array_record-*"))[0]
    with open(first, "r+b") as f:
        f.truncate(first.stat().st_size // 5)
    source = SceneStoreSource(tmp_path / "store")
    assert source.padded(source.pad_spec()) is None  # scene 0 unreadable: the copy cannot be checked, scenes decoded
    for i in (0, 1):
        err = source.load(i)
        assert isinstance(err, SourceError) and first.name in err.message and "scenes 0-1" in err.message, err
    assert source.load(2).id == read_scene(FILES[2]).id


def test_a_store_written_before_checksums_reads_with_a_note(tmp_path):
    write_store([read_scene(f) for f in FILES[:2]], tmp_path / "store")
    meta_path = tmp_path / "store" / store_mod.STORE_META
    meta = json.loads(meta_path.read_text())
    del meta["checksums"]
    meta_path.write_text(json.dumps(meta))
    (tmp_path / "store" / store_mod.RECORD_CRC).unlink()
    index_path = tmp_path / "store" / "padded" / "index.json"
    index = json.loads(index_path.read_text())
    del index["checksums"]
    index_path.write_text(json.dumps(index))
    (tmp_path / "store" / "padded" / store_mod.PADDED_CRC).unlink()
    source = SceneStoreSource(tmp_path / "store")
    assert source.load(1).id == read_scene(FILES[1]).id
    copy = source.padded(source.pad_spec())
    assert copy is not None and copy.checked_batch(0, 2, 2)[2] == [0, 1]
    note = source.refresh_note(source.pad_spec())
    assert note and "without checksums" in note, note


@pytest.mark.slow  # one scoring run
def test_score_leaves_out_a_damaged_padded_row_and_scores_the_rest(tmp_path, capsys):
    write_store([read_scene(f) for f in FILES[:3]], tmp_path / "store")
    _change_one_value(tmp_path / "store" / "padded" / "proposals.states.npy", 2)
    rc = main(["score", "--scenes", str(tmp_path / "store"), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err, err
    logged = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert len(logged) == 1 and "(scene 2)" in logged[0]["name"] and "proposals.states.npy" in logged[0]["error"]
    ids = set(read_results(tmp_path / "out").scene_id)
    assert ids == {read_scene(f).id for f in FILES[:2]}, ids


def test_refresh_of_a_truncated_store_names_the_file(tmp_path, capsys):
    """``jaxdrive scenes refresh`` rewrites the padded copy from the records: a truncated record file was a Riegeli
    traceback (exit 1); it is a one-line error naming the file (exit 2)."""
    write_store([read_scene(f) for f in FILES[:2]], tmp_path / "store")
    (record,) = (tmp_path / "store").glob("*.array_record-*")
    with open(record, "r+b") as f:
        f.truncate(record.stat().st_size // 5)
    assert main(["scenes", "refresh", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert record.name in err and "holds scenes 0-1" in err and "Traceback" not in err, err
