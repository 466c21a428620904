"""Binary scene store and parallel host input of ``jaxdrive score``.

* all 61 fixtures written to a store score exactly like their JSON files (same rows, bit for bit) and like NAVSIM;
* a store's padded copy (``STORE/padded``) is what the runner reads (no scene decoded), and its rows equal those of a
  store without one (scenes decoded and padded per batch); a stale copy is refused;
* two reader processes (``--workers 2``) give the same rows as one;
* a file with a malformed value is reported in errors.jsonl by name and the rest of the run completes;
* ``jaxdrive scenes convert`` and ``jaxdrive scenes generate --store`` write stores that read back losslessly (ego-
  centred); the store's metadata gives a ``PadSpec`` holding every scene.

The four scoring runs share one padded shape and one set of capacities (one compile, then the persistent cache).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from jaxdrive.cli import main
from jaxdrive.data.scene_json import read_scene
from jaxdrive.data.store import SceneStore, is_store, write_store
from jaxdrive.data.synthetic import generate_scene
from jaxdrive.scene import PadSpec, batch_scenes
from jaxdrive.scoring.outputs import ERRORS, read_results
from jaxdrive.scoring.runner import ScoreOptions, score_source
from jaxdrive.scoring.sources import SceneDirSource, SceneStoreSource, SourceError
from conftest import EPDMS_FIXTURES

FILES = sorted(glob.glob(f"{EPDMS_FIXTURES}/*.json")) + sorted(glob.glob(f"{EPDMS_FIXTURES}/sanity/*.json"))
COLUMNS = ["nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc", "ec", "pdm_score", "epdms", "raw_progress", "nc_step",
           "ttc_step", "lk_step"]


class _PaddedOnly(SceneStoreSource):
    """A store source that fails if a scene is decoded: the run must read the padded copy."""

    def iter_range(self, start, stop):
        raise AssertionError("a scene was decoded although the store has a padded copy")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("store")
    scenes = [read_scene(f) for f in FILES]
    store = tmp / "store"
    write_store(scenes, store)
    decoded = tmp / "decoded"  # a store without the padded copy (as written before it existed)
    write_store(scenes, decoded, padded=False)
    json_dir = tmp / "json"
    json_dir.mkdir()
    for f in FILES:
        shutil.copy(f, json_dir)
    bad = json.loads(open(FILES[0]).read())
    bad["id"] = "malformed"
    bad["agents"][0]["height"] = "tall"
    (json_dir / "zz_malformed.json").write_text(json.dumps(bad))
    options = lambda workers: ScoreOptions(batch_size=16, shard_size=32, workers=workers,
                                           pad=SceneStoreSource(store).pad_spec())
    out = {}
    for name, source, workers in (("store", _PaddedOnly(store), 1), ("decoded", SceneStoreSource(decoded), 1),
                                  ("store2", SceneStoreSource(decoded), 2), ("json", SceneDirSource(json_dir), 1)):
        stats = score_source(source, tmp / name, options(workers), progress=False)
        out[name] = (tmp / name, stats, read_results(tmp / name).sort_values(["scene_id", "proposal"])
                     .reset_index(drop=True))
    return out


@pytest.mark.slow  # four scoring runs (one compile)
def test_store_rows_equal_json_rows_and_navsim(runs):
    _, _, store = runs["store"]
    _, stats, js = runs["json"]
    assert len(store) == 507 and store.scene_id.nunique() == 61
    for col in COLUMNS:
        np.testing.assert_array_equal(store[col].to_numpy(), js[col].to_numpy(), err_msg=col)
    assert stats.compiles == 1
    for f in FILES:  # NAVSIM's EPDMS through the store
        sc = json.load(open(f))
        rows = store[store.scene_id == sc["id"]].sort_values("proposal")
        want = [p.get("epdms") for p in sc["expected"]["proposals"]]
        if want[0] is not None:
            np.testing.assert_allclose(rows.epdms.to_numpy(), want, atol=1e-4, err_msg=sc["id"])


@pytest.mark.slow  # four scoring runs (one compile)
def test_padded_copy_rows_equal_decoded_store_rows(runs):
    padded, decoded = runs["store"][2], runs["decoded"][2]
    assert len(padded) == len(decoded) == 507
    for col in ["scene_id", "proposal", "proposal_name"] + COLUMNS:
        np.testing.assert_array_equal(padded[col].to_numpy(), decoded[col].to_numpy(), err_msg=col)
    assert runs["store"][1].compiles == 1


def test_padded_copy_batches_equal_batch_scenes_and_a_stale_copy_is_refused(tmp_path):
    from jaxdrive.data.store import PADDED_DIR, PADDED_INDEX
    from jaxdrive.scene import Proposals
    from jaxdrive.scene.device import _build

    scenes = [read_scene(f) for f in FILES[:5]]
    write_store(scenes, tmp_path / "store")
    store = SceneStore(tmp_path / "store")
    copy = store.padded()
    assert copy is not None and copy.ids == [s.id for s in scenes]
    assert copy.counts == [s.num_proposals for s in scenes]
    assert copy.names == [list(s.proposal_names) for s in scenes]
    pad = store.pad_spec()
    got_scene, got_props = copy.batch(1, 4, 5)  # 3 scenes + 2 filler rows (copies of the first)
    back = [store[i] for i in (1, 2, 3, 1, 1)]
    want_scene, want_props, _ = batch_scenes(back, pad, validate=False)
    for x, y in zip(jax.tree.leaves((want_scene, want_props)), jax.tree.leaves((_build(got_scene),
                                                                                Proposals(**got_props)))):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    source = SceneStoreSource(tmp_path / "store")
    assert source.padded(pad) is not None
    assert source.padded(PadSpec(**{**vars(pad), "agents": pad.agents + 8})) is None  # another PadSpec: decode

    length = np.load(tmp_path / "store" / PADDED_DIR / "scene.agents.length.npy", mmap_mode="r+")
    length[0, 0] += 1.0  # no longer what pad_scene makes of scene 0
    length.flush()
    del length
    assert SceneStore(tmp_path / "store").padded() is None
    assert write_store(scenes[:1], tmp_path / "old", padded=False) and SceneStore(tmp_path / "old").padded() is None
    index = json.loads((tmp_path / "store" / PADDED_DIR / PADDED_INDEX).read_text())
    from jaxdrive.data.store import write_padded

    write_padded(tmp_path / "store")  # rewritten: valid again
    assert SceneStore(tmp_path / "store").padded() is not None
    index["sha256"] = "0" * 64  # written for other scenes
    (tmp_path / "store" / PADDED_DIR / PADDED_INDEX).write_text(json.dumps(index))
    assert SceneStore(tmp_path / "store").padded() is None


@pytest.mark.slow  # four scoring runs (one compile)
def test_two_reader_processes_give_the_rows_of_one(runs):
    one, two = runs["decoded"][2], runs["store2"][2]
    assert len(one) == len(two)
    for col in ["scene_id", "proposal", "proposal_name"] + COLUMNS:
        np.testing.assert_array_equal(one[col].to_numpy(), two[col].to_numpy(), err_msg=col)


@pytest.mark.slow  # four scoring runs (one compile)
def test_malformed_value_is_named_in_errors_and_the_rest_completes(runs):
    path, stats, js = runs["json"]
    assert js.scene_id.nunique() == 61
    errors = [json.loads(line) for line in (path / ERRORS).read_text().splitlines()]
    assert len(errors) == 1 and errors[0]["name"].endswith("zz_malformed.json"), errors
    assert "height" in errors[0]["error"] or "tall" in errors[0]["error"], errors


def test_convert_cli_and_synthetic_store_round_trip(tmp_path, capsys):
    src = tmp_path / "json"
    src.mkdir()
    for f in FILES[:3]:
        shutil.copy(f, src)
    assert main(["scenes", "convert", str(src), "--out", str(tmp_path / "store"), "--no-progress"]) == 0
    assert is_store(tmp_path / "store") and not is_store(src)
    back = SceneStore(tmp_path / "store")
    originals = [read_scene(f) for f in FILES[:3]]
    assert len(back) == 3 and [back[i].id for i in range(3)] == [s.id for s in originals]
    spec = PadSpec.fit(originals)
    for a, b in zip(batch_scenes(originals, spec)[:2], batch_scenes([back[i] for i in range(3)], spec)[:2]):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):  # identical padded batches, so identical scores
            np.testing.assert_array_equal(x, y)
    assert back[0].history_states[-1, :2].tolist() == [0.0, 0.0]  # ego-centred
    assert all(getattr(back.pad_spec(), k) >= getattr(PadSpec.fit(originals), k) for k in spec.__dataclass_fields__)
    assert main(["scenes", "convert", str(src), "--out", str(tmp_path / "store")]) == 2  # refuses to overwrite
    shutil.copy(FILES[1], src / "zz_copy_of_the_second.json")  # one scene id in two files
    assert main(["scenes", "convert", str(src), "--out", str(tmp_path / "dup"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "in two inputs" in err and "zz_copy_of_the_second.json" in err and Path(FILES[1]).name in err, err
    assert not (tmp_path / "dup").exists()  # no half-written store left behind
    (tmp_path / "dup2").mkdir()
    (tmp_path / "dup2" / "notes.txt").write_text("mine")
    assert main(["scenes", "convert", str(src), "--out", str(tmp_path / "dup2"), "--no-progress"]) == 2
    assert [p.name for p in (tmp_path / "dup2").iterdir()] == ["notes.txt"]  # only what it wrote is removed

    assert main(["scenes", "generate", "--count", "2", "--seed", "5", "--proposals", "3", "--store",
                 "--out", str(tmp_path / "synthetic")]) == 0
    synthetic = SceneStore(tmp_path / "synthetic")
    want = generate_scene(6, num_proposals=3)
    got = synthetic[1]
    assert got.id == want.id
    np.testing.assert_array_equal(got.proposal_states[..., :2], want.proposal_states[..., :2] - want.origin)


def test_a_store_is_not_written_onto_a_file_nor_over_a_folder_of_scene_files(tmp_path, capsys):
    """``scenes convert SRC --out X``: a file X was a FileExistsError traceback (exit 1); X = SRC itself, or a folder
    above it, got the store among the scene files, after which every command listing the folder's scenes skipped them
    (a store's folder holds no scenes): ``convert``, ``add-pdm-closed`` and ``vocab --scenes`` found none."""
    src = tmp_path / "json"
    src.mkdir()
    for f in FILES[:2]:
        shutil.copy(f, src)
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "sub", src, tmp_path):
        assert main(["scenes", "convert", str(src), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"--out {out}" in err, err
    assert main(["scenes", "generate", "--count", "1", "--store", "--out", str(src)]) == 2
    assert "holds scene JSON files" in capsys.readouterr().err
    assert not is_store(src) and not is_store(tmp_path)
    assert sorted(p.name for p in src.iterdir()) == sorted(Path(f).name for f in FILES[:2])


def test_a_store_whose_metadata_is_not_json_is_named(tmp_path, capsys):
    """A damaged ``jaxdrive_store.json`` (a partial copy) was reported as json's words alone ("Expecting ','
    delimiter: line 1 column 12"), naming no file."""
    write_store([read_scene(f) for f in FILES[:1]], tmp_path / "store")
    (tmp_path / "store" / "jaxdrive_store.json").write_text('{"format": ')
    for argv in (["scenes", "refresh", str(tmp_path / "store")],
                 ["score", "--scenes", str(tmp_path / "store"), "--out", str(tmp_path / "run"), "--no-progress"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert str(tmp_path / "store" / "jaxdrive_store.json") in err and "Traceback" not in err, err


def test_a_store_missing_its_record_file_is_named(tmp_path, capsys):
    """A store copied without its array_record file (a partial copy): `scenes refresh` and `score` gave array_record's
    "RuntimeError: open() failed: No such file or directory" traceback from the first read."""
    write_store([read_scene(f) for f in FILES[:1]], tmp_path / "store")
    (record,) = (tmp_path / "store").glob("*.array_record-*")
    record.unlink()
    for argv in (["scenes", "refresh", str(tmp_path / "store")],
                 ["score", "--scenes", str(tmp_path / "store"), "--out", str(tmp_path / "run"), "--no-progress"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / 'store'}: 1 of its 1 record files are missing ({record.name})" in err, err
        assert "Traceback" not in err, err


def test_a_damaged_store_names_its_unreadable_scenes_instead_of_a_traceback(tmp_path, capsys):
    """A store whose record file was truncated (a partial copy): each scene it cannot read is named in errors.jsonl
    (exit 3, "no scenes scored" when none is left), not a traceback."""
    write_store([read_scene(f) for f in FILES[:3]], tmp_path / "store")
    (record,) = (tmp_path / "store").glob("*.array_record-*")
    with open(record, "r+b") as f:
        f.truncate(record.stat().st_size // 5)
    shutil.rmtree(tmp_path / "store" / "padded")  # the padded copy would not read the records at all
    rc = main(["score", "--scenes", str(tmp_path / "store"), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err, err
    logged = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert logged and all("corrupt store record" in e["error"] and "(scene " in e["name"] for e in logged), logged


@pytest.mark.slow  # two compiles (the prescanned capacities, then grown ones)
def test_a_batch_beyond_the_prescanned_capacities_is_rescored_with_identical_rows(runs, tmp_path, monkeypatch):
    """Only the first batch (the 8 scenes with fewest proposals) is prescanned (a store without its scenes' needs);
    the second (the 8 with most) overflows,
    is re-scored at grown capacities, and its rows equal those of the 61-scene run (whose prescan saw every batch)."""
    import jaxdrive.scoring.runner as runner

    scenes = sorted((read_scene(f) for f in FILES), key=lambda s: s.num_proposals)
    chosen = scenes[:8] + scenes[-8:]
    write_store(chosen, tmp_path / "store")
    (tmp_path / "store" / "padded" / "needs.npy").unlink()  # no stored needs (as before they existed): a prescan
    monkeypatch.setattr(runner, "PRESCAN_BATCHES", 1)
    monkeypatch.setattr(runner, "PRESCAN_SCENES", 0)
    source = SceneStoreSource(tmp_path / "store")
    stats = score_source(source, tmp_path / "out", ScoreOptions(batch_size=8, shard_size=8, pad=source.pad_spec()),
                         progress=False)
    assert stats.overflow_batches == 1 and stats.compiles == 2
    got = read_results(tmp_path / "out").sort_values(["scene_id", "proposal"]).reset_index(drop=True)
    want = runs["json"][2]
    want = want[want.scene_id.isin([s.id for s in chosen])].reset_index(drop=True)
    assert len(got) == len(want) == sum(s.num_proposals for s in chosen)
    for col in ["scene_id", "proposal"] + COLUMNS:  # another program (batch size, pads): float32 sums to 1 ulp
        if col in ("ep", "pdm_score", "epdms", "raw_progress"):
            np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=3e-7, atol=0, err_msg=col)
        else:
            np.testing.assert_array_equal(got[col].to_numpy(), want[col].to_numpy(), err_msg=col)


def test_a_failed_shard_write_is_raised_and_earlier_shards_stay_committed(runs, tmp_path, monkeypatch):
    """Shards are committed by a background writer: its failure surfaces from ``score_source``; the shards committed
    before it are in the manifest, none after it."""
    from jaxdrive.scoring.outputs import MANIFEST, RunDir

    real = RunDir.write_shard

    def failing(self, shard, columns, errors, shapes):
        if shard == 1:
            raise OSError(28, "No space left on device")
        real(self, shard, columns, errors, shapes)

    monkeypatch.setattr(RunDir, "write_shard", failing)
    source = SceneStoreSource(runs["store"][0].parent / "store")
    with pytest.raises(OSError, match="No space left"):
        score_source(source, tmp_path / "out", ScoreOptions(batch_size=16, shard_size=16, pad=source.pad_spec()),
                     progress=False)
    assert list(json.loads((tmp_path / "out" / MANIFEST).read_text())["completed"]) == ["0"]


def test_columns_keep_real_proposals_in_scene_order():
    from jaxdrive.metrics import AGGREGATES, GATES, STEPS
    from jaxdrive.rules.epdms import SubScores
    from jaxdrive.scoring.runner import _columns

    import dataclasses

    b, k = 3, 4
    value = np.arange(b * k, dtype=np.float32).reshape(b, k)
    sub = SubScores(**{f.name: (value.astype(np.int32) if f.name.endswith("_step") else
                                np.zeros((b, k, 6), bool) if f.name == "hc_checks" else value)
                       for f in dataclasses.fields(SubScores)})
    cols = _columns(sub, ["a", "b"], [["a0", "a1", "a2"], ["b0"]], [3, 1])  # scene 3: filler
    assert cols["scene_id"].tolist() == ["a", "a", "a", "b"]
    assert cols["proposal"].tolist() == [0, 1, 2, 0] and cols["proposal"].dtype == np.int32
    assert cols["proposal_name"].tolist() == ["a0", "a1", "a2", "b0"]
    for f in GATES + AGGREGATES + ("raw_progress",):
        assert cols[f].tolist() == [0.0, 1.0, 2.0, 4.0] and cols[f].dtype == np.float64
    for f in STEPS:
        assert cols[f].tolist() == [0, 1, 2, 4] and cols[f].dtype == np.int32


def test_prescan_picks_the_first_batch_then_one_per_stratum_not_a_fixed_stride():
    """A store in periodic order (16 scenes repeated, batches of 4: 4 batch compositions over 120 batches): evenly
    spaced picks saw compositions 0 and 3 only, and a batch of another overflowed mid-run; the stratified picks see
    every composition. Every batch is read when there are at most ``count``; the first always."""
    from jaxdrive.scoring.runner import prescan_picks

    picks = prescan_picks(120, 16)
    assert len(picks) == 16 and picks[0] == 0 and picks == sorted(set(picks)) and picks[-1] < 120
    for period in (2, 3, 4, 5, 6):
        assert {p % period for p in picks} == set(range(period)), period
    assert prescan_picks(120, 16) == picks  # seeded: a run (and its resume) reads the same batches
    assert prescan_picks(10, 16) == list(range(10)) and prescan_picks(16, 16) == list(range(16))
    assert prescan_picks(2, 1) == [0] and prescan_picks(1, 16) == [0]
    edges = np.linspace(0, 500, 17).round().astype(int)
    assert all(lo <= p < hi for p, lo, hi in zip(prescan_picks(500, 16)[1:], edges[1:-1], edges[2:]))


def test_small_batches_are_prescanned_over_at_least_prescan_scenes():
    """A device group of one or two scenes varies far more than one of 16 (a run of 48 synthetic scenes in batches
    of 2 overflowed 5 times when 16 of its 24 batches were read): the prescan reads at least ``PRESCAN_SCENES``."""
    from jaxdrive.scoring.runner import PRESCAN_BATCHES, PRESCAN_SCENES, prescan_count

    assert prescan_count(16) == max(PRESCAN_BATCHES, PRESCAN_SCENES // 16)
    assert prescan_count(2) == PRESCAN_SCENES // 2 > PRESCAN_BATCHES
    assert prescan_count(1024) == PRESCAN_BATCHES


def test_red_light_capacities_get_more_room_and_an_overflow_grows_geometrically():
    """Red-light pairs are 0 in most scenes and many in a few: ``capacity_for`` gives them ``RED_HEADROOM``. After an
    overflow, only the fields the batch exceeded grow: to ``SAMPLED_HEADROOM`` above its need and at least twice."""
    from jaxdrive.broadphase import PackSpec
    from jaxdrive.scorer import RED_HEADROOM, capacity_for
    from jaxdrive.scoring.runner import OVERFLOW_GROWTH, SAMPLED_HEADROOM, grown_capacity

    need = PackSpec(area_pairs=100, area_tiles=100, lane_pairs=100, lane_tiles=100, red_pairs=15, red_tiles=15,
                    centerline=100, agents=10, near_segments=40, nc_pairs=50, ttc_pairs=50)
    cap = capacity_for(need)
    assert RED_HEADROOM == 4.0 and cap.red_pairs == cap.red_tiles == 64  # 15 x 4 = 60, to a multiple of 8
    assert cap.lane_pairs == 128 and cap.centerline == 128 and cap.agents == 16
    assert capacity_for(need, 5.0).red_pairs == 80
    assert (SAMPLED_HEADROOM, OVERFLOW_GROWTH) == (1.5, 2.0)
    bigger = dataclasses.replace(need, lane_tiles=129, nc_pairs=200, red_pairs=64)
    grown = grown_capacity(cap, bigger)
    assert grown.lane_tiles == 256  # 129 x 1.5 = 194 -> 200, but at least twice 128
    assert grown.nc_pairs == 304  # 200 x 1.5 = 300 -> 304, more than twice 64
    assert grown.red_pairs == 64  # a need equal to the capacity fits
    overflowed = {"lane_tiles", "nc_pairs"}
    assert all(getattr(grown, f.name) == getattr(cap, f.name) for f in dataclasses.fields(cap) if f.name not in overflowed)


@pytest.mark.slow  # two compiles
def test_a_store_sizes_all_its_batches_from_the_needs_it_keeps(tmp_path, monkeypatch):
    """The padded copy keeps each scene's broad-phase needs (``scene_needs`` of the scenes, exactly); a run over the
    store reads no batch to size its capacities (``needs`` is never called) and they are the union of every batch's
    needs; with a stale fingerprint the stored needs are ignored and the run scans its batches, same rows."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.broadphase import PackSpec
    from jaxdrive.broadphase.device import needs, scene_needs
    from jaxdrive.scorer import capacity_for

    scenes = [read_scene(f) for f in FILES[:24]]
    write_store(scenes, tmp_path / "store")
    source = SceneStoreSource(tmp_path / "store")
    pad = source.pad_spec()
    sc, pr, _ = batch_scenes(scenes, pad)
    np.testing.assert_array_equal(source.padded(pad).needs, scene_needs(sc, pr))

    calls = []
    real = runner.needs
    monkeypatch.setattr(runner, "needs", lambda *a: calls.append(1) or real(*a))
    options = ScoreOptions(batch_size=8, shard_size=8, pad=pad)
    stats = score_source(source, tmp_path / "kept", options, progress=False)
    ndev = jax.device_count()
    union = PackSpec(**{f: 1 for f in PackSpec.__dataclass_fields__}).union(*[
        needs(*batch_scenes(scenes[i:i + 8], pad)[:2], ndev) for i in range(0, 24, 8)])
    assert calls == [] and stats.capacity == capacity_for(union, runner.CAPACITY_HEADROOM)
    assert stats.overflow_batches == 0 and stats.compiles == 1

    index = tmp_path / "store" / "padded" / "index.json"
    index.write_text(index.read_text().replace(source.padded(pad).index["needs"], "stale"))
    stale = SceneStoreSource(tmp_path / "store")
    assert stale.padded(pad) is not None and stale.padded(pad).needs is None
    score_source(stale, tmp_path / "scanned", options, progress=False)
    assert len(calls) == 3  # every batch scanned (at most PRESCAN_BATCHES)
    pd.testing.assert_frame_equal(read_results(tmp_path / "scanned").sort_values(["scene_id", "proposal"])
                                  .reset_index(drop=True),
                                  read_results(tmp_path / "kept").sort_values(["scene_id", "proposal"])
                                  .reset_index(drop=True))


def test_scenes_refresh_rewrites_stale_needs_and_a_missing_padded_copy(tmp_path, capsys):
    """``jaxdrive scenes refresh STORE``: needs with another jaxdrive's fingerprint are measured again (the padded
    copy kept), a missing copy is written again; both give the needs the store was written with; a current store is
    left alone. ``jaxdrive score`` names the command when a store would be read the slow way."""
    from jaxdrive.data.store import PaddedStore

    write_store([read_scene(f) for f in FILES[:8]], tmp_path / "store")
    store = SceneStore(tmp_path / "store")
    pad = store.pad_spec()
    want = store.padded().needs
    assert want is not None and SceneStoreSource(tmp_path / "store").refresh_note(pad) is None
    index = tmp_path / "store" / "padded" / "index.json"
    index.write_text(index.read_text().replace(store.padded().index["needs"], "stale"))
    before = (tmp_path / "store" / "padded" / "scene.agents.center.npy").stat().st_mtime_ns
    assert "refresh" in SceneStoreSource(tmp_path / "store").refresh_note(pad)
    assert main(["score", "--scenes", str(tmp_path / "store"), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "measured by another jaxdrive" in capsys.readouterr().err  # the run completes, and says how to fix it

    assert main(["scenes", "refresh", str(tmp_path / "store")]) == 0
    assert "rewrote the broad-phase needs of its 8 scenes" in capsys.readouterr().out
    np.testing.assert_array_equal(PaddedStore.open(SceneStore(tmp_path / "store")).needs, want)
    assert (tmp_path / "store" / "padded" / "scene.agents.center.npy").stat().st_mtime_ns == before  # copy kept
    assert main(["scenes", "refresh", str(tmp_path / "store")]) == 0
    assert "up to date (8 scenes)" in capsys.readouterr().out

    index.write_text(index.read_text().replace('"version": 2', '"version": 1'))  # before has_human = filters_human
    assert PaddedStore.open(SceneStore(tmp_path / "store")) is None
    assert "no current padded copy" in SceneStoreSource(tmp_path / "store").refresh_note(pad)
    shutil.rmtree(tmp_path / "store" / "padded")
    assert "no current padded copy" in SceneStoreSource(tmp_path / "store").refresh_note(pad)
    assert main(["scenes", "refresh", str(tmp_path / "store")]) == 0
    assert "wrote the padded copy and the broad-phase needs of its 8 scenes" in capsys.readouterr().out
    np.testing.assert_array_equal(PaddedStore.open(SceneStore(tmp_path / "store")).needs, want)
    assert main(["scenes", "refresh", str(tmp_path / "nowhere")]) == 2


def test_a_store_scene_without_proposals_is_named_not_the_end_of_the_run(tmp_path, capsys):
    """A store may hold scenes without proposals (``jaxdrive scenes convert`` of a folder with one, converted NAVSIM
    caches); ``--proposals`` does not pair with a store, so such a scene cannot be scored. It was padded as is and
    the run stopped with a usage error (exit 2) at its batch, the store's other scenes unscored; it is now an
    errors.jsonl row naming the scene, like a JSON file without proposals."""
    import dataclasses

    with_proposals = read_scene(FILES[0])
    empty = dataclasses.replace(read_scene(FILES[1]), proposal_states=np.zeros((0, 41, 11)), proposal_names=[],
                                proposal_families=[], previous_states=None, previous_kinds=None)
    write_store([with_proposals, empty], tmp_path / "mixed")
    source = SceneStoreSource(tmp_path / "mixed")
    assert source.load(0).id == with_proposals.id
    error = source.load(1)
    assert isinstance(error, SourceError) and empty.id in error.message and "no proposals" in error.message, error
    write_store([empty], tmp_path / "store")  # nothing to score: exit 3 without a compile
    rc = main(["score", "--scenes", str(tmp_path / "store"), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 3 and "no scenes scored" in err, err
    assert "1 of its 1 scenes hold no proposals" in err and "scenes refresh" not in err, err  # refresh writes none
    logged = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert len(logged) == 1 and empty.id in logged[0]["error"] and "(scene 0)" in logged[0]["name"], logged


def test_per_proposal_gates_of_another_row_count_are_refused_before_a_store_is_scored(tmp_path, monkeypatch, capsys):
    """A store knows each scene's proposal count K (its padded copy's index): per-proposal --gates rows of another
    count are refused up front (exit 2), naming --gates, the scenes, K and the rows given, before any scene is read
    or the scorer compiled; they used to stop the run at the first batch holding one, after the first shards."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.metrics import GATES

    monkeypatch.setattr(runner, "build_step", lambda *a, **k: pytest.fail("compiled before --gates rows were checked"))
    monkeypatch.setattr(SceneStoreSource, "iter_range", _PaddedOnly.iter_range)
    scenes = [read_scene(f) for f in FILES[:4]]
    write_store(scenes, tmp_path / "store")
    rows = [s.num_proposals + (i >= 2) for i, s in enumerate(scenes)]  # scenes 2 and 3: one row too many
    (tmp_path / "gates.json").write_text(json.dumps({s.id: [[True] * len(GATES)] * n for s, n in zip(scenes, rows)}))
    out = tmp_path / "out"
    rc = main(["score", "--scenes", str(tmp_path / "store"), "--gates", str(tmp_path / "gates.json"),
               "--out", str(out), "--batch-size", "2", "--shard-size", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "--gates" in err and "2 of the run's 4 scenes" in err and "Traceback" not in err, err
    for s, n in zip(scenes[2:], rows[2:]):
        assert f"{s.id!r} (expected {s.num_proposals} rows, got {n})" in err, err
    assert not out.exists()  # no shard written, no run left behind


def test_a_store_knows_its_proposal_counts_without_decoding_a_scene(tmp_path, monkeypatch):
    """``SceneStoreSource.proposal_counts`` (and ``scene_ids``): from the padded copy's index, also when its arrays
    are stale (no scene decoded); a store without a copy decodes its scenes, once for both."""
    from jaxdrive.data.store import PADDED_DIR

    scenes = [read_scene(f) for f in FILES[:3]]
    ids, counts = [s.id for s in scenes], [s.num_proposals for s in scenes]
    write_store(scenes, tmp_path / "store")
    length = np.load(tmp_path / "store" / PADDED_DIR / "scene.agents.length.npy", mmap_mode="r+")
    length[0, 0] += 1.0  # the copy is stale (not read by a run), its index still names the store's scenes
    length.flush()
    del length
    source = _PaddedOnly(tmp_path / "store")
    assert source.store.padded() is None
    assert source.scene_ids() == ids and source.proposal_counts(ids) == counts

    write_store(scenes, tmp_path / "bare", padded=False)
    source = SceneStoreSource(tmp_path / "bare")
    decoded = []
    real = SceneStoreSource.iter_range
    monkeypatch.setattr(SceneStoreSource, "iter_range", lambda self, a, b: decoded.append((a, b)) or real(self, a, b))
    assert source.scene_ids() == ids and source.proposal_counts(ids) == counts and decoded == [(0, 3)]


def test_scenes_refresh_and_convert_name_their_positional_argument(tmp_path, capsys):
    """``scenes refresh STORE`` said "--scenes X: not a jaxdrive scene store" although no ``--scenes`` was typed;
    ``scenes convert JSON_DIR`` with a missing folder or a file said "no *.json scene files found"."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "nowhere", tmp_path / "empty"):
        assert main(["scenes", "refresh", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"STORE {path}: not a jaxdrive scene store" in err and "--scenes" not in err, err
    for path, says in ((tmp_path / "nowhere", "does not exist"), (tmp_path / "f", "is a file, not a directory")):
        assert main(["scenes", "convert", str(path), "--out", str(tmp_path / "s"), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"JSON_DIR {path}: {says}" in err and "no *.json" not in err, err
    assert main(["scenes", "convert", str(tmp_path / "empty"), "--out", str(tmp_path / "s"), "--no-progress"]) == 2
    assert f"JSON_DIR {tmp_path / 'empty'}: no *.json scene files found" in capsys.readouterr().err
