"""A hand-built scene with known answers for the agent tools.

Global frame: the ego rear axle at (100, 200), heading 0 (driving along +x) at 5 m/s. Ego BEV frame of the tools:
x right (= global -y), y forward (= global +x). A straight two-lane road along x in [0, 300]:
lane A (the ego's) y in [198.25, 201.75], lane B (to its left) y in [201.75, 205.25]; one roadblock covering both;
a crosswalk across the road at global x in [130, 134].

Objects (t = 0, ego frame):  lead car (0, 8) 5 m/s forward;  left car (-3.5, 5) 10 m/s;  pedestrian (4, 25) static;
cone (0, -10) static.
"""
import numpy as np

from jaxdrive.scene import NUM_STEPS, Agent, AgentType, Area, AreaKind, HostScene, Lane, LaneKind

EGO = np.array([100.0, 200.0])


def _rect(x0, x1, y0, y1):
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)


def _track(x, y, vx):
    t = np.arange(NUM_STEPS) * 0.1
    tr = np.zeros((NUM_STEPS, 5))
    tr[:, 0], tr[:, 1], tr[:, 3] = x + vx * t, y, vx
    return tr


def known_scene(agents: bool = True) -> HostScene:
    hist = np.zeros((4, 11))
    hist[:, 0] = 100.0 + 5.0 * np.array([-1.5, -1.0, -0.5, 0.0])
    hist[:, 1] = 200.0
    hist[:, 3] = 5.0
    objs = [
        Agent("lead", AgentType.VEHICLE, 4.5, 1.8, 1.5, _track(108.0, 200.0, 5.0), "lead"),
        Agent("left", AgentType.VEHICLE, 4.5, 1.8, 1.5, _track(105.0, 203.5, 10.0), "adjacent"),
        Agent("ped", AgentType.PEDESTRIAN, 0.6, 0.6, 1.8, _track(125.0, 196.0, 0.0), "pedestrian"),
        Agent("cone", AgentType.TRAFFIC_CONE, 0.4, 0.4, 0.7, _track(90.0, 200.0, 0.0), "static"),
    ] if agents else []
    props = np.zeros((1, NUM_STEPS, 11))
    props[0, :, 0] = 100.0 + 5.0 * np.arange(NUM_STEPS) * 0.1
    props[0, :, 1] = 200.0
    cl = np.stack([np.arange(0.0, 300.0, 1.0), np.full(300, 200.0), np.zeros(300)], axis=1)
    return HostScene(
        id="known_scene", history_states=hist,
        areas=[Area("rb", AreaKind.ROADBLOCK, _rect(0, 300, 198.25, 205.25))],
        lanes=[Lane("laneA", LaneKind.LANE, True, "rb", _rect(0, 300, 198.25, 201.75)),
               Lane("laneB", LaneKind.LANE, False, "rb", _rect(0, 300, 201.75, 205.25))],
        centerline=cl, traffic_lights={}, agents=objs, proposal_states=props, proposal_names=["p0"],
        proposal_families=["follow"],
    )


CROSSWALK = _rect(130, 134, 198.25, 205.25).tolist()
