"""Scene data model and JSON I/O: the fixture scenes load, validate, round-trip and batch; bad inputs fail clearly."""

import copy
import json

import jax
import numpy as np
import pytest

from jaxdrive.data.scene_json import SceneFileError, read_scene, scene_from_dict, scene_to_dict, write_scene
from jaxdrive.scene import (FAR, NUM_HISTORY_PADDED, PadSpec, SceneValidationError, batch_scenes, pad_history,
                            validate_batch, validate_host_scene)
from conftest import EPDMS_FIXTURES

FIXTURES = EPDMS_FIXTURES
FILES = sorted(FIXTURES.glob("scene_*.json")) + sorted((FIXTURES / "sanity").glob("*.json"))


@pytest.fixture(scope="module")
def scenes():
    return [read_scene(f) for f in FILES]


def test_all_fixture_scenes_load_and_validate(scenes):
    assert len(FILES) == 61
    for s in scenes:
        validate_host_scene(s)
    assert {s.id for s in scenes} >= {f"scene_{i:04d}" for i in range(40)}


def test_history_interpolation_matches_navsim(scenes):
    for s in scenes:
        want = np.asarray(s.expected["history_padded_states"])
        got = pad_history(s.history_states)
        assert got.shape == (NUM_HISTORY_PADDED, 11)
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=s.id)


def test_json_round_trip(scenes, tmp_path):
    for s, f in zip(scenes, FILES):
        d = scene_to_dict(s)
        back = scene_from_dict(json.loads(json.dumps(d)), source="round-trip")
        assert scene_to_dict(back) == d
        original = json.loads(f.read_text())
        for key in ("id", "traffic_lights", "expected", "generator"):
            assert d[key] == original[key], key
        assert d["route"]["lane_ids"] == sorted(d["route"]["lane_ids"], key=d["route"]["lane_ids"].index)
        np.testing.assert_array_equal(back.proposal_states, s.proposal_states)
        for a, b in zip(back.agents, s.agents):
            np.testing.assert_array_equal(np.isnan(a.track), np.isnan(b.track))
    write_scene(scenes[0], tmp_path / "x.json")
    assert scene_to_dict(read_scene(tmp_path / "x.json")) == scene_to_dict(scenes[0])


def test_batch_into_one_padded_scene(scenes):
    scene, props, info = batch_scenes(scenes)
    b = len(scenes)
    k = max(s.num_proposals for s in scenes)
    assert props.states.shape[:2] == (b, PadSpec.fit(scenes).proposals) and props.states.shape[1] >= k
    assert scene.agents.center.shape[:2] == (b, PadSpec.fit(scenes).agents)
    assert info.scene_ids == [s.id for s in scenes]
    np.testing.assert_array_equal(props.valid.sum(1), [s.num_proposals for s in scenes])
    for leaf in jax.tree.leaves((scene, props)):
        assert np.all(np.isfinite(leaf)) if leaf.dtype.kind == "f" else True
    # re-centred: in the generated scenes the ego rear axle is at the origin at t = 0 for every real proposal
    public = np.array([i.startswith("scene_") for i in info.scene_ids])
    np.testing.assert_allclose(props.states[public][..., 0, :2][props.valid[public]], 0.0, atol=1e-3)
    # padding conventions
    pad_poly = ~scene.map.areas.valid
    assert np.all(scene.map.areas.vertices[pad_poly] == np.float32(FAR))
    s0 = scenes[0]
    n0 = len(s0.areas[0].polygon)
    np.testing.assert_array_equal(scene.map.areas.vertices[0, 0, n0:], np.broadcast_to(scene.map.areas.vertices[0, 0, 0], scene.map.areas.vertices[0, 0, n0:].shape))
    validate_batch(scene, props)


def test_recentring_preserves_precision_far_from_origin(scenes):
    far = [s for s in scenes if abs(s.origin).max() > 1e5]
    assert far, "the fixtures include UTM-scale scenes"
    s = far[0]
    _, props, info = batch_scenes([s])
    recovered = props.states[0, : s.num_proposals, :, :2].astype(np.float64) + info.origins[0]
    assert np.abs(recovered - s.proposal_states[..., :2]).max() < 1e-3


# ------------------------------------------------------------------------------------------------------------------
# Bad inputs: each must produce a specific, readable error naming the field.
# ------------------------------------------------------------------------------------------------------------------

BASE = json.loads(FILES[0].read_text())


def _mutated(fn):
    d = copy.deepcopy(BASE)
    fn(d)
    return d


def _set(path, value):
    def fn(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return fn


def _delete(path):
    def fn(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]
    return fn


BAD = [
    ("wrong format", _set(["format"], "epdms-scene/9"), "format"),
    ("missing id", _delete(["id"]), "'id'"),
    ("history wrong shape", _set(["ego", "history", "states"], [[0.0] * 11] * 3), "ego.history.states"),
    ("NaN in proposal", lambda d: d["proposals"][1]["states"][7].__setitem__(0, float("nan")), "proposals[*].states"),
    ("proposal states 40 steps", lambda d: d["proposals"][2].__setitem__("states", d["proposals"][2]["states"][:40]), "proposals[2].states"),
    ("non-finite heading", lambda d: d["proposals"][0]["states"][3].__setitem__(2, float("inf")), "proposals[*].states"),
    ("heading out of range", lambda d: d["proposals"][0]["states"][3].__setitem__(2, 7.0), "heading"),
    ("empty polygon", lambda d: d["map"]["drivable_areas"][0].__setitem__("polygon", []), "map.drivable_areas[0].polygon"),
    ("two-vertex polygon", lambda d: d["map"]["lanes"][0].__setitem__("polygon", [[0, 0], [1, 1]]), "map.lanes[0].polygon"),
    ("zero-area polygon", lambda d: d["map"]["lanes"][0].__setitem__("polygon", [[0, 0], [1, 1], [2, 2]]), "non-zero area"),
    ("unknown agent type", lambda d: d["agents"][0].__setitem__("type", "spaceship"), "agents[0].type"),
    ("agent track too short", lambda d: d["agents"][0].__setitem__("track", d["agents"][0]["track"][:10]), "agents[0].track"),
    ("negative box size", lambda d: d["agents"][0].__setitem__("width", -1.0), "agents[0].length/width"),
    ("mismatched previous plans", lambda d: d["proposals"][0].pop("previous_plan"), "previous_plan"),
    ("bad light status", lambda d: d["traffic_lights"][0].__setitem__("status", "RRX"), "status"),
    ("light on unknown lane", lambda d: d["traffic_lights"].append({"lane_connector_id": "nope", "status": "R" * 41}), "unknown id"),
    ("route ids mismatch", lambda d: d["route"].__setitem__("lane_ids", ["nope"]), "route.lane_ids"),
    # found by a walk-through: a second entry for a connector was taken silently (the last status won)
    ("light given twice", lambda d: d["traffic_lights"].append(dict(d["traffic_lights"][0], status="G" * 41)),
     "lane_connector_id': expected one entry per lane connector, got 'lc01_00' again (traffic_lights[0])"),
    # a lane id given twice in map.lanes was named as a route.lane_ids mismatch; the duplicate is named now
    ("lane given twice", lambda d: d["map"]["lanes"].append(dict(next(
        lane for lane in d["map"]["lanes"] if lane["on_route"]))), "unique lane ids"),
    ("route id given twice", lambda d: d["route"]["lane_ids"].append(d["route"]["lane_ids"][0]),
     "'route.lane_ids': expected each lane id once, got"),
    ("proposals not a list", _set(["proposals"], {}), "proposals"),  # an empty list is valid (proposals from elsewhere)
    ("duplicate proposal names", lambda d: d["proposals"][1].__setitem__("name", d["proposals"][0]["name"]), "unique names"),
    ("string where number", lambda d: d["agents"][0].__setitem__("length", "long"), "agents[0].length"),
    # JSON integers beyond float64 (400 digits) were OverflowError tracebacks, which abort a scoring run unnamed
    ("integer length beyond float64", lambda d: d["agents"][0].__setitem__("length", 10**400), "agents[0].length"),
    ("integer in a track beyond float64", lambda d: d["agents"][1]["track"][3].__setitem__(0, 10**400),
     "agents[1].track"),
    ("integer in proposal states beyond float64", lambda d: d["proposals"][0]["states"][3].__setitem__(0, 10**400),
     "proposals[0].states"),
]


@pytest.mark.parametrize("name,mutate,needle", BAD, ids=[b[0] for b in BAD])
def test_malformed_scene_gives_specific_error(name, mutate, needle, tmp_path):
    path = tmp_path / "bad_scene.json"
    path.write_text(json.dumps(_mutated(mutate)))
    with pytest.raises(SceneFileError) as exc:
        read_scene(path)
    msg = str(exc.value)
    assert "bad_scene.json" in msg and needle in msg, msg


def test_unreadable_and_invalid_json(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    with pytest.raises(SceneFileError, match="broken.json: not valid JSON"):
        read_scene(p)
    with pytest.raises(SceneFileError, match="cannot read"):
        read_scene(tmp_path / "missing.json")


def test_padspec_too_small_names_the_size(scenes):
    with pytest.raises(SceneValidationError, match="agents"):
        batch_scenes(scenes[:3], PadSpec(agents=1))


HOST_MISTAKES = [  # a HostScene built in Python, not read from JSON: mistakes that used to raise unnamed errors
    ("polygon as a nested list", lambda s: setattr(s.areas[0], "polygon", s.areas[0].polygon.tolist()),
     r"'map.drivable_areas\[0\].polygon': expected a polygon: an array of shape \(n, 2\), got a list"),
    ("lane polygon as a nested list", lambda s: setattr(s.lanes[0], "polygon", s.lanes[0].polygon.tolist()),
     r"'map.lanes\[0\].polygon': expected a polygon.*got a list"),
    ("area kind as its JSON name", lambda s: setattr(s.areas[0], "kind", "roadblock"),
     r"'map.drivable_areas\[0\].kind': expected one of AreaKind.ROADBLOCK.*got 'roadblock'"),
    ("lane kind as its JSON name", lambda s: setattr(s.lanes[0], "kind", "lane"),
     r"'map.lanes\[0\].kind': expected one of LaneKind.LANE, LaneKind.LANE_CONNECTOR"),
    ("agent type out of range", lambda s: setattr(s.agents[0], "type", 9), r"'agents\[0\].type': expected one of"),
    ("agent type as its JSON name", lambda s: setattr(s.agents[0], "type", "vehicle"), r"'agents\[0\].type'"),
    ("agent length None", lambda s: setattr(s.agents[0], "length", None),
     r"'agents\[0\].length/width': expected positive finite box size, got None"),
    ("agent length beyond float64", lambda s: setattr(s.agents[0], "length", 10**400),  # an OverflowError before
     r"'agents\[0\].length/width': expected positive finite box size, got 1000"),
    ("history as a nested list", lambda s: setattr(s, "history_states", s.history_states.tolist()),
     r"'ego.history.states': expected an array of shape \(4, 11\), got a list, not a numpy array"),
]


@pytest.mark.parametrize("name,mutate,needle", HOST_MISTAKES, ids=[m[0] for m in HOST_MISTAKES])
def test_host_scene_built_in_python_names_the_bad_field(scenes, name, mutate, needle):
    """Polygons as lists failed with AttributeError ('list' object has no attribute 'ndim'), kinds given by their JSON
    names with "invalid literal for int()" from the padding, a None box size with a TypeError; integer kinds and the
    enums' members are accepted."""
    scene = copy.deepcopy(next(s for s in scenes if s.agents and s.lanes))
    mutate(scene)
    with pytest.raises(SceneValidationError, match=needle):
        batch_scenes([scene])
    ok = copy.deepcopy(next(s for s in scenes if s.agents and s.lanes))
    ok.areas[0].kind, ok.agents[0].type = int(ok.areas[0].kind), np.int64(ok.agents[0].type)
    batch_scenes([ok])


def test_validate_batch_mismatch(scenes):
    scene, props, _ = batch_scenes(scenes[:2])
    bad = props.replace(valid=props.valid[:, :3])
    with pytest.raises(SceneValidationError, match="proposals.valid"):
        validate_batch(scene, bad)


def _polygon_cases(rng) -> list[np.ndarray]:
    """Random simple and degenerate (n, 2) polygons: far from the origin, collinear, a sliver just above / below the
    zero-area tolerance, repeated vertices, NaN / inf vertices."""
    polys = []
    for _ in range(300):
        n = int(rng.integers(3, 14))
        centre = rng.uniform(-5e5, 5e5, 2) * rng.integers(0, 2)
        scale = 10.0 ** rng.uniform(-3, 3)
        kind = rng.integers(0, 6)
        if kind == 0:  # collinear
            t = rng.uniform(0, 1, n)
            p = centre + scale * np.stack([t, 2 * t], -1)
        elif kind == 1:  # a sliver whose area sits near the 1e-9 * extent^2 tolerance
            p = centre + scale * np.stack([np.linspace(0, 1, n), 10.0 ** rng.uniform(-11, -7) * rng.uniform(-1, 1, n)], -1)
        else:
            angles = np.sort(rng.uniform(0, 2 * np.pi, n))
            p = centre + scale * np.stack([np.cos(angles), np.sin(angles)], -1)
        if kind == 3:
            p[rng.integers(n)] = p[rng.integers(n)]
        if kind == 4:
            p[rng.integers(n), rng.integers(2)] = rng.choice([np.nan, np.inf, -np.inf])
        polys.append(p)
    return polys


def test_vectorized_polygon_and_agent_checks_flag_everything_the_per_item_checks_reject(scenes):
    """``validate_host_scene`` checks all polygons / agents in one pass and looks one by one only at flagged ones: a
    check that rejects an item must see it flagged, else a bad polygon or track would pass."""
    from jaxdrive.scene import Agent, AgentType
    from jaxdrive.scene.host import _agents_maybe_bad, _check_agent, _check_polygon, _polygons_maybe_bad

    rng = np.random.default_rng(0)
    polys = _polygon_cases(rng)
    flagged = _polygons_maybe_bad(polys)
    rejected = []
    for p in polys:
        try:
            _check_polygon("s", "p", p)
            rejected.append(False)
        except SceneValidationError:
            rejected.append(True)
    rejected = np.array(rejected)
    assert 40 < rejected.sum() < 260 and not (rejected & ~flagged).any()
    assert (flagged & ~rejected).sum() <= 0.1 * len(polys)  # few passed only after a second look

    tracks = [a.track for s in scenes for a in s.agents]
    agents = []
    for i in range(400):
        track = tracks[i % len(tracks)].copy()
        row = rng.integers(41)
        kind = rng.integers(0, 7)
        if kind == 0:
            track[row, rng.integers(5)] = np.nan  # a partial row
        elif kind == 1:
            track[row, rng.integers(5)] = rng.choice([np.inf, -np.inf])
        elif kind == 2:
            track[row, 2] = rng.choice([-1, 1]) * rng.uniform(np.pi + 5e-4, np.pi + 2e-3)  # near the heading bound
        elif kind == 3:
            track[row] = np.nan  # absent: fine
        length, width = (rng.choice([0.0, -1.0, np.nan, np.inf]), 2.0) if kind == 4 else (4.0, 2.0)
        agents.append(Agent(id=f"a{i}", type=AgentType.VEHICLE, length=length, width=width, height=1.5, track=track))
    flagged = _agents_maybe_bad(agents)
    rejected = []
    for i, a in enumerate(agents):
        try:
            _check_agent("s", i, a)
            rejected.append(False)
        except SceneValidationError:
            rejected.append(True)
    rejected = np.array(rejected)
    assert 100 < rejected.sum() < 300 and not (rejected & ~flagged).any() and not (flagged & ~rejected).any()


def test_pad_scene_equals_a_per_polygon_per_agent_loop(scenes):
    """The vectorised padding of polygons and agents equals the obvious loop (one polygon / agent at a time)."""
    from jaxdrive.scene.device import FAR as far, pad_scene

    spec = PadSpec.fit(scenes)
    for s in scenes:
        leaves, _ = pad_scene(s, spec)
        o = s.origin
        for polys, got, count, verts in ((s.areas, leaves["map"]["areas"], spec.areas, spec.area_vertices),
                                         (s.lanes, leaves["map"]["lanes"], spec.lanes, spec.lane_vertices)):
            v = np.full((count, verts, 2), far)
            vm = np.zeros((count, verts), bool)
            for i, poly in enumerate(polys):
                n = len(poly.polygon)
                v[i, :n], v[i, n:], vm[i, :n] = poly.polygon - o, poly.polygon[0] - o, True
            np.testing.assert_array_equal(got["vertices"], v.astype(np.float32), err_msg=s.id)
            np.testing.assert_array_equal(got["vertex_valid"], vm, err_msg=s.id)
            np.testing.assert_array_equal(got["valid"], np.arange(count) < len(polys), err_msg=s.id)
        ag = leaves["agents"]
        for i in range(spec.agents):
            if i >= len(s.agents):
                assert not ag["valid"][i] and not ag["present"][i].any() and (ag["center"][i] == far).all()
                continue
            a = s.agents[i]
            for t in range(41):
                row = a.track[t]
                present = not np.isnan(row).any()
                assert ag["present"][i, t] == present
                want = (row[:2] - o, row[2], row[3:5]) if present else ((far, far), 0.0, (0.0, 0.0))
                np.testing.assert_array_equal(ag["center"][i, t], np.float32(want[0]), err_msg=s.id)
                np.testing.assert_array_equal(ag["heading"][i, t], np.float32(want[1]), err_msg=s.id)
                np.testing.assert_array_equal(ag["velocity"][i, t], np.float32(want[2]), err_msg=s.id)
            assert (ag["length"][i], ag["width"][i], ag["type"][i]) == (np.float32(a.length), np.float32(a.width),
                                                                         int(a.type))


@pytest.mark.parametrize("axes", ["proposals", "agents", "areas", "area_vertices", "lanes", "lane_vertices",
                                  "centerline", "all"])
def test_a_padded_batch_grown_to_a_larger_spec_equals_one_padded_there(scenes, axes):
    """``grow_batch`` (the scoring job's re-padding when a later scene grows the run's PadSpec) gives bit for bit
    the batch ``batch_scenes`` pads at the larger spec, for each axis grown alone and all at once (fixture scenes of
    several sizes, with and without previous plans, and synthetic ones with human futures)."""
    import dataclasses

    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.scene import grow_batch

    batch = scenes[:5] + [generate_scene(i, num_proposals=3) for i in range(3)]
    small = PadSpec.fit(batch)
    grow = [f.name for f in dataclasses.fields(PadSpec)] if axes == "all" else [axes]
    big = dataclasses.replace(small, **{name: getattr(small, name) + 24 for name in grow})
    want = batch_scenes(batch, big, validate=False)[:2]
    got = grow_batch(*batch_scenes(batch, small, validate=False)[:2], big)
    paths = lambda tree: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree)]
    assert paths(got) == paths(want)
    for path, g, w in zip(paths(got), jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape, path
        np.testing.assert_array_equal(g, w, err_msg=path)
    for path, g, w in zip(paths(want), jax.tree.leaves(grow_batch(*want, small)), jax.tree.leaves(want)):  # smaller
        np.testing.assert_array_equal(g, w, err_msg=path)


def test_boolean_search_equals_the_element_walk():
    """The one-pass type check of numeric arrays finds a JSON boolean exactly where the element-by-element walk does,
    whatever the nesting (rows of numbers, deeper lists, strings, nulls, objects)."""
    from jaxdrive.data.scene_json import _holds_bool, _walk_holds_bool

    rng = np.random.default_rng(1)
    atoms = [1.5, 2, True, False, None, "x", {"a": True}, float("nan")]

    def value(depth):
        if depth == 0 or rng.random() < 0.15:
            return atoms[rng.integers(len(atoms))] if rng.random() < 0.3 else float(rng.normal())
        return [value(depth - 1) for _ in range(int(rng.integers(0, 4)))]

    cases = [value(int(rng.integers(0, 4))) for _ in range(3000)]
    for v in cases:
        for depth in (2, 3):
            assert _holds_bool(v, depth) == _walk_holds_bool(v), v
    assert sum(_walk_holds_bool(v) for v in cases) > 100


def test_json_that_orjson_refuses_is_read_by_the_stdlib(scenes, tmp_path):
    """NaN / Infinity literals (Python's json writes them) and a UTF-16 file: orjson refuses both, the stdlib parser
    reads them; the scene equals the one read from the plain file."""
    d = json.loads(FILES[0].read_text())
    d["notes"] = {"nan": float("nan"), "inf": float("inf")}
    (tmp_path / "nan.json").write_text(json.dumps(d))
    (tmp_path / "utf16.json").write_bytes(FILES[0].read_text().encode("utf-16"))
    got = read_scene(tmp_path / "nan.json")
    assert np.isnan(got.extra["notes"]["nan"]) and got.extra["notes"]["inf"] == float("inf")
    for s in (got, read_scene(tmp_path / "utf16.json")):
        np.testing.assert_array_equal(s.proposal_states, scenes[0].proposal_states)
        np.testing.assert_array_equal(s.agents[0].track, scenes[0].agents[0].track)
