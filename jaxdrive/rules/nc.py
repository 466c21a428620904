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

Red lights are never collision partners (they are not agents here; TLC handles them). ``no_at_fault_collisions`` takes
one scene; ``batch_no_at_fault_collisions`` a batch, dense or packed by the broad phase (only the (proposal, agent,
chunk) triples whose boxes can touch are tested, ``jaxdrive.broadphase.contacts``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import CONTACT_STEPS, ContactPairs, PackedAgents
from jaxdrive.errors import UserInputError
from jaxdrive.geometry import box_corners_along, boxes_intersect_xy, heading_unit, segment_intersects_box
from jaxdrive.materialize import materialize
from jaxdrive.broadphase.contacts import (box_rows, corners, first_of_run, over_groups, per_proposal_min,
                                         per_used_triple, windows)
from jaxdrive.rules.areas import EgoAreas, ego_boxes
from jaxdrive.scene import AgentType, Agents, Scene, StateIndex

EGO_STOPPED_SPEED = 0.05  # m/s, NC's own threshold (not the config's 5e-3)
TRACK_STOPPED_SPEED = 0.05  # m/s, nuPlan is_track_stopped
COS_AHEAD = math.cos(math.radians(30.0))  # is_agent_ahead: angle < 30 deg
COS_BEHIND = math.cos(math.radians(150.0))  # is_agent_behind: angle > 150 deg


def object_boxes(agents: Agents) -> Float[Array, "N T 4 2"]:
    """Corners [FL, RL, RR, FR] of every object at every frame (m)."""
    units = materialize(heading_unit(agents.heading))  # [N, T, 2], once for every corner (``jaxdrive.materialize``)
    return jax.vmap(jax.vmap(box_corners_along, in_axes=(0, 0, None, None)))(agents.center, units, agents.length,
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


def contact_at_fault(state: Float[Array, "*p 11"], ego_box: Float[Array, "*p 4 2"], obj_box: Float[Array, "*p 4 2"],
                     obj_center: Float[Array, "*p 2"], track_stopped: Bool[Array, "*p"],
                     lateral_fault: Bool[Array, "*p"]) -> Bool[Array, "*p"]:
    """Rules 1-5 (module docstring) for contacts: the ego state and box at the contact step, the object's box and
    centre at that frame, whether the object is stopped and whether ego is in a lateral-fault area then."""
    ego_stopped = jnp.hypot(state[..., StateIndex.VELOCITY_X], state[..., StateIndex.VELOCITY_Y]) <= EGO_STOPPED_SPEED
    cos, defined = heading_cosine(state[..., :2], state[..., StateIndex.HEADING], obj_center)
    behind = defined & (cos < COS_BEHIND)
    flat = lambda x, n: x.reshape((-1,) + x.shape[x.ndim - n:])
    front = jax.vmap(segment_intersects_box)(flat(ego_box[..., 0, :], 1), flat(ego_box[..., 3, :], 1),
                                             flat(obj_box, 2)).reshape(ego_stopped.shape)
    return ~ego_stopped & (track_stopped | (~behind & (front | lateral_fault)))


def no_at_fault_collisions(scene: Scene, states: Float[Array, "K T 11"],
                           areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """NC per proposal ({0, 0.5, 1}, float32) and the first step of an at-fault collision (-1 if none).

    Args:
      scene: one scene (ego-centred float32); only ``scene.agents`` (``Agents``) is used.
      states: proposal rear-axle states [K, T, 11].
      areas: the proposals' ego-area flags (``multiple_lanes``, ``non_drivable`` used).
    """
    agents = scene.agents
    if isinstance(agents, PackedAgents):
        raise UserInputError("no_at_fault_collisions: PackedAgents (jaxdrive.broadphase) hold the whole batch's contact "
                         "triples; use batch_no_at_fault_collisions(scene[B], states[B, K, T, 11], areas)")
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

    n_idx = jnp.arange(obj.shape[0])[None, :]
    at_fault = any_contact & contact_at_fault(at(states), at(ego), obj[n_idx, t_first], agents.center[n_idx, t_first],
                                              first_appearance_stopped(agents)[None],
                                              at(areas.multiple_lanes | areas.non_drivable))  # [K, N]
    penalty = jnp.where(at_fault, collision_penalty(agents)[None], 1.0)
    nc = jnp.min(penalty, axis=1, initial=1.0)
    step = jnp.min(jnp.where(at_fault, t_first, jnp.iinfo(jnp.int32).max), axis=1, initial=jnp.iinfo(jnp.int32).max)
    step = jnp.where(jnp.any(at_fault, axis=1), step, -1).astype(jnp.int32)
    return nc.astype(jnp.float32), step


def _packed_nc(agents: Agents, pairs: ContactPairs, states: Float[Array, "K T 11"], lateral: Bool[Array, "K T"],
               blocks: Int[Array, ""]) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """NC of one group's K proposals (over its scenes' ``agents``) from its contact triples; the box tests run over
    the first ``blocks`` blocks of triples (``contacts.per_used_triple``). The box rows and the triples' windows pass
    through ``jax.lax.optimization_barrier`` (a hint that the CPU backend ignores; see ``ttc._packed_ttc``)."""
    barrier = jax.lax.optimization_barrier
    k, nt = states.shape[:2]
    nb, n = agents.valid.shape
    steps = -(-nt // CONTACT_STEPS) * CONTACT_STEPS
    owner, agent, scene = pairs.owner, pairs.agent, pairs.owner // (k // nb)
    obj = jax.vmap(object_boxes)(agents).reshape((nb * n, nt, 4, 2))
    live = (agents.present & agents.valid[..., None]).reshape(nb * n, nt)
    ego_rows, obj_rows = barrier(box_rows(ego_boxes(states))), barrier(box_rows(obj, live))

    def first_contact(i: Int[Array, "TB"]) -> Int[Array, "TB"]:
        start = pairs.chunk[i] * CONTACT_STEPS
        ego_w = barrier(windows(ego_rows, owner[i], start, CONTACT_STEPS, steps))  # [TB, L, 8]
        obj_w = barrier(windows(obj_rows, scene[i] * n + agent[i], start, CONTACT_STEPS, steps))  # [TB, L, 9]
        t = start[:, None] + jnp.arange(CONTACT_STEPS)  # [TB, L]
        touch = boxes_intersect_xy(*corners(ego_w), *corners(obj_w)) & (obj_w[..., 8] > 0) & pairs.valid[i][:, None]
        return jnp.min(jnp.where(touch & (t < nt), t, nt), axis=-1)

    t_local = per_used_triple(first_contact, pairs, blocks, jnp.int32(nt))  # [P]
    first = first_of_run(t_local, pairs, nt)
    tf = jnp.minimum(t_local, nt - 1)
    box = lambda rows, row: rows[row, tf, :8].reshape(-1, 4, 2)  # the first contact's boxes [P, 4, 2]
    at_fault = first & contact_at_fault(states[owner, tf], box(ego_rows, owner), box(obj_rows, scene * n + agent),
                                        agents.center[scene, agent, tf],
                                        jax.vmap(first_appearance_stopped)(agents)[scene, agent], lateral[owner, tf])
    nc = per_proposal_min(jnp.where(at_fault, collision_penalty(agents)[scene, agent], 1.0), pairs, k, 1.0)
    step = per_proposal_min(jnp.where(at_fault, tf, nt), pairs, k, nt)
    return nc.astype(jnp.float32), jnp.where(step < nt, step, -1).astype(jnp.int32)


def batch_no_at_fault_collisions(scene: Scene, states: Float[Array, "B K T 11"],
                                 areas: EgoAreas) -> tuple[Float[Array, "B K"], Int[Array, "B K"]]:
    """``no_at_fault_collisions`` of a batch [B, K]: per scene for ``Agents``, or over the broad phase's contact
    triples for ``PackedAgents`` (``jaxdrive.broadphase.pack_batch`` on the same states; identical results)."""
    if not isinstance(scene.agents, PackedAgents):
        return jax.vmap(no_at_fault_collisions)(scene, states, areas)
    packed = scene.agents
    return over_groups(_packed_nc, packed.agents, packed.nc, states, areas.multiple_lanes | areas.non_drivable)
