"""Property test: malformed scene JSON (missing fields, wrong types, out-of-range and non-finite values, inconsistent
lengths) gives a named error for that file (``SceneFileError``, a ``UserInputError``, starting with the file's name),
never another exception, and what is accepted casts to float32 without a NaN or an infinity. Host-side only (the
scoring of a bad file beside good ones is tests/test_input_ranges.py's end-to-end run)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxdrive.data.scene_json import SceneFileError, scene_from_dict, scene_to_dict
from jaxdrive.errors import UserInputError
from json_mutation import delete_at, json_paths, parent_of


def _small_scene() -> dict:
    from jaxdrive.data.synthetic import generate_scene

    d = json.loads(json.dumps(scene_to_dict(generate_scene(5, num_proposals=2))))
    d["map"]["drivable_areas"] = d["map"]["drivable_areas"][:3]  # fewer leaf paths: each example mutates one
    return d


BASE = _small_scene()


PATHS = [p for p in json_paths(BASE) if p[0] not in ("generator", "expected", "units", "agent_track_fields")]

BAD_VALUES = st.sampled_from([None, True, "x", {}, [], [1.0], float("nan"), float("inf"), -float("inf"), 1e300,
                              -1e30, 1e9, 123.0, -7.0, 0, 10 ** 400])


@st.composite
def malformed(draw) -> dict:
    d = copy.deepcopy(BASE)
    path = draw(st.sampled_from(PATHS))
    parent = parent_of(d, path)
    kind = draw(st.sampled_from(["delete", "replace", "shorten", "lengthen"]))
    if kind == "delete" or (kind in ("shorten", "lengthen") and not isinstance(parent[path[-1]], list)):
        delete_at(parent, path[-1])
    elif kind == "replace":
        parent[path[-1]] = draw(BAD_VALUES)
    elif kind == "shorten":
        parent[path[-1]] = parent[path[-1]][:-1]
    else:
        lst = parent[path[-1]]
        parent[path[-1]] = lst + lst[-1:] if lst else [0.0]
    return d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malformed())
def test_malformed_scene_json_is_named_or_accepted_finite(d):
    try:
        scene = scene_from_dict(d, source="bad_scene.json")
    except SceneFileError as e:
        assert isinstance(e, UserInputError)
        assert str(e).startswith("bad_scene.json: "), str(e)
        return
    # accepted (the change was harmless, e.g. an unread field): every number the kernels read is finite in float32
    for name, arr in (("history", scene.history_states), ("proposals", scene.proposal_states),
                      ("centerline", scene.centerline)):
        local = np.asarray(arr, np.float64).copy()
        local[..., :2] -= scene.origin
        assert np.isfinite(local.astype(np.float32)).all(), name
    for item in scene.areas + scene.lanes:
        assert np.isfinite((item.polygon - scene.origin).astype(np.float32)).all()
    for a in scene.agents:
        present = ~np.isnan(a.track).any(axis=1)
        local = a.track[present].copy()
        local[:, :2] -= scene.origin
        assert np.isfinite(local.astype(np.float32)).all()
        assert np.isfinite(np.float32(a.length)) and np.isfinite(np.float32(a.width))


def test_the_base_scene_is_valid():
    scene_from_dict(BASE, source="base.json")
