"""Property tests (issue 54 item 5): the readers of the files users give jaxdrive beside scenes (``--predictions``
parquet / npz, ``--gates FILE``, ``--labels``, VQA predictions, planning ``.npz``, NAVSIM metric caches) turn a
malformed file (wrong types, shapes, missing fields, non-finite or overflowing values, cut-short or garbled bytes) into
a ``UserInputError`` naming the file or its flag, never another exception, and what they accept holds no NaN or
infinity (in float32, the precision it is scored in). Host-side readers only: no JAX compilation per example."""

from __future__ import annotations

import copy
import json
import lzma
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jaxdrive.errors import UserInputError
from json_mutation import delete_at, json_paths, parent_of

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

BAD_JSON = st.sampled_from([None, True, False, "x", "", {}, [], [1.0], [[True]], float("nan"), float("inf"),
                            -float("inf"), 1e300, -1e30, 0, 1, 2, -1, 10 ** 30, [[True] * 9, [[True] * 9]],
                            [True] * 8, [True] * 10, [[True] * 9] * 2, {"a": [True] * 9}])


@st.composite
def mutated(draw, base):
    """``base`` (JSON) with one node deleted, replaced by a bad value, or with a key added; or a bad value whole."""
    d = copy.deepcopy(base)
    paths = json_paths(d)
    if not paths or draw(st.integers(0, 9)) == 0:
        return draw(BAD_JSON)
    path = draw(st.sampled_from(paths))
    parent = parent_of(d, path)
    kind = draw(st.sampled_from(["delete", "replace", "replace", "add"]))
    if kind == "delete":
        delete_at(parent, path[-1])
    elif kind == "replace":
        parent[path[-1]] = draw(BAD_JSON)
    elif isinstance(parent, dict):
        parent["extra"] = draw(BAD_JSON)
    else:
        parent.append(draw(BAD_JSON))
    return d


def _garbled(data: bytes, draw) -> bytes:
    """``data`` cut short, or with a few bytes overwritten."""
    if draw(st.booleans()):
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    return bytes(out)


def _names(e: BaseException, *names) -> None:
    assert isinstance(e, UserInputError), f"{type(e).__name__}: {e}"
    assert any(str(n) in str(e) for n in names), f"{e!r} names none of {names}"


def _finite32(a) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.all(np.isfinite(np.asarray(a, np.float64).astype(np.float32))))


# ---------------------------------------------------------------------------------------------------------------------
# --predictions P.npz / P.parquet (scoring.predictions.read_agents)
# ---------------------------------------------------------------------------------------------------------------------

GOOD_POSES = np.stack([np.linspace(0.5, 4.0, 8) * 5, np.zeros(8), np.zeros(8)], axis=1)
NUMBERS = st.sampled_from([0.0, 1.5, -2.0, float("nan"), float("inf"), -float("inf"), 1e300, 1e39, -1e30, 1e6])


@st.composite
def pose_arrays(draw) -> np.ndarray:
    shape = draw(st.sampled_from([(8, 3)] * 4 + [(24,), (7, 3), (8, 2), (), (0,), (8, 3, 1), (1, 8, 3)]))
    dtype = draw(st.sampled_from(["float64"] * 4 + ["float32", "int64", "bool", "complex128", "U3"]))
    a = np.resize(GOOD_POSES.ravel(), shape) if shape else np.array(1.0)
    a = a.astype(np.float64).copy()
    for _ in range(draw(st.integers(0, 2))):
        if a.size:
            a.flat[draw(st.integers(0, a.size - 1))] = draw(NUMBERS)
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dtype)


def _check_agents(path: Path) -> None:
    from jaxdrive.scoring.predictions import read_agents

    try:
        agents = read_agents(path)
    except Exception as e:  # noqa: BLE001 - the property: only a UserInputError naming the file
        _names(e, path)
        return
    for agent in agents.values():
        for table in (agent.poses, agent.previous):
            for token, poses in table.items():
                assert poses.shape == (8, 3) and _finite32(poses), (token, poses)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["t1", "t2", "a/t1", "b/t2", "t1/previous_frame_poses",
                                        "a/t1/previous_frame_poses", "t3/previous_frame_poses", "a/b/c"]),
                       pose_arrays(), min_size=1, max_size=2), st.data())
def test_predictions_npz(tmp_path, arrays, data):
    path = tmp_path / "p.npz"
    np.savez(path, **arrays)
    if data.draw(st.booleans()):
        path.write_bytes(_garbled(path.read_bytes(), data.draw))
    _check_agents(path)


POSE_VALUES = st.one_of(
    pose_arrays().map(lambda a: a.tolist() if a.dtype.kind != "c" else None),
    st.sampled_from([None, "x", [], [[1.0, 2.0]] * 8, [[1.0, 2.0, 3.0]] * 7 + [[1.0]]]),
    st.lists(NUMBERS, min_size=23, max_size=25))


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["t1", "t2", None]), POSE_VALUES), min_size=1, max_size=3),
       st.booleans(), st.booleans(), st.data())
def test_predictions_parquet(tmp_path, rows, with_agent, with_previous, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"token": [t for t, _ in rows], "poses": [p for _, p in rows]}
    if with_agent:
        columns["agent"] = [data.draw(st.sampled_from(["a", "b", None])) for _ in rows]
    if with_previous:
        columns["previous_frame_poses"] = [data.draw(POSE_VALUES) for _ in rows]
    try:
        table = pa.table({k: pa.array(v) for k, v in columns.items()})
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        assume(False)  # values pyarrow cannot put in one column: no such file
    path = tmp_path / "p.parquet"
    pq.write_table(table, path)
    if data.draw(st.integers(0, 3)) == 0:
        path.write_bytes(_garbled(path.read_bytes(), data.draw))
    _check_agents(path)


@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
@pytest.mark.parametrize("field, value", [(0, 1e39), (1, -1e300), (2, 1e30), (0, 2e5)])
def test_predictions_pose_beyond_its_range_is_refused(tmp_path, suffix, field, value):
    """Finite in float64 but beyond float32 (or any scene's extent): it was accepted, its row scored as NaN."""
    import pandas as pd

    from jaxdrive.scoring.predictions import read_agents

    poses = GOOD_POSES.copy()
    poses[3, field] = value
    path = tmp_path / f"p{suffix}"
    if suffix == ".npz":
        np.savez(path, t1=poses)
    else:
        pd.DataFrame({"token": ["t1"], "poses": [poses.tolist()]}).to_parquet(path)
    name = ("x", "y", "heading")[field]
    with pytest.raises(UserInputError, match=rf"--predictions {path}: token 't1': pose 3 {name}: expected"):
        read_agents(path)


def test_predictions_parquet_null_token_is_refused(tmp_path):
    """A null token was read as the token 'None'."""
    import pandas as pd

    from jaxdrive.scoring.predictions import read_agents

    path = tmp_path / "p.parquet"
    pd.DataFrame({"token": ["t1", None], "poses": [GOOD_POSES.tolist()] * 2}).to_parquet(path)
    with pytest.raises(UserInputError, match=rf"--predictions {path}: row 1: token is null"):
        read_agents(path)


# ---------------------------------------------------------------------------------------------------------------------
# --gates FILE (cli._load_json, ScoreOptions.validate and, with --predictions, predictions.gates_per_row)
# ---------------------------------------------------------------------------------------------------------------------

GATES = [True, False, True, True, True, True, False, True, True]


@SETTINGS
@given(st.sampled_from([GATES, {"s1": GATES, "s2": [GATES, GATES]}, {"s1": [GATES], "s2": GATES}]), st.data())
def test_gates_file(tmp_path, base, data):
    from jaxdrive.cli import _load_json
    from jaxdrive.scoring.predictions import gates_per_row
    from jaxdrive.scoring.runner import ScoreOptions

    path = tmp_path / "gates.json"
    text = json.dumps(data.draw(mutated(base)))
    raw = text.encode()
    if data.draw(st.integers(0, 4)) == 0:
        raw = _garbled(raw, data.draw)
    path.write_bytes(raw)
    try:
        gates = _load_json(path, "--gates")
        ScoreOptions(gates=gates).validate()
        rows = gates_per_row(gates, ["s1", "s2"])
    except Exception as e:  # noqa: BLE001
        _names(e, path, "--gates")
        return
    assert rows.dtype == bool and rows.shape == (2, 9)


# ---------------------------------------------------------------------------------------------------------------------
# judge --labels FILE (judge.labelled.read_labels)
# ---------------------------------------------------------------------------------------------------------------------

LABEL = {"scene_id": "s1", "proposal": 1, "label": 1, "challenging": False}


@SETTINGS
@given(st.lists(mutated(LABEL), min_size=1, max_size=3), st.data())
def test_labels_file(tmp_path, lines, data):
    from jaxdrive.judge.labelled import read_labels

    path = tmp_path / "labels.jsonl"
    raw = "\n".join(json.dumps(x) for x in [LABEL, *lines]).encode()
    if data.draw(st.integers(0, 4)) == 0:
        raw = _garbled(raw, data.draw)
    path.write_bytes(raw)
    try:
        labels = read_labels(path, {"s1": 3, "s2": 2})
    except Exception as e:  # noqa: BLE001
        _names(e, path)
        return
    for (sid, k), v in labels.items():
        assert sid in ("s1", "s2") and v["label"] in (0, 1) and isinstance(v["challenging"], bool)


# ---------------------------------------------------------------------------------------------------------------------
# eval vqa BENCHMARK --predictions FILE (eval.vqa_cli._read_rows and the benchmark's scorer)
# ---------------------------------------------------------------------------------------------------------------------

VQA_ROWS = {
    "drivelmm": {"idx": "tok_0_2", "response": "Final Answer: B) Brake", "gt": "Final Answer: B) Brake"},
    "stsbench": {"answer": "A", "gt": "A", "group": "ego", "scenario": "turn"},
    "drivemllm": {"task": "box", "output": "[0, 0, 10, 10]", "gt": [5, 5, 15, 15], "width": 100, "height": 100},
}


@SETTINGS
@given(st.sampled_from(sorted(VQA_ROWS)), st.data())
def test_vqa_predictions(tmp_path, benchmark, data):
    from collections import defaultdict

    from jaxdrive.eval import vqa
    from jaxdrive.eval.vqa_cli import _read_rows

    base = VQA_ROWS[benchmark]
    if benchmark == "drivemllm":
        base = dict(base, task=data.draw(st.sampled_from(sorted(vqa.DRIVEMLLM_TASKS))),
                    objects=[["red car", [1, 2]], ["white truck", [5, 2]]], descriptions=["red car", "white truck"],
                    xyz1=[1.0, 2.0, 3.0], xyz2=[2.0, 1.0, 5.0])
    lines = data.draw(st.lists(mutated(base), min_size=1, max_size=2))
    path = tmp_path / "vqa.jsonl"
    raw = "\n".join(json.dumps(x) for x in [base, *lines]).encode()
    if data.draw(st.integers(0, 4)) == 0:
        raw = _garbled(raw, data.draw)
    path.write_bytes(raw)
    try:
        rows = _read_rows(path, benchmark)
        if benchmark == "drivelmm":
            vqa.drivelmm_mcq(rows)
        elif benchmark == "stsbench":
            vqa.stsbench(rows)
        else:
            by_task = defaultdict(list)
            for r in rows:
                by_task[r["task"]].append(r)
            vqa.drivemllm(by_task)
    except Exception as e:  # noqa: BLE001
        _names(e, path)


# ---------------------------------------------------------------------------------------------------------------------
# eval planning --predictions P.npz|json --gt G.npz (eval.planning_cli's readers up to planning's own checks)
# ---------------------------------------------------------------------------------------------------------------------

@st.composite
def planning_arrays(draw, name: str, n: int = 2) -> np.ndarray:
    shapes = {"pred": (n, 6, 2), "gt": (n, 6, 2), "gt_mask": (n, 6), "occupancy": (n, 6, 200, 200),
              "tokens": (n,)}
    shape = shapes[name]
    if draw(st.integers(0, 3)) == 0:
        shape = draw(st.sampled_from([(), (n,), (n + 1,) + shape[1:], shape[:-1], shape + (1,), (0,) + shape[1:]]))
    if name == "tokens":
        return np.array([f"t{i}" for i in range(int(np.prod(shape)))]).reshape(shape) if draw(st.booleans()) \
            else np.zeros(shape, draw(st.sampled_from(["int64", "float64"])))
    a = np.zeros(shape, np.float64)
    if name in ("pred", "gt"):
        a = a + np.arange(a.size).reshape(shape) % 7
    elif name == "gt_mask":
        a = a + 1
    for _ in range(draw(st.integers(0, 2))):
        if a.size:
            a.flat[draw(st.integers(0, a.size - 1))] = draw(NUMBERS)
    dtype = draw(st.sampled_from(["float64", "float32", "bool", "int64", "complex64", "U2"]
                                 if name != "occupancy" else ["bool", "bool", "uint8", "float32"]))
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dtype)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_planning_npz(tmp_path, data):
    import argparse

    from jaxdrive.eval import planning
    from jaxdrive.eval.planning_cli import _align, _check_gt_file, _load_npz, _occupancy, load_predictions

    with_tokens = data.draw(st.booleans())
    pred = {"pred": data.draw(planning_arrays("pred"))}
    gt = {k: data.draw(planning_arrays(k)) for k in ("gt", "gt_mask", "occupancy")}
    if with_tokens:
        pred["tokens"] = gt["tokens"] = data.draw(planning_arrays("tokens"))
    p, g = tmp_path / "pred.npz", tmp_path / "gt.npz"
    np.savez(p, **pred)
    np.savez(g, **gt)
    garble = data.draw(st.sampled_from([None, None, None, p, g]))
    if garble is not None:
        garble.write_bytes(_garbled(garble.read_bytes(), data.draw))
    args = argparse.Namespace(predictions=p, gt=g, obstacles=None)
    try:
        got, unusable = load_predictions(p, "lidar")
        arrays = _load_npz(g, "--gt")
        _check_gt_file(arrays, g)
        got, keep, _ = _align(got, unusable, arrays, g)
        mask = arrays["gt_mask"][keep] if "gt_mask" in arrays else None
        checked = planning._validate(got, arrays["gt"][keep], _occupancy(arrays, args)[keep], mask)
    except Exception as e:  # noqa: BLE001
        _names(e, p, g, "pred", "gt", "occupancy")
        return
    assert _finite32(checked[0]) and _finite32(checked[1])


# ---------------------------------------------------------------------------------------------------------------------
# scenes from-navsim CACHE_DIR (data.navsim_cache.read_cache_scene: the restricted unpickler and the conversion)
# ---------------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cache_path() -> Path:
    from conftest import SHARED
    from jaxdrive.data.navsim_cache import find_caches

    caches = find_caches(SHARED / "fixtures" / "navsim_cache")
    if not caches:
        pytest.skip("no fixture metric caches")
    return caches[0][1]


@SETTINGS
@given(st.data())
def test_metric_cache(tmp_path, cache_path, data):
    from jaxdrive.data.navsim_cache import read_cache_scene
    from jaxdrive.scene.host import validate_host_scene

    cache_pickle = lzma.decompress(cache_path.read_bytes())
    path = tmp_path / "tok" / "metric_cache.pkl"
    path.parent.mkdir(exist_ok=True)
    if data.draw(st.booleans()):  # a garbled pickle, compressed
        path.write_bytes(lzma.compress(_garbled(cache_pickle, data.draw)))
    else:  # a garbled or cut-short lzma file
        path.write_bytes(_garbled(lzma.compress(cache_pickle), data.draw))
    try:
        scene = read_cache_scene(path)
    except Exception as e:  # noqa: BLE001
        _names(e, path)
        return
    validate_host_scene(scene, allow_offset_start=True)  # what is converted is a valid scene (finite, in range)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e300, -1e9])
def test_metric_cache_value_out_of_range_is_refused_naming_the_file(tmp_path, cache_path, bad):
    """The ego's speed (12 m/s in the fixture, pickled as BINFLOAT) replaced: 1e300 m/s was converted silently (and
    ``--store`` stopped the whole conversion at it, naming no file)."""
    import struct

    from jaxdrive.data.navsim_cache import CacheFileError, read_cache_scene

    raw = lzma.decompress(cache_path.read_bytes())
    twelve = b"G" + struct.pack(">d", 12.0)
    assert twelve in raw
    path = tmp_path / "tok" / "metric_cache.pkl"
    path.parent.mkdir()
    path.write_bytes(lzma.compress(raw.replace(twelve, b"G" + struct.pack(">d", bad))))
    with pytest.raises(CacheFileError, match=str(path)):
        read_cache_scene(path)
