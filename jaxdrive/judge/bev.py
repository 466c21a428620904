"""Bird's-eye-view rendering of a scene and one ego trajectory: the judge's image, a batched jnp rasteriser.

The view is ego-centred with the ego heading at t = 0 pointing up: ``ahead`` metres in front of the rear axle, ``behind``
metres behind it, and ``(ahead + behind) / 2`` metres to each side, sampled at ``size`` x ``size`` pixel centres.
Every pixel is classified by exact point-in-polygon / point-in-box / distance tests (no anti-aliasing, so the image is
a deterministic function of the inputs) and painted in this fixed order and colour code (``COLORS``):

    off-road            background
    drivable area       roadblocks, carparks, drivable areas
    intersection        intersection polygons
    route lane          lanes and connectors on the route
    red light           route lanes / connectors whose light is red at t = 0
    lane boundary       within ``line_width`` of a lane polygon's edge
    route centreline    within ``line_width`` of the route centreline
    agent future        agent boxes at t = 1, 2, 3, 4 s (darker tone of the class colour)
    agent               agent boxes at t = 0 by class (vehicle, pedestrian, bicycle, static object), the front
                        third of the box in the light tone of the class colour (the heading)
    ego trajectory      the ego footprint at t = 0.5, 1.0, ..., 4.0 s of the trajectory, from yellow to red in time
    ego                 the ego footprint at t = 0, its front third light (heading)

``render_bev(scene, trajectory)`` renders one ``Scene`` (unbatched, as from ``batch_scenes``) and one trajectory
[41, 11] (ego-centred rear-axle states) into uint8 [size, size, 3]; ``render_bev_batch`` vmaps it over scenes and
trajectories [B, ...]. ``save_png`` writes an image.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, UInt8

from jaxdrive.geometry import EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WIDTH, box_corners, point_in_box, \
    point_in_polygon, segments_distance2
from jaxdrive.scene import AgentType, AreaKind, Scene

COLORS = {
    "off_road": (24, 24, 28),
    "drivable": (92, 92, 96),
    "intersection": (120, 120, 126),
    "route_lane": (62, 88, 140),
    "red_light": (200, 40, 40),
    "lane_boundary": (210, 210, 210),
    "centerline": (60, 190, 100),
    "vehicle": (40, 130, 240),
    "pedestrian": (255, 150, 20),
    "bicycle": (190, 90, 230),
    "static": (170, 120, 70),
    "ego": (255, 255, 255),
    "ego_front": (255, 255, 160),
    "trajectory_start": (255, 230, 0),
    "trajectory_end": (255, 40, 40),
}
COLOR_LEGEND = ("grey road, blue route lanes, red lanes have a red light, green route line, blue vehicles, orange "
                "pedestrians, purple bicycles, brown static objects, lighter front ends show headings, dark boxes are "
                "future positions, white ego now, plan yellow to red over 4 s")
FUTURE_STEPS = (10, 20, 30, 40)  # agent boxes at 1..4 s
EGO_STEPS = tuple(range(5, 41, 5))  # ego footprints at 0.5..4 s


@dataclasses.dataclass(frozen=True)
class BevConfig:
    """size: pixels per side; ahead / behind: metres in front of / behind the ego rear axle (side = their mean);
    line_width: metres drawn around lane edges and the centreline."""

    size: int = 96
    ahead: float = 40.0
    behind: float = 8.0
    line_width: float = 0.3

    @property
    def resolution(self) -> float:
        """Metres per pixel."""
        return (self.ahead + self.behind) / self.size


def pixel_points(heading: Float[Array, ""], cfg: BevConfig) -> Float[Array, "H W 2"]:
    """Ego-centred (unrotated) coordinates of every pixel centre: row 0 is ``ahead`` metres forward, column 0 the left
    edge, for an ego at the origin with ``heading``."""
    res, half = cfg.resolution, 0.5 * (cfg.ahead + cfg.behind)
    idx = jnp.arange(cfg.size, dtype=jnp.float32) + 0.5
    fwd = cfg.ahead - idx * res  # [H]
    left = half - idx * res  # [W]
    u = jnp.stack([jnp.cos(heading), jnp.sin(heading)])
    n = jnp.stack([-u[1], u[0]])
    return fwd[:, None, None] * u + left[None, :, None] * n


def _in_polygons(points: Float[Array, "P 2"], verts: Float[Array, "A V 2"], valid: Bool[Array, "A"]
                 ) -> Bool[Array, "P A"]:
    return jax.vmap(lambda p: jax.vmap(point_in_polygon, in_axes=(None, 0))(p, verts))(points) & valid


def _near_polylines(points: Float[Array, "P 2"], a: Float[Array, "E 2"], b: Float[Array, "E 2"],
                    valid: Bool[Array, "E"], width: float) -> Bool[Array, "P"]:
    d2 = segments_distance2(points[:, None, 0], points[:, None, 1], a[None, :, 0], a[None, :, 1], b[None, :, 0],
                            b[None, :, 1])
    return jnp.any((d2 <= width * width) & valid, axis=-1)


def _in_boxes(points: Float[Array, "P 2"], boxes: Float[Array, "N 4 2"], valid: Bool[Array, "N"]
              ) -> Bool[Array, "P N"]:
    return jax.vmap(lambda p: jax.vmap(point_in_box, in_axes=(None, 0))(p, boxes))(points) & valid


def _front_boxes(center, heading, length, width):
    """The front third of boxes (centre, heading, length, width broadcast over N)."""
    u = jnp.stack([jnp.cos(heading), jnp.sin(heading)], -1)
    return jax.vmap(box_corners)(center + (length / 3.0)[:, None] * u, heading, length / 3.0, width)


def _paint(image, mask, color):
    return jnp.where(mask[..., None], jnp.asarray(color, jnp.uint8), image)


@functools.partial(jax.jit, static_argnums=(2,))
def render_bev(scene: Scene, trajectory: Float[Array, "41 11"], cfg: BevConfig = BevConfig()
               ) -> UInt8[Array, "H W 3"]:
    """One scene (unbatched ``Scene``) and one ego trajectory -> RGB uint8 [size, size, 3] (module docstring)."""
    heading0 = scene.history[-1, 2]
    pts = pixel_points(heading0, cfg).reshape(-1, 2)
    m = scene.map
    image = jnp.broadcast_to(jnp.asarray(COLORS["off_road"], jnp.uint8), (pts.shape[0], 3))

    in_area = _in_polygons(pts, m.areas.vertices, m.areas.valid)  # [P, A]
    image = _paint(image, jnp.any(in_area & (m.area_kind != AreaKind.INTERSECTION), -1), COLORS["drivable"])
    image = _paint(image, jnp.any(in_area & (m.area_kind == AreaKind.INTERSECTION), -1), COLORS["intersection"])
    in_lane = _in_polygons(pts, m.lanes.vertices, m.lanes.valid)  # [P, L]
    image = _paint(image, jnp.any(in_lane & m.lane_on_route, -1), COLORS["route_lane"])
    image = _paint(image, jnp.any(in_lane & m.lane_on_route & m.lane_red[:, 0], -1), COLORS["red_light"])
    lv = m.lanes.vertices
    edge_valid = m.lanes.valid[:, None] & m.lanes.vertex_valid
    image = _paint(image, _near_polylines(pts, lv.reshape(-1, 2), jnp.roll(lv, -1, axis=1).reshape(-1, 2),
                                          edge_valid.reshape(-1), cfg.line_width), COLORS["lane_boundary"])
    c = m.centerline
    image = _paint(image, _near_polylines(pts, c[:-1], c[1:], m.centerline_valid[1:], cfg.line_width),
                   COLORS["centerline"])

    ag = scene.agents
    kind = jnp.clip(ag.type, 0, AgentType.BICYCLE + 1)  # 3 = any static object
    palette = jnp.asarray([COLORS["vehicle"], COLORS["pedestrian"], COLORS["bicycle"], COLORS["static"]], jnp.float32)

    def agents_at(t, image, tone):
        boxes = jax.vmap(box_corners)(ag.center[:, t], ag.heading[:, t], ag.length, ag.width)
        hit = _in_boxes(pts, boxes, ag.valid & ag.present[:, t])  # [P, N]
        first = jnp.argmax(hit, -1)
        color = (palette[kind[first]] * tone).astype(jnp.uint8)
        return jnp.where(jnp.any(hit, -1)[:, None], color, image)

    for t in FUTURE_STEPS[::-1]:
        image = agents_at(t, image, 0.45)
    image = agents_at(0, image, 1.0)
    front = _front_boxes(ag.center[:, 0], ag.heading[:, 0], ag.length, ag.width)
    hit = _in_boxes(pts, front, ag.valid & ag.present[:, 0])
    light = (palette[kind[jnp.argmax(hit, -1)]] * 0.5 + 127.5).astype(jnp.uint8)
    image = jnp.where(jnp.any(hit, -1)[:, None], light, image)

    def ego_boxes(states):
        h = states[:, 2]
        u = jnp.stack([jnp.cos(h), jnp.sin(h)], -1)
        centre = states[:, :2] + EGO_REAR_AXLE_TO_CENTER * u
        ones = jnp.ones_like(h)
        return centre, h, EGO_LENGTH * ones, EGO_WIDTH * ones

    steps = jnp.asarray(EGO_STEPS)
    centre, h, length, width = ego_boxes(trajectory[steps])
    boxes = jax.vmap(box_corners)(centre, h, length, width)
    hit = _in_boxes(pts, boxes, jnp.ones(len(EGO_STEPS), bool))  # [P, S]
    frac = (jnp.argmax(hit[:, ::-1], -1)[:, None]).astype(jnp.float32)  # latest footprint wins
    frac = (len(EGO_STEPS) - 1 - frac) / max(len(EGO_STEPS) - 1, 1)
    start, end = (jnp.asarray(COLORS[k], jnp.float32) for k in ("trajectory_start", "trajectory_end"))
    image = jnp.where(jnp.any(hit, -1)[:, None], (start + frac * (end - start)).astype(jnp.uint8), image)
    centre, h, length, width = ego_boxes(trajectory[:1])
    image = _paint(image, _in_boxes(pts, jax.vmap(box_corners)(centre, h, length, width), jnp.ones(1, bool))[:, 0],
                   COLORS["ego"])
    image = _paint(image, _in_boxes(pts, _front_boxes(centre, h, length, width), jnp.ones(1, bool))[:, 0],
                   COLORS["ego_front"])
    return image.reshape(cfg.size, cfg.size, 3)


@functools.partial(jax.jit, static_argnums=(2,))
def render_bev_batch(scene: Scene, trajectories: Float[Array, "B 41 11"], cfg: BevConfig = BevConfig()
                     ) -> UInt8[Array, "B H W 3"]:
    """``render_bev`` over a batch of scenes [B] and one trajectory each [B, 41, 11] (jitted per ``cfg``)."""
    return jax.vmap(render_bev, in_axes=(0, 0, None))(scene, trajectories, cfg)


def save_png(image, path: str | Path) -> Path:
    """Writes an RGB uint8 [H, W, 3] image as PNG."""
    from PIL import Image

    Image.fromarray(np.asarray(image, np.uint8), "RGB").save(path)
    return Path(path)
