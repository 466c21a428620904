"""NC and TTC kernels: hand-made known answers, and a property test against the literal ignore-set reference."""

import copy
import glob
import math

import jax
import numpy as np
import pytest
from shapely.geometry import Polygon

from jaxdrive.data.scene_json import read_scene
from jaxdrive.rules.areas import ego_areas
from jaxdrive.rules.nc import no_at_fault_collisions
from jaxdrive.rules.ttc import time_to_collision
from jaxdrive.scene import Agent, AgentType, Area, AreaKind, HostScene, Lane, LaneKind, PadSpec, batch_scenes
from reference_collision import nc_ref, ttc_ref
from conftest import EPDMS_FIXTURES

T = 41
DT = 0.1


def _kernel(scene, states):
    areas = ego_areas(scene.map, states)
    return no_at_fault_collisions(scene, states, areas) + time_to_collision(scene, states, areas)


KERNEL = jax.jit(jax.vmap(_kernel))


def _rect(x0, x1, y0, y1):
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], float)


def _ego(x0=0.0, speeds=10.0, y=None, heading=None):
    """Ego rear-axle states along +x from x0 with per-step speeds (scalar or [41]); optional lateral path y(t)."""
    v = np.broadcast_to(np.asarray(speeds, float), (T,)).copy()
    s = np.zeros((T, 11))
    s[:, 0] = x0 + np.concatenate([[0.0], np.cumsum(v[:-1] * DT)])
    s[:, 1] = 0.0 if y is None else y
    s[:, 2] = 0.0 if heading is None else heading
    s[:, 3] = v
    return s


def _agent(kind, x, y, heading=0.0, vx=0.0, vy=0.0, name="a", length=4.6, width=1.9):
    """An agent box centred at x[t], y[t] (scalars or [41]) with constant velocity fields."""
    track = np.zeros((T, 5))
    track[:, 0], track[:, 1], track[:, 2], track[:, 3], track[:, 4] = x, y, heading, vx, vy
    return Agent(id=name, type=kind, length=length, width=width, height=1.5, track=track)


def _road_scene(states, agents):
    """Two same-direction lanes (y in [-1.75, 1.75] and [1.75, 5.25]) in one roadblock along x."""
    states = states[None] if states.ndim == 2 else states
    hist = np.repeat(states[0, :1], 4, axis=0)
    return HostScene(
        id="hand", history_states=hist,
        areas=[Area("rb", AreaKind.ROADBLOCK, _rect(-60, 200, -1.75, 5.25))],
        lanes=[Lane("l0", LaneKind.LANE, True, "rb", _rect(-60, 200, -1.75, 1.75)),
               Lane("l1", LaneKind.LANE, True, "rb", _rect(-60, 200, 1.75, 5.25))],
        centerline=np.stack([np.linspace(-60, 200, 261), np.zeros(261), np.zeros(261)], axis=1),
        traffic_lights={}, agents=agents, proposal_states=states,
        proposal_names=[f"p{i}" for i in range(len(states))], proposal_families=["x"] * len(states))


def _score(host):
    scene, props, _ = batch_scenes([host])
    nc, nc_step, ttc, ttc_step = map(np.asarray, KERNEL(scene, props.states))
    k = host.num_proposals
    got = list(zip(nc[0, :k], nc_step[0, :k], ttc[0, :k], ttc_step[0, :k]))
    ref = [nc_ref(host, s) + ttc_ref(host, s) for s in host.proposal_states]
    assert [tuple(map(float, g)) for g in got] == [tuple(map(float, r)) for r in ref]
    return got


def test_head_on_collision():
    t = np.arange(T) * DT
    car = _agent(AgentType.VEHICLE, 40.0 - 10.0 * t, 0.0, heading=math.pi, vx=-10.0)
    (nc, nc_step, ttc, ttc_step), = _score(_road_scene(_ego(), [car]))
    assert nc == 0.0 and ttc == 0.0 and 0 < nc_step <= 40 and ttc_step < nc_step


def test_rear_ended_by_a_moving_car_is_not_at_fault():
    t = np.arange(T) * DT
    car = _agent(AgentType.VEHICLE, -12.0 + 8.0 * t, 0.0, vx=8.0)  # catches the slow ego from behind
    (nc, nc_step, ttc, _), = _score(_road_scene(_ego(speeds=2.0), [car]))
    assert nc == 1.0 and nc_step == -1


def test_parked_car_hit_is_zero_cone_hit_is_half():
    parked = _agent(AgentType.VEHICLE, 30.0, 0.0)
    cone = _agent(AgentType.TRAFFIC_CONE, 30.0, 0.0, length=0.5, width=0.5)
    (nc_car, step_car, ttc_car, _), = _score(_road_scene(_ego(), [parked]))
    (nc_cone, step_cone, ttc_cone, _), = _score(_road_scene(_ego(), [cone]))
    assert nc_car == 0.0 and nc_cone == 0.5 and step_car > 0 and step_cone > 0
    assert ttc_car == 0.0 and ttc_cone == 0.0


def test_first_appearance_stopped_agent_counts_as_stopped_track():
    """A car standing still at its first appearance and hit from its side is a 'stopped track': at fault (NC 0)."""
    t = np.arange(T) * DT
    car = _agent(AgentType.VEHICLE, 20.0, 0.0)
    car.track[20:, 0] = 20.0 + 0.5 * (t[20:] - 2.0)
    car.track[20:, 3] = 0.5
    (nc, *_), = _score(_road_scene(_ego(), [car]))
    assert nc == 0.0


def test_stopped_ego_hit_is_not_at_fault():
    t = np.arange(T) * DT
    car = _agent(AgentType.VEHICLE, 25.0 - 8.0 * t, 0.0, heading=math.pi, vx=-8.0)
    (nc, nc_step, ttc, _), = _score(_road_scene(_ego(speeds=0.0), [car]))
    assert nc == 1.0 and nc_step == -1 and ttc == 1.0  # a stopped ego never triggers TTC either


def test_tailgating_violates_ttc_without_a_collision():
    t = np.arange(T) * DT
    speeds = np.maximum(10.0 - 4.0 * t, 8.0)  # brakes to the lead's speed in 0.5 s
    front = 1.461 + 2.588
    lead = _agent(AgentType.VEHICLE, front + 1.5 + 2.3 + 8.0 * t, 0.0, vx=8.0)  # 1.5 m bumper gap
    (nc, nc_step, ttc, ttc_step), = _score(_road_scene(_ego(speeds=speeds), [lead]))
    assert nc == 1.0 and ttc == 0.0 and ttc_step == 0


def test_sideswipe_during_a_lane_change_is_at_fault():
    t = np.arange(T) * DT
    y = 3.5 * np.clip((t - 0.5) / 2.5, 0, 1)  # drifts left into lane 1
    heading = np.gradient(y, DT) / 10.0
    neighbour = _agent(AgentType.VEHICLE, 1.461 + 10.0 * t, 3.5, vx=10.0)  # alongside in lane 1
    (nc, nc_step, _, _), = _score(_road_scene(_ego(y=y, heading=np.arctan(heading)), [neighbour]))
    assert nc == 0.0 and nc_step > 0


# ----------------------------------------------------------------------------------------------------------------------
# Property test: >= 2,000 small scenes from seeded perturbations of the fixture scenes
# ----------------------------------------------------------------------------------------------------------------------

N_SCENES = 2000
K_PROPS = 2
N_AGENTS = 3


def _local_map(items, origin):
    """Map polygons within ~30 m of the ego, simplified (0.1 m) to keep the test fast; both sides see the same map."""
    out = []
    for item in items:
        if np.abs(item.polygon - origin).min(axis=0).max() < 30.0:
            simple = np.asarray(Polygon(item.polygon).simplify(0.1).exterior.coords)[:-1]
            out.append(copy.replace(item, polygon=simple) if hasattr(copy, "replace") else
                       type(item)(**{**item.__dict__, "polygon": simple}))
    return out


def _perturbed(base: HostScene, rng: np.random.Generator) -> HostScene:
    """Two of the base scene's proposals and three agents placed along their paths with random offsets, headings,
    speeds (sometimes standing at first appearance), types and presence windows."""
    sc = copy.copy(base)
    pick = rng.choice(base.num_proposals, size=K_PROPS, replace=False)
    sc.proposal_states = base.proposal_states[pick]
    sc.proposal_names = [base.proposal_names[i] for i in pick]
    sc.proposal_families = [base.proposal_families[i] for i in pick]
    sc.previous_states = None
    sc.expected = None
    sc.areas = _local_map(base.areas, base.origin) or base.areas[:1]
    sc.lanes = _local_map(base.lanes, base.origin)
    sc.traffic_lights = {k: v for k, v in base.traffic_lights.items() if k in {l.id for l in sc.lanes}}
    agents = []
    for j in range(N_AGENTS):
        path = sc.proposal_states[rng.integers(K_PROPS)]
        lag = rng.integers(-15, 16)
        idx = np.clip(np.arange(T) + lag, 0, T - 1)
        h = path[idx, 2]
        u = np.stack([np.cos(h), np.sin(h)], axis=1)
        n = np.stack([-u[:, 1], u[:, 0]], axis=1)
        centre = path[idx, :2] + 1.461 * u + rng.normal(0, 6.0) * u + rng.normal(0, 3.5) * n
        heading = h + rng.choice([0.0, math.pi, rng.normal(0, 0.4), rng.uniform(-math.pi, math.pi)])
        heading = (heading + math.pi) % (2 * math.pi) - math.pi
        speed = rng.choice([0.0, rng.uniform(0, 0.06), rng.uniform(0, 15)])
        track = np.concatenate([centre, heading[:, None], speed * np.stack([np.cos(heading), np.sin(heading)], 1)],
                               axis=1)
        if rng.random() < 0.3:
            start = rng.integers(0, 30)
            stop = rng.integers(start + 1, T + 1)
            track[:start] = np.nan
            track[stop:] = np.nan
        kind = AgentType(int(rng.choice([0, 0, 0, 1, 2, 3, 4, 6])))
        agents.append(Agent(id=f"x{j}", type=kind, length=float(rng.uniform(0.5, 5.0)),
                            width=float(rng.uniform(0.5, 2.2)), height=1.5, track=track))
    sc.agents = agents
    return sc


@pytest.mark.slow
def test_nc_ttc_agree_with_reference_on_generated_scenes():
    bases = [read_scene(f) for f in sorted(glob.glob(str(EPDMS_FIXTURES / "scene_*.json")))]
    rng = np.random.default_rng(1234)
    scenes = [_perturbed(bases[i % len(bases)], rng) for i in range(N_SCENES)]
    spec = PadSpec.fit(scenes, multiple=1)
    print("property-test pad spec:", spec)
    got = []
    for lo in range(0, N_SCENES, 100):  # one compiled shape, chunks bound the memory
        scene, props, _ = batch_scenes(scenes[lo:lo + 100], spec, validate=False)
        got.append(np.stack([np.asarray(a)[:, :K_PROPS] for a in KERNEL(scene, props.states)], axis=-1))
    got = np.concatenate(got)  # [N, K, 4]: nc, nc_step, ttc, ttc_step
    ref = np.array([[nc_ref(sc, s) + ttc_ref(sc, s) for s in sc.proposal_states] for sc in scenes])
    agree = np.all(got == ref, axis=-1)
    counts = {"pairs": agree.size, "nc<1": int(np.sum(ref[..., 0] < 1)), "nc=0.5": int(np.sum(ref[..., 0] == 0.5)),
              "ttc=0": int(np.sum(ref[..., 2] == 0))}
    print("NC/TTC property test:", counts, "agreement", agree.mean())
    bad = np.argwhere(~agree)
    assert agree.all(), f"{len(bad)} disagreements, first: scene {bad[0][0]} proposal {bad[0][1]}: " \
                        f"kernel {got[tuple(bad[0])]}, reference {ref[tuple(bad[0])]}"
    assert counts["nc<1"] > 200 and counts["nc=0.5"] > 20 and counts["ttc=0"] > 300  # every branch is exercised
