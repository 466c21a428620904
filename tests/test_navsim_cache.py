"""NAVSIM metric-cache import: restricted unpickler (refusal by name, numpy 1.x spellings), content and scores of the 61
converted fixture caches against the scenes they came from, ``scenes from-navsim`` and ``score --proposals P.npz``.
No NAVSIM install: the converter reads the pickles with its own allow-list."""

import dataclasses
import io
import json
import lzma
import os
import pickle
import shutil
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from jaxdrive.cli import EXIT_PARTIAL, main
from jaxdrive.data.navsim_cache import (ALLOWED, CacheUnpickler, UnsafeCacheError, find_caches, load_cache,
                                        read_cache_scene)
from jaxdrive.data.scene_json import read_scene
from jaxdrive.rules import score
from jaxdrive.scene import PadSpec, batch_scenes
from jaxdrive.scoring.outputs import read_results
from conftest import EPDMS_FIXTURES, SHARED

CACHE_DIR = SHARED / "fixtures" / "navsim_cache"
OFFICIAL = SHARED / "fixtures" / "navsim_official"
EXACT = {"nc": "no_at_fault_collisions", "dac": "drivable_area_compliance", "ddc": "driving_direction_compliance",
         "tlc": "traffic_light_compliance", "ttc": "time_to_collision_within_bound", "lk": "lane_keeping",
         "hc": "history_comfort", "ec": "two_frame_extended_comfort", "multiplier": "multiplicative_metrics_prod"}
CLOSE = {"ep": "ego_progress", "pdm_score": "pdm_score", "epdms": "epdms", "raw_progress": "raw_progress_m"}
SCORE = jax.jit(score)


def _scene_file(token: str):
    return EPDMS_FIXTURES / (f"{token}.json" if token.startswith("scene_") else f"sanity/{token}.json")


@pytest.fixture(scope="module")
def converted():
    caches = find_caches(CACHE_DIR)
    return {token: read_cache_scene(path) for token, path in caches}


def test_walk_finds_every_fixture_cache():
    tokens = [t for t, _ in find_caches(CACHE_DIR)]
    assert len(tokens) == 61
    assert tokens == sorted(p.stem for p in list(EPDMS_FIXTURES.glob("scene_*.json"))
                            + list(EPDMS_FIXTURES.glob("sanity/sanity_*.json")))


def test_content_matches_the_fixture_scenes(converted):
    for token, got in converted.items():
        want = read_scene(_scene_file(token))
        assert got.id == token and got.num_proposals == 0
        np.testing.assert_allclose(got.history_states, want.history_states, atol=1e-9, err_msg=token)
        np.testing.assert_array_equal(got.centerline, want.centerline)
        assert [(a.id, a.kind) for a in got.areas] == [(a.id, a.kind) for a in want.areas], token
        for a, b in zip(got.areas + got.lanes, want.areas + want.lanes):
            np.testing.assert_array_equal(a.polygon, b.polygon)
        assert [(l.id, l.kind, l.on_route) for l in got.lanes] == [(l.id, l.kind, l.on_route) for l in want.lanes]
        agents = {a.id: a for a in got.agents}
        assert sorted(agents) == sorted(a.id for a in want.agents), token
        for b in want.agents:
            a = agents[b.id]
            assert (a.type, a.length, a.width, a.height) == (b.type, b.length, b.width, b.height)
            np.testing.assert_array_equal(np.isnan(a.track), np.isnan(b.track))
            expected = b.track.copy()
            if not b.type.is_agent:
                expected[:, 3:] = np.where(np.isnan(expected[:, 3:]), np.nan, 0.0)
            np.testing.assert_allclose(a.track, expected, atol=1e-12, err_msg=f"{token}/{b.id}")
        on_route = {l.id for l in want.lanes if l.on_route}
        red = {k: v for k, v in want.traffic_lights.items() if k in on_route and "R" in v}
        assert sorted(got.traffic_lights) == sorted(red), token
        for lc, status in got.traffic_lights.items():
            assert [c == "R" for c in status] == [c == "R" for c in red[lc]]


def test_reference_and_human_are_navsims_simulated_rows(converted):
    """The PDM-Closed row and the human-filter row NAVSIM's own evaluation simulated (navsim_official fixtures)."""
    for token in ("scene_0000", "scene_0013", "sanity_wrong_way"):
        official = json.loads((OFFICIAL / f"{token}.json").read_text())
        scene = converted[token]
        np.testing.assert_allclose(scene.extra["reference"]["states"], official["pdm_closed"]["ego_simulated_states"],
                                   atol=2e-6)
        np.testing.assert_allclose(scene.human_states, official["human_trajectory"]["ego_simulated_states"], atol=2e-6)


@pytest.mark.slow
def test_converted_caches_score_like_the_fixture_scenes(converted):
    """Fixture proposals scored against converted caches reproduce NAVSIM's expected values of the fixture scenes."""
    tokens = sorted(converted)
    sources = {t: read_scene(_scene_file(t)) for t in tokens}
    scenes = [dataclasses.replace(converted[t], proposal_states=s.proposal_states, proposal_names=s.proposal_names,
                                  proposal_families=s.proposal_families, previous_states=s.previous_states,
                                  previous_kinds=s.previous_kinds) for t, s in sources.items()]
    spec = PadSpec.fit(scenes + list(sources.values()))
    half = (len(scenes) + 1) // 2
    outs = []
    for part in (scenes[:half], scenes[half:] + scenes[:1]):
        sc, props, _ = batch_scenes(part, spec)
        outs.append(jax.device_get(SCORE(sc, props)))
    failures, compared = [], 0
    for i, token in enumerate(tokens):
        out, b = (outs[0], i) if i < half else (outs[1], i - half)
        for k, want in enumerate(sources[token].expected["proposals"]):
            for m, key in list(EXACT.items()) + list(CLOSE.items()):
                w = want["diagnostics"].get(key, want.get(key))
                if w is None:
                    continue  # sanity scenes have no EC / epdms
                g = float(np.asarray(getattr(out, m))[b, k])
                compared += 1
                if not (abs(g - w) <= 1e-4 if m in CLOSE else g == w):
                    failures.append(f"{token}/{k} {m}: got {g}, NAVSIM {w}")
    assert compared > 5000
    assert not failures, "\n".join(failures[:20])


def _pickle_bytes(obj_bytes: bytes) -> bytes:
    return lzma.compress(obj_bytes)


class _Evil:
    def __reduce__(self):
        import os

        return os.system, ("touch PWNED",)


def test_foreign_global_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "x" / "metric_cache.pkl"
    path.parent.mkdir()
    path.write_bytes(_pickle_bytes(pickle.dumps({"observation": _Evil()}, protocol=5)))
    with pytest.raises(UnsafeCacheError, match=r"refused global '(posix|os)\.system'"):
        load_cache(path)
    assert not (tmp_path / "PWNED").exists()
    # a builtin reached through an allowed-looking module path is refused too
    crafted = b"\x80\x05\x8c\x08builtins\x8c\x04eval\x93\x8c\x041+1\x85R."
    with pytest.raises(UnsafeCacheError, match="'builtins.eval'"):
        CacheUnpickler(io.BytesIO(crafted)).load()


def test_numpy1_spellings_load():
    """Caches written under numpy 1.x name numpy.core.*; the unpickler maps them to the same numpy functions."""
    data = pickle.dumps([np.arange(6.0).reshape(2, 3), np.float64(2.5)], protocol=3)  # GLOBAL: names as text lines
    old = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray").replace(b"numpy._core.numeric",
                                                                                   b"numpy.core.numeric")
    assert b"numpy.core.multiarray" in old and b"numpy._core" not in old
    arr, scalar = CacheUnpickler(io.BytesIO(old)).load()
    np.testing.assert_array_equal(arr, np.arange(6.0).reshape(2, 3))
    assert scalar == 2.5 and "numpy.core.multiarray.scalar" in ALLOWED


@pytest.mark.slow
def test_from_navsim_cli_then_score_with_proposal_file(tmp_path, capsys):
    """Walk a nested tree (2 good caches + 1 malicious), write scenes, score them with P.npz (row order)."""
    tokens = ["scene_0003", "sanity_red_on_route"]
    cache_map = dict(find_caches(CACHE_DIR))
    for i, t in enumerate(tokens):
        dest = tmp_path / "cache" / f"log{i}" / "unknown" / t / "metric_cache.pkl"
        dest.parent.mkdir(parents=True)
        shutil.copy(cache_map[t], dest)
    evil = tmp_path / "cache" / "log9" / "unknown" / "evil_token" / "metric_cache.pkl"
    evil.parent.mkdir(parents=True)
    evil.write_bytes(_pickle_bytes(pickle.dumps(_Evil(), protocol=5)))
    out = tmp_path / "scenes"
    assert main(["scenes", "from-navsim", str(tmp_path / "cache"), "--out", str(out), "--no-progress"]) == EXIT_PARTIAL
    assert "system" in capsys.readouterr().err
    assert sorted(p.stem for p in out.glob("*.json")) == sorted(tokens)
    assert read_scene(out / "scene_0003.json").num_proposals == 0

    # without proposals the scenes are reported, not scored
    assert main(["score", "--scenes", str(out), "--out", str(tmp_path / "none"), "--no-progress"]) == EXIT_PARTIAL

    sources = {t: read_scene(_scene_file(t)) for t in tokens}
    order = {t: np.arange(sources[t].num_proposals)[::-1] for t in tokens}  # reversed: rows are scored as given
    np.savez(tmp_path / "P.npz", **{t: sources[t].proposal_states[order[t]] for t in tokens})
    run = tmp_path / "run"
    assert main(["score", "--scenes", str(out), "--proposals", str(tmp_path / "P.npz"), "--out", str(run),
                 "--no-progress"]) == 0
    df = read_results(run)
    for t in tokens:
        rows = df[df.scene_id == t].sort_values("proposal")
        assert list(rows.proposal) == list(range(sources[t].num_proposals))
        for (_, row), src in zip(rows.iterrows(), order[t]):
            want = sources[t].expected["proposals"][src]
            for m in ("nc", "dac", "ddc", "tlc", "ttc", "lk", "hc"):
                assert row[m] == want[EXACT[m]], (t, src, m)
            assert abs(row["ep"] - want["ego_progress"]) <= 1e-4
            assert abs(row["pdm_score"] - want["pdm_score"]) <= 1e-4
            assert np.isnan(row["ec"])  # previous plans are not part of P.npz
    assert isinstance(df, pd.DataFrame)


def test_from_navsim_into_a_folder_of_other_scenes_warns(tmp_path, capsys):
    """A second conversion into the same --out keeps the first one's scenes, which later commands read too: the run
    names them (a rerun of the same conversion, e.g. after Ctrl-C, does not)."""
    cache_map = dict(find_caches(CACHE_DIR))
    for t in ("scene_0003", "sanity_red_on_route"):
        dest = tmp_path / t / "log" / "unknown" / t / "metric_cache.pkl"
        dest.parent.mkdir(parents=True)
        shutil.copy(cache_map[t], dest)
    out = tmp_path / "scenes"

    def convert(token: str) -> str:
        assert main(["scenes", "from-navsim", str(tmp_path / token), "--out", str(out), "--no-progress"]) == 0
        return capsys.readouterr().err

    assert "warning" not in convert("scene_0003")
    assert "warning" not in convert("scene_0003")
    err = convert("sanity_red_on_route")
    assert "also holds 1 scene file(s)" in err and "scene_0003.json" in err, err


def _copy_caches(tmp_path, tokens) -> Path:
    """A cache directory under ``tmp_path`` holding the fixture caches of ``tokens``."""
    cache_map = dict(find_caches(CACHE_DIR))
    for t in tokens:
        dest = tmp_path / "cache" / "log" / "unknown" / t / "metric_cache.pkl"
        dest.parent.mkdir(parents=True)
        shutil.copy(cache_map[t], dest)
    return tmp_path / "cache"


def _counting_reads(monkeypatch) -> list[str]:
    """The tokens ``from-navsim`` converts from now on, in order."""
    import jaxdrive.data.navsim_cache as nc

    read, calls = nc.read_cache_scene, []
    monkeypatch.setattr(nc, "read_cache_scene", lambda path, token=None: calls.append(token) or read(path, token))
    return calls


def test_from_navsim_resume_converts_only_what_an_interrupted_run_left(tmp_path, capsys, monkeypatch):
    """Ctrl-C after the first scene file: exit 130 with the --resume hint; the same command plus --resume converts
    only the other caches and the folder then equals a full conversion's (no warning about the kept file)."""
    import jaxdrive.data.scene_json as sj
    from jaxdrive.cli import EXIT_INTERRUPTED

    tokens = ["sanity_red_on_route", "scene_0003", "scene_0007"]
    cache = _copy_caches(tmp_path, tokens)
    full, out = tmp_path / "full", tmp_path / "scenes"
    assert main(["scenes", "from-navsim", str(cache), "--out", str(full), "--no-progress"]) == 0
    write = sj.write_scene

    def write_then_interrupt(scene, path):
        write(scene, path)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(sj, "write_scene", write_then_interrupt)
        args = ["scenes", "from-navsim", str(cache), "--out", str(out), "--no-progress"]
        assert main(args) == EXIT_INTERRUPTED
    assert "continue with the same arguments plus --resume" in capsys.readouterr().err
    assert [p.name for p in out.glob("*.json")] == ["sanity_red_on_route.json"]
    calls = _counting_reads(monkeypatch)
    assert main([*args, "--resume"]) == 0
    assert calls == tokens[1:]
    captured = capsys.readouterr()
    assert "skipped 1 caches already converted" in captured.out and "wrote 2 scenes" in captured.out, captured.out
    assert "warning" not in captured.err, captured.err
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in full.iterdir())
    for p in full.iterdir():
        assert (out / p.name).read_bytes() == p.read_bytes(), p.name


def test_from_navsim_resume_converts_a_cache_newer_than_its_scene_again(tmp_path, capsys, monkeypatch):
    """--resume compares modification times: a cache rewritten after its scene file is converted again, one as old as
    its scene file is not."""
    tokens = ["sanity_red_on_route", "scene_0003"]
    cache = _copy_caches(tmp_path, tokens)
    out = tmp_path / "scenes"
    args = ["scenes", "from-navsim", str(cache), "--out", str(out), "--no-progress"]
    assert main(args) == 0
    paths = dict(find_caches(cache))
    for token, later_ns in (("sanity_red_on_route", 0), ("scene_0003", 10**9)):
        scene_ns = (out / f"{token}.json").stat().st_mtime_ns
        os.utime(paths[token], ns=(scene_ns + later_ns, scene_ns + later_ns))
    calls = _counting_reads(monkeypatch)
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert calls == ["scene_0003"]
    assert "skipped 1 caches already converted" in capsys.readouterr().out


def test_from_navsim_resume_with_store_is_a_usage_error(tmp_path, capsys):
    """The store is written whole at the end: there is nothing to resume, said before any work."""
    cache = _copy_caches(tmp_path, ["sanity_red_on_route"])
    out = tmp_path / "store"
    assert main(["scenes", "from-navsim", str(cache), "--out", str(out), "--store", "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--store" in err and "written whole" in err, err
    assert not out.exists()


def test_from_navsim_store_interrupted_says_to_run_again(tmp_path, capsys, monkeypatch):
    """Ctrl-C during --store keeps no store (written whole at the end): the hint is the same command, not --resume."""
    import jaxdrive.data.navsim_cache as nc
    from jaxdrive.cli import EXIT_INTERRUPTED

    def interrupt(path, token=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(nc, "read_cache_scene", interrupt)
    cache = _copy_caches(tmp_path, ["sanity_red_on_route"])
    out = tmp_path / "store"
    assert main(["scenes", "from-navsim", str(cache), "--out", str(out), "--store", "--no-progress"]) == EXIT_INTERRUPTED
    assert "run the same command again" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_bad_proposal_file_is_a_usage_error(tmp_path, capsys):
    scenes = tmp_path / "s"
    scenes.mkdir()
    shutil.copy(_scene_file("sanity_red_on_route"), scenes / "a.json")
    np.savez(tmp_path / "P.npz", sanity_red_on_route=np.zeros((2, 40, 11)))
    assert main(["score", "--scenes", str(scenes), "--proposals", str(tmp_path / "P.npz"), "--out",
                 str(tmp_path / "o"), "--no-progress"]) == 2
    assert "sanity_red_on_route" in capsys.readouterr().err


def test_from_navsim_store_output(tmp_path, capsys):
    """``--store``: the converted caches as one binary scene store (a refused cache named, exit 3); the ego-centred
    store scenes keep their PDM-Closed reference in their own frame (its row 0 is the ego state)."""
    from jaxdrive.data.store import SceneStore

    tokens = ["scene_0003", "sanity_red_on_route"]
    cache_map = dict(find_caches(CACHE_DIR))
    for t in tokens:
        dest = tmp_path / "cache" / t / "metric_cache.pkl"
        dest.parent.mkdir(parents=True)
        shutil.copy(cache_map[t], dest)
    evil = tmp_path / "cache" / "evil_token" / "metric_cache.pkl"
    evil.parent.mkdir(parents=True)
    evil.write_bytes(_pickle_bytes(pickle.dumps(_Evil(), protocol=5)))
    for token, data in (("aa_empty", b""), ("ab_truncated", cache_map[tokens[0]].read_bytes()[:3000])):
        (tmp_path / "cache" / token).mkdir()  # what an interrupted caching job leaves; sorted before the good ones
        (tmp_path / "cache" / token / "metric_cache.pkl").write_bytes(data)
    out = tmp_path / "store"
    args = ["scenes", "from-navsim", str(tmp_path / "cache"), "--out", str(out), "--store", "--no-progress"]
    assert main(args) == EXIT_PARTIAL
    err = capsys.readouterr().err
    assert "system" in err and "aa_empty" in err and "ab_truncated" in err, err
    store = SceneStore(out)
    assert sorted(store[i].id for i in range(len(store))) == sorted(tokens)
    for i in range(len(store)):
        scene = store[i]
        json_scene = read_cache_scene(cache_map[scene.id])
        np.testing.assert_allclose(scene.history_states[-1, :2], 0.0, atol=1e-9)
        np.testing.assert_allclose(scene.extra["reference"]["states"][0], scene.history_states[-1], atol=1e-5)
        shift = np.asarray(json_scene.extra["reference"]["states"])[:, :2] - json_scene.origin
        np.testing.assert_allclose(np.asarray(scene.extra["reference"]["states"])[:, :2], shift, atol=1e-5)
    assert main(args) == 2  # the store exists: refused before any work


def _without_map_polygon(cache, token: str):
    """``cache`` with polygon ``token`` taken out of its drivable_area_map (tokens, layers, geometries)."""
    dam = cache.drivable_area_map
    keep = [i for i, t in enumerate(dam.args[0]) if t != token]
    assert len(keep) == len(dam.args[0]) - 1
    dam.args = ([dam.args[0][i] for i in keep], [dam.args[1][i] for i in keep],
                np.asarray(list(dam.args[2]), object)[keep], *dam.args[3:])
    return cache


def test_red_light_beyond_the_drivable_map_is_kept_not_a_refused_cache():
    """NAVSIM's red lights cover every connector of the route, its drivable map only the roadblocks within 100 m of
    the ego: a red light further along the route names a connector the map lacks. Such a (real) cache was refused
    whole ("names no lane connector of the map"); the light is now kept with its cached polygon, as NAVSIM's scorer
    sees it, and the scene is otherwise that of the map without the connector."""
    from jaxdrive.data.navsim_cache import cache_to_scene
    from jaxdrive.scene import LaneKind, validate_host_scene

    token = "sanity_red_on_route"
    path = dict(find_caches(CACHE_DIR))[token]
    full = cache_to_scene(load_cache(path), token)
    assert list(full.traffic_lights) == ["c_f1"]
    got = cache_to_scene(_without_map_polygon(load_cache(path), "c_f1"), token)
    validate_host_scene(got)
    assert got.traffic_lights == full.traffic_lights
    lanes = {lane.id: lane for lane in got.lanes}
    assert (lanes["c_f1"].kind, lanes["c_f1"].on_route) == (LaneKind.LANE_CONNECTOR, True)
    np.testing.assert_array_equal(lanes["c_f1"].polygon, {l.id: l for l in full.lanes}["c_f1"].polygon)
    assert [l.id for l in got.lanes] == [l.id for l in full.lanes if l.id != "c_f1"] + ["c_f1"]
    assert got.generator["red_light_connectors_outside_map"] == ["c_f1"]
    assert "red_light_connectors_outside_map" not in full.generator
