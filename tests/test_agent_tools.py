"""Known-answer tests for the 20 core driving tools on a hand-built scene (tests/agent_scenes.py), including empty
results, out-of-map queries, invalid arguments and unknown tools (errors come back as observations)."""
import math

import numpy as np
import pytest
from agent_scenes import CROSSWALK, known_scene

from jaxdrive.agent.tools import CORE_TOOLS, ToolContext, default_registry, validate

REG = default_registry()


@pytest.fixture(scope="module")
def ctx():
    return ToolContext.from_scene(known_scene(), {"crosswalks": [CROSSWALK]})


@pytest.fixture(scope="module")
def empty():
    return ToolContext.from_scene(known_scene(agents=False))


def call(ctx, name, **args):
    obs = REG.call(ctx, name, args)
    assert obs.latency_ms >= 0.0
    return obs


def ok(ctx, name, **args):
    obs = call(ctx, name, **args)
    assert obs.ok, obs.error
    return obs.result


def test_registry_has_the_20_core_tools_with_schemas():
    names = [t.name for t in CORE_TOOLS]
    assert len(names) == 20 == len(set(names))
    for t in CORE_TOOLS:
        assert t.parameters["type"] == "object" and t.description
    assert {"get_leading_object_detection", "detect_objects_2d_open_vocab", "get_nearest_pedestrian_crossing",
            "estimate_object_depth_monocular", "get_occupancy_at_locations_for_timestep"} <= set(names)


def test_detections(ctx, empty):
    lead = ok(ctx, "get_leading_object_detection")
    assert lead == {"object_type": "vehicle", "object_id": "lead", "position": [0.0, 8.0], "size": [1.8, 4.5]}
    assert [d["object_id"] for d in ok(ctx, "get_front_object_detections")] == ["left", "lead"]  # nearest first
    assert [d["object_id"] for d in ok(ctx, "get_surrounding_object_detections")] == ["left", "lead", "cone"]
    assert ok(ctx, "get_front_object_detections")[0]["position"] == [-3.5, 5.0]
    got = ok(ctx, "get_object_detections_in_range", x_start=3.0, x_end=5.0, y_start=20.0, y_end=25.0)  # inclusive
    assert [d["object_id"] for d in got] == ["ped"]
    assert ok(ctx, "get_object_detections_in_range", x_start=-1, x_end=1, y_start=100, y_end=200) == []
    assert ok(empty, "get_leading_object_detection") is None
    assert ok(empty, "get_surrounding_object_detections") == []
    bad = call(ctx, "get_object_detections_in_range", x_start=5.0, x_end=1.0, y_start=0.0, y_end=1.0)
    assert not bad.ok and "empty range" in bad.error


def test_ego_and_forecasts(ctx):
    e = ok(ctx, "get_ego_states")
    assert e["speed"] == 5.0 and e["velocity"] == [-0.0, 5.0] and e["mission_goal"] == "FORWARD"
    assert e["history"] == [[-0.0, -7.5], [-0.0, -5.0], [-0.0, -2.5], [0.0, 0.0]]
    assert e["can_bus_position"] == [100.0, 200.0]
    fut = ok(ctx, "get_future_trajectories_for_specific_objects", object_ids=["lead"])[0]
    assert fut["times_s"] == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    np.testing.assert_allclose(fut["waypoints"], [[0.0, 8.0 + 2.5 * k] for k in range(1, 7)], atol=1e-6)
    ped = ok(ctx, "get_future_trajectories_in_range", x_start=0, x_end=10, y_start=20, y_end=30)
    assert [p["object_id"] for p in ped] == ["ped"] and ped[0]["waypoints"][-1] == [4.0, 25.0]
    miss = call(ctx, "get_future_trajectories_for_specific_objects", object_ids=["nope"])
    assert not miss.ok and "unknown object id" in miss.error


def test_occupancy(ctx):
    locs = [[0.0, 8.0], [0.0, 13.0], [0.0, 500.0], [-3.5, 5.0]]
    r0 = ok(ctx, "get_occupancy_at_locations_for_timestep", locations=locs, timestep=0)
    assert [r["occupied"] for r in r0] == [True, False, None, True]
    r2 = ok(ctx, "get_occupancy_at_locations_for_timestep", locations=locs, timestep=2)  # 1 s: lead at y = 13
    assert [r["occupied"] for r in r2] == [False, True, None, False]  # left car moved to y = 15
    bad = call(ctx, "get_occupancy_at_locations_for_timestep", locations=locs, timestep=5)
    assert not bad.ok and "timestep" in bad.error
    # JSON Schema's integer includes 1.0 (models write it); it used to be refused as "expected integer"
    assert ok(ctx, "get_occupancy_at_locations_for_timestep", locations=locs, timestep=2.0) == r2
    bad = call(ctx, "get_occupancy_at_locations_for_timestep", locations=locs, timestep=1.5)
    assert not bad.ok and "arguments.timestep: expected integer, got 1.5" in bad.error


def test_map_queries(ctx, empty):
    d = ok(ctx, "get_drivable_at_locations", locations=[[0, 0], [-3.5, 0], [-6, 0], [3, 0], [0, -1000]])
    assert [r["drivable"] for r in d] == [True, True, False, False, None]
    c = ok(ctx, "get_lane_category_at_locations",
           locations=[[-1.75, 0], [1.75, 0], [-5.25, 10], [0, 0], [0, 32], [0, 1e4]])
    assert [r["categories"] for r in c] == [["divider"], ["boundary"], ["boundary"], [], ["ped_crossing"], None]
    s = ok(ctx, "get_current_shoulder")
    assert s == {"left_shoulder_m": 5.3, "right_shoulder_m": 1.8}  # first 0.1 m sample beyond 5.25 / 1.75
    assert ok(ctx, "get_current_lane_divider") == {"left_divider_m": 1.8, "right_divider_m": 1.8}
    cw = ok(ctx, "get_nearest_pedestrian_crossing")
    assert cw == {"location": [-1.75, 32.0], "distance_m": round(math.hypot(1.75, 32.0), 2)}
    assert ok(empty, "get_nearest_pedestrian_crossing") is None  # no crosswalk annotation


def test_camera_tools(ctx, empty):
    dets = ok(ctx, "detect_objects_2d_open_vocab", camera="CAM_FRONT", objects=["car"])
    assert len(dets) == 2 and all(d["label"] == "vehicle" and d["confidence"] == 1.0 for d in dets)
    assert ok(ctx, "detect_objects_2d_open_vocab", camera="CAM_FRONT", objects=["giraffe"]) == []
    assert ok(empty, "detect_objects_2d_open_vocab", camera="CAM_FRONT", objects=["car"]) == []
    lead_box = next(d["box"] for d in dets if abs(d["center"][0] - 800) < 1)  # the lead car is dead ahead
    sel = ok(ctx, "select_referred_instance", camera="CAM_FRONT", description="the car ahead", box=lead_box)
    assert sel["box"] == lead_box and sel["label"] == "vehicle"
    amb = call(ctx, "estimate_object_depth", camera="CAM_FRONT", target={"object": "car"})
    assert not amb.ok and "2 candidates" in amb.error
    d = ok(ctx, "estimate_object_depth", camera="CAM_FRONT", target={"box": lead_box})
    assert d == {"label": "vehicle", "depth_m": 8.0, "distance_m": round(math.hypot(8.0, 0.75), 2), "band": "near"}
    loc = ok(ctx, "estimate_object_3d_location_camera", camera="CAM_FRONT", target={"object": "pedestrian"})
    assert loc["xyz_m"] == [4.0, 0.6, 25.0]  # camera 1.5 m up, pedestrian centre 0.9 m up
    pw = ok(ctx, "measure_pairwise_distance_3d", camera="CAM_FRONT", target_a={"box": lead_box},
            target_b={"object": "person"})
    assert pw == {"lateral_gap_m": 4.0, "distance_m": round(math.sqrt(16 + 17 ** 2 + 0.15 ** 2), 2)}
    order = ok(ctx, "compare_object_depth_order", camera="CAM_FRONT", target_a={"object": "pedestrian"},
               target_b={"box": lead_box})
    assert order == {"closer": "target_b", "depth_a_m": 25.0, "depth_b_m": 8.0, "confidence": "high"}
    mono = ok(ctx, "estimate_object_depth_monocular", camera="CAM_FRONT", box=lead_box)
    assert mono["depth_m"] == 8.0 and mono["approximate"] is True
    back = ok(ctx, "estimate_object_depth", camera="CAM_BACK", target={"object": "cone"})
    assert back["depth_m"] == 10.0
    for name, args, msg in [
        ("estimate_object_depth", dict(camera="CAM_TOP", target={"object": "car"}), "unknown camera"),
        ("estimate_object_depth", dict(camera="CAM_FRONT", target={"box": [0, 0, 10, 10]}), "no object found"),
        ("estimate_object_depth", dict(camera="CAM_FRONT", target={"object": "bicycle"}), "inconclusive"),
        ("estimate_object_depth_monocular", dict(camera="CAM_FRONT", box=[0, 0, 10, 10]), "no depth"),
        ("estimate_object_depth", dict(camera="CAM_FRONT", target={"object": "car", "box": lead_box}), "exactly one"),
    ]:
        obs = call(ctx, name, **args)
        assert not obs.ok and msg in obs.error, obs.error


def test_errors_are_observations(ctx):
    assert "unknown tool" in REG.call(ctx, "fly", {}).error
    obs = REG.call(ctx, "get_drivable_at_locations", {"locations": [[0, "a"]]})
    assert not obs.ok and "arguments.locations[0][1]: expected number" in obs.error
    obs = REG.call(ctx, "get_ego_states", {"verbose": True})
    assert not obs.ok and "unknown field" in obs.error
    obs = REG.call(ctx, "get_ego_states", "not a dict")
    assert not obs.ok and "expected object" in obs.error
    assert REG.call(ctx, "get_ego_states", {}).text().startswith('{"result":{')
    with pytest.raises(ValueError, match="missing required"):
        validate({}, {"type": "object", "required": ["a"]})


def test_numbers_beyond_float_range_are_invalid_arguments(ctx):
    """A JSON integer like 10**400 is no finite float: as an ``integer`` argument its OverflowError escaped the
    registry and ended the episode; as a ``number`` the tool crashed on it. Both are invalid arguments now, like inf."""
    locs = [[0.0, 8.0]]
    obs = call(ctx, "get_occupancy_at_locations_for_timestep", locations=locs, timestep=10 ** 400)
    assert not obs.ok and obs.error.startswith("invalid arguments")
    assert "arguments.timestep: expected integer" in obs.error
    obs = call(ctx, "get_object_detections_in_range", x_start=-10 ** 400, x_end=1.0, y_start=0.0, y_end=1.0)
    assert not obs.ok and obs.error.startswith("invalid arguments")
    assert "arguments.x_start: expected number" in obs.error
    assert validate(10 ** 300, {"type": "integer"}) == 10 ** 300  # within float range: still an integer


def test_tools_run_on_generated_scenes():
    from jaxdrive.data.synthetic import generate_scene

    for seed in range(3):
        c = ToolContext.from_scene(generate_scene(seed, num_proposals=2))
        for t in CORE_TOOLS:
            if not t.parameters.get("required"):
                obs = REG.call(c, t.name, {})
                assert obs.ok or "not inside any lane" in obs.error or "not on drivable" in obs.error, obs.error


def test_pluggable_vision_models(ctx):
    import dataclasses

    from jaxdrive.agent.tools.vision import Detection

    class FixedDetector:  # a stand-in for a real open-vocabulary detector (YOLO-World...)
        def detect(self, c, camera, words):
            return [Detection("vehicle", [10.0, 20.0, 30.0, 60.0], 0.42)] if "car" in words else []

    class FlatDepth:
        def depth(self, c, camera, u, v):
            return 12.5

    plugged = dataclasses.replace(ctx, detector=FixedDetector(), depth_model=FlatDepth())
    got = ok(plugged, "detect_objects_2d_open_vocab", camera="CAM_FRONT", objects=["car"])
    assert got == [{"label": "vehicle", "box": [10.0, 20.0, 30.0, 60.0], "center": [20.0, 40.0], "confidence": 0.42}]
    mono = ok(plugged, "estimate_object_depth_monocular", camera="CAM_FRONT", box=[0, 0, 10, 10])
    assert mono == {"pixel": [5.0, 5.0], "depth_m": 12.5, "band": "medium", "approximate": True}


@pytest.mark.parametrize("label,words", [
    ("vehicle", ["cars", "vehicles", "trucks", "lorry", "lorries", "buses", "busses", "vans", "SUVs", "taxis",
                 "automobiles"]),
    ("pedestrian", ["pedestrians", "persons", "people", "men", "women", "children", "walkers"]),
    ("bicycle", ["bicycles", "bikes", "cyclists", "bicyclists", "riders"]),
    ("traffic_cone", ["cones", "traffic cones", "traffic_cones"]),
    ("barrier", ["barriers", "fences", "barricades"]),
    ("czone_sign", ["signs", "construction signs"]),
    ("generic_object", ["objects", "obstacles", "debris"]),
])
def test_plural_object_words_name_their_label(label, words):
    """``rstrip("s")`` missed irregular and "-es" plurals ("buses" -> "buse", "children", "men"): a detection query
    for them found nothing. Every synonym and its plural names its label, and only it."""
    from jaxdrive.agent.tools.vision import SYNONYMS, _labels_for

    for w in list(SYNONYMS[label]) + words:
        assert _labels_for([w]) == {label}, w


@pytest.mark.parametrize("plural,singular", [
    ("buses", "bus"), ("boxes", "box"), ("benches", "bench"), ("bushes", "bush"), ("lorries", "lorry"),
    ("cars", "car"), ("fences", "fence"), ("people", "person"), ("children", "child"), ("bus", "bus"),
    ("glass", "glass"), ("traffic cones", "traffic cone"), ("construction signs", "construction sign")])
def test_singular(plural, singular):
    from jaxdrive.agent.tools.vision import singular as to_singular

    assert to_singular(plural) == singular
