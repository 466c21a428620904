"""NC — No at-fault Collisions (spec ``epdms.md`` §3.1, §7.2, §11 items 4-6), in closed form.

NAVSIM walks t = 0..40 with an ignore set per proposal: a contact (ego box at t touches the object box at frame t,
closed) is classified; if at fault, NC drops to 0 (vehicle / pedestrian / bicycle) or 0.5 (static object) and the
object is *not* ignored; otherwise the object is ignored for the rest of the horizon. Hence only the **first** contact
of each (proposal, object) pair matters: the closed form classifies that contact and takes the minimum penalty.

Classification of a contact at step t (first rule that holds):

1. ego speed hypot(vx, vy) <= 0.05 m/s -> stopped ego, not at fault;
2. the object is "stopped": a static type, or an agent whose speed at its **first appearance** is <= 0.05 m/s -> at
   fault;
3. the object centroid (current frame) is behind the ego rear axle (angle to the ego heading > 150 deg) -> not at fault;
4. the front bumper FL-FR touches the object box -> at fault;
5. otherwise lateral: at fault iff ``multiple_lanes(t)`` or ``non_drivable(t)``.

Red lights are never collision partners (they are not agents here; TLC handles them). One scene per call.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.geometry import box_corners, boxes_intersect_xy, segment_intersects_box
from jaxdrive.rules.areas import EgoAreas, ego_boxes
from jaxdrive.scene import AgentType, Agents, Scene, StateIndex

EGO_STOPPED_SPEED = 0.05  # m/s, NC's own threshold (not the config's 5e-3)
TRACK_STOPPED_SPEED = 0.05  # m/s, nuPlan is_track_stopped
COS_AHEAD = math.cos(math.radians(30.0))  # is_agent_ahead: angle < 30 deg
COS_BEHIND = math.cos(math.radians(150.0))  # is_agent_behind: angle > 150 deg


def object_boxes(agents: Agents) -> Float[Array, "N T 4 2"]:
    """Corners [FL, RL, RR, FR] of every object at every frame (m)."""
    return jax.vmap(jax.vmap(box_corners, in_axes=(0, 0, None, None)))(agents.center, agents.heading, agents.length,
                                                                       agents.width)


def first_appearance_stopped(agents: Agents) -> Bool[Array, "N"]:
    """nuPlan ``is_track_stopped`` on the first appearance: static types always, agents if speed <= 0.05 m/s."""
    first = jnp.argmax(agents.present, axis=-1)
    v = jnp.take_along_axis(agents.velocity, first[:, None, None], axis=1)[:, 0]
    is_agent = agents.type <= AgentType.BICYCLE
    return ~is_agent | (jnp.hypot(v[:, 0], v[:, 1]) <= TRACK_STOPPED_SPEED)


def collision_penalty(agents: Agents) -> Float[Array, "N"]:
    """NC value of an at-fault collision with each object: 0 for agents, 0.5 for static objects."""
    return jnp.where(agents.type <= AgentType.BICYCLE, 0.0, 0.5).astype(jnp.float32)


def heading_cosine(rear_axle: Float[Array, "*b 2"], heading: Float[Array, "*b"],
                   point: Float[Array, "*b 2"]) -> tuple[Float[Array, "*b"], Bool[Array, "*b"]]:
    """cos of the angle between the ego heading and (point - rear axle), and whether it is defined (point != axle).

    ``is_agent_ahead`` is ``defined & cos > cos 30 deg``; ``is_agent_behind`` is ``defined & cos < cos 150 deg``.
    """
    d = point - rear_axle
    norm = jnp.hypot(d[..., 0], d[..., 1])
    defined = norm > 0
    cos = (jnp.cos(heading) * d[..., 0] + jnp.sin(heading) * d[..., 1]) / jnp.where(defined, norm, 1.0)
    return cos, defined


def first_true(flags: Bool[Array, "... E"]) -> tuple[Int[Array, "..."], Bool[Array, "..."]]:
    """Index of the first True along the last axis (0 if none, like ``argmax``) and whether there is one.

    A plain min-reduction of the indices: XLA fuses the producer (the separating-axis tests) into this reduction, and
    on CPU a min over int32 vectorises where an arg-max's (value, index) pair reduction does not.
    """
    n = flags.shape[-1]
    first = jnp.min(jnp.where(flags, jnp.arange(n, dtype=jnp.int32), n), axis=-1)
    found = first < n
    return jnp.where(found, first, 0), found


def no_at_fault_collisions(scene: Scene, states: Float[Array, "K T 11"],
                           areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """NC per proposal ({0, 0.5, 1}, float32) and the first step of an at-fault collision (-1 if none).

    Args:
      scene: one scene (ego-centred float32); only ``scene.agents`` is used.
      states: proposal rear-axle states [K, T, 11].
      areas: the proposals' ego-area flags (``multiple_lanes``, ``non_drivable`` used).
    """
    agents = scene.agents
    ego = ego_boxes(states)  # [K, T, 4, 2]
    obj = object_boxes(agents)  # [N, T, 4, 2]
    live = agents.present & agents.valid[:, None]  # [N, T]
    touch = boxes_intersect_xy(*[jnp.moveaxis(ego[..., i], -1, 0)[:, :, None] for i in range(2)],
                               *[jnp.moveaxis(obj[..., i], -1, 0)[:, None] for i in range(2)])  # [K, N, T]
    contact = touch & live[None]
    t_first, any_contact = first_true(contact)  # [K, N]

    def at(x: Array) -> Array:  # per-(proposal, step) values [K, T, ...] at each pair's first contact -> [K, N, ...]
        idx = t_first.reshape(t_first.shape + (1,) * (x.ndim - 2))
        return jnp.take_along_axis(x, idx, axis=1)

    speed = jnp.hypot(states[..., StateIndex.VELOCITY_X], states[..., StateIndex.VELOCITY_Y])  # [K, T]
    ego_stopped = at(speed) <= EGO_STOPPED_SPEED
    track_stopped = first_appearance_stopped(agents)[None]  # [1, N]
    n_idx = jnp.arange(obj.shape[0])[None, :]
    cos, defined = heading_cosine(at(states[..., :2]), at(states[..., StateIndex.HEADING]),
                                  agents.center[n_idx, t_first])
    behind = defined & (cos < COS_BEHIND)
    front = jax.vmap(jax.vmap(segment_intersects_box))(at(ego[:, :, 0]), at(ego[:, :, 3]), obj[n_idx, t_first])
    lateral_fault = at(areas.multiple_lanes | areas.non_drivable)
    at_fault = any_contact & ~ego_stopped & (track_stopped | (~behind & (front | lateral_fault)))  # [K, N]

    penalty = jnp.where(at_fault, collision_penalty(agents)[None], 1.0)
    nc = jnp.min(penalty, axis=1, initial=1.0)
    step = jnp.min(jnp.where(at_fault, t_first, jnp.iinfo(jnp.int32).max), axis=1, initial=jnp.iinfo(jnp.int32).max)
    step = jnp.where(jnp.any(at_fault, axis=1), step, -1).astype(jnp.int32)
    return nc.astype(jnp.float32), step
