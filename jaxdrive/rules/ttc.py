"""TTC — time-to-collision within bound (spec ``epdms.md`` §3.6, §7.2, §11 items 3-4), in closed form.

NAVSIM walks ego steps t = 0..31 and offsets s in {0, 3, 6, 9} (0 .. 0.9 s) in lexicographic (t, s) order. The ego box
at t is translated (no rotation) by v_t (cos th_t, sin th_t) 0.1 s and intersected (closed) with every object box at
frame t + s. An event is skipped without remembering the object when v_t < 0.005 m/s; otherwise it is a violation
(TTC = 0) iff the object centroid is ahead of the unprojected rear axle at t (angle < 30 deg), or [multiple_lanes(t)
or non_drivable(t) or rear axle in an intersection at t] and it is not behind (angle <= 150 deg); a non-violating
object is ignored for the rest of the proposal. Hence only each (proposal, object) pair's first non-skipped event
matters. Ego flags and the rear axle come from step t, the object's position from frame t + s. Red lights are never
partners. ``time_to_collision`` takes one scene; ``batch_time_to_collision`` a batch, dense or packed by the broad
phase (only the (proposal, agent, chunk) triples whose boxes can touch are tested, ``jaxdrive.broadphase.contacts``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import CONTACT_STEPS, ContactPairs, PackedAgents
from jaxdrive.constants import TTC_LAST_EGO_STEP, TTC_OFFSETS
from jaxdrive.errors import UserInputError
from jaxdrive.geometry import boxes_intersect_xy
from jaxdrive.broadphase.contacts import (box_rows, corners, first_of_run, over_groups, per_proposal_min,
                                         per_used_triple, windows)
from jaxdrive.rules.areas import EgoAreas, ego_boxes, ego_units
from jaxdrive.rules.nc import COS_AHEAD, COS_BEHIND, first_true, heading_cosine, object_boxes
from jaxdrive.scene import DT, Agents, Scene, StateIndex

TTC_STOPPED_SPEED = 5e-3  # m/s (PDMScorerConfig.stopped_speed_threshold)
OFFSETS = TTC_OFFSETS  # projection steps (jaxdrive.constants, shared with the broad phase)
LAST_EGO_STEP = TTC_LAST_EGO_STEP


def event_violation(rear_axle: Float[Array, "*p 2"], heading: Float[Array, "*p"], centroid: Float[Array, "*p 2"],
                    risky: Bool[Array, "*p"]) -> Bool[Array, "*p"]:
    """Whether a (non-skipped) event is a violation: the object centroid is ahead of the rear axle, or ego is in a
    risky area at that step and the object is not behind."""
    cos, defined = heading_cosine(rear_axle, heading, centroid)
    ahead = defined & (cos > COS_AHEAD)
    behind = defined & (cos < COS_BEHIND)
    return ahead | (risky & ~behind)


def _risky(areas: EgoAreas) -> Bool[Array, "*b T"]:
    return areas.multiple_lanes | areas.non_drivable | areas.rear_axle_in_intersection


def _shift(speed: Float[Array, "*p"], direction: Float[Array, "*p 2"]) -> Float[Array, "*p S 2"]:
    """TTC's translations of the ego box: speed x 0.1 s x s along the heading, for s in ``OFFSETS``."""
    offsets = jnp.asarray(OFFSETS)
    return (speed[..., None, None] * DT * offsets[:, None]) * direction[..., None, :]


def time_to_collision(scene: Scene, states: Float[Array, "K T 11"],
                      areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """TTC per proposal ({0, 1}, float32) and the first ego step t of a violation (-1 if none).

    Args:
      scene: one scene (ego-centred float32); only ``scene.agents`` (``Agents``) is used.
      states: proposal rear-axle states [K, T, 11] with T = 41.
      areas: ego-area flags (``multiple_lanes``, ``non_drivable``, ``rear_axle_in_intersection`` used).
    """
    agents = scene.agents
    if isinstance(agents, PackedAgents):
        raise UserInputError("time_to_collision: PackedAgents (jaxdrive.broadphase) hold the whole batch's contact "
                         "triples; use batch_time_to_collision(scene[B], states[B, K, T, 11], areas)")
    nt = LAST_EGO_STEP + 1
    offsets = jnp.asarray(OFFSETS)
    direction = ego_units(states[:, :nt])  # [K, t, 2]
    ego = ego_boxes(states[:, :nt], direction)  # [K, t, 4, 2]
    speed = jnp.hypot(states[:, :nt, StateIndex.VELOCITY_X], states[:, :nt, StateIndex.VELOCITY_Y])  # [K, t]
    heading = states[:, :nt, StateIndex.HEADING]
    shift = _shift(speed, direction)  # [K, t, S, 2]
    # Corner coordinates split by axis, corners leading, broadcast to [4, K, N, t, S] (``boxes_intersect_xy``).
    projected = [jnp.moveaxis(ego[..., i], -1, 0)[:, :, None, :, None] + shift[None, :, None, :, :, i]
                 for i in range(2)]  # [4, K, 1, t, S] each

    frames = jnp.arange(nt)[:, None] + offsets[None, :]  # [t, S] object frame t + s
    obj = object_boxes(agents)[:, frames]  # [N, t, S, 4, 2]
    live = (agents.present & agents.valid[:, None])[:, frames]  # [N, t, S]
    objects = [jnp.moveaxis(obj[..., i], -1, 0)[:, None] for i in range(2)]  # [4, 1, N, t, S] each
    hit = boxes_intersect_xy(*projected, *objects)  # [K, N, t, S]
    moving = (speed >= TTC_STOPPED_SPEED)[:, None, :, None]
    events = (hit & live[None] & moving).reshape(hit.shape[:2] + (-1,))  # [K, N, t*S] in (t, s) order
    e_first, any_event = first_true(events)
    t_first = e_first // len(OFFSETS)
    frame_first = t_first + offsets[e_first % len(OFFSETS)]  # [K, N]

    n_idx = jnp.arange(obj.shape[0])[None, :]
    violation = any_event & event_violation(jnp.take_along_axis(states[:, :, :2], t_first[..., None], axis=1),
                                            jnp.take_along_axis(heading, t_first, axis=1),
                                            agents.center[n_idx, frame_first],
                                            jnp.take_along_axis(_risky(areas)[:, :nt], t_first, axis=1))  # [K, N]
    step = jnp.min(jnp.where(violation, t_first, nt), axis=1, initial=nt)
    step = jnp.where(jnp.any(violation, axis=1), step, -1).astype(jnp.int32)
    return jnp.where(step < 0, 1.0, 0.0).astype(jnp.float32), step


def _packed_ttc(agents: Agents, pairs: ContactPairs, states: Float[Array, "K T 11"], risky: Bool[Array, "K T"],
                blocks: Int[Array, ""]) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """TTC of one group's K proposals (over its scenes' ``agents``) from its contact triples; the separating-axis
    tests run over the first ``blocks`` blocks of triples (``contacts.per_used_triple``).

    The separating-axis tests run per offset s over [P, L] slices of each triple's windows of the box rows. The rows
    and windows pass through ``jax.lax.optimization_barrier``, a hint against XLA fusing the gathers into every
    (triple, step, offset) test; the CPU backend of jaxlib 0.10 removes barriers before fusion (its compiled step is
    the same without them), and materialising the rows there instead (``jaxdrive.materialize``) made the whole step
    ~15% slower, so on CPU XLA's own fusion decides. The boxes' cos / sin are materialised (``ego_units``).
    """
    barrier = jax.lax.optimization_barrier
    nt, ns = LAST_EGO_STEP + 1, len(OFFSETS)
    offsets = jnp.asarray(OFFSETS)
    k, frames = states.shape[:2]
    nb, n = agents.valid.shape
    owner, agent, scene = pairs.owner, pairs.agent, pairs.owner // (k // nb)
    speed = jnp.hypot(states[:, :nt, StateIndex.VELOCITY_X], states[:, :nt, StateIndex.VELOCITY_Y])
    heading = states[:, :nt, StateIndex.HEADING]
    units = ego_units(states[:, :nt])
    ego_rows = barrier(box_rows(ego_boxes(states[:, :nt], units), speed, units[..., 0], units[..., 1]))
    obj = jax.vmap(object_boxes)(agents).reshape((nb * n, frames, 4, 2))
    live = (agents.present & agents.valid[..., None]).reshape(nb * n, frames)
    reach = CONTACT_STEPS + OFFSETS[-1]
    obj_rows = barrier(box_rows(obj, live))

    def first_event(i: Int[Array, "TB"]) -> Int[Array, "TB"]:  # first event in (t, s) order, per triple
        start = pairs.chunk[i] * CONTACT_STEPS  # ego steps start .. start + L - 1 (< nt: whole chunks)
        ego_w = barrier(windows(ego_rows, owner[i], start, CONTACT_STEPS, nt))  # [TB, L, 11]
        obj_w = barrier(windows(obj_rows, scene[i] * n + agent[i], start, reach,
                                max(frames, nt + OFFSETS[-1])))  # [TB, R, 9]
        step_speed = ego_w[..., 8]  # [TB, L]
        moving = step_speed >= TTC_STOPPED_SPEED
        ex, ey = corners(ego_w)
        steps = start[:, None] + jnp.arange(CONTACT_STEPS)  # [TB, L] ego step t
        e_local = jnp.full(i.shape, nt * ns, jnp.int32)
        for j, s in enumerate(OFFSETS):
            at_frame = obj_w[:, s:s + CONTACT_STEPS]  # [TB, L, 9] object frame t + s
            shift = step_speed * DT * offsets[j]  # ``_shift``'s products, in its order
            dx, dy = shift * ego_w[..., 9], shift * ego_w[..., 10]
            hit = boxes_intersect_xy([x + dx for x in ex], [y + dy for y in ey], *corners(at_frame))
            events = hit & (at_frame[..., 8] > 0) & moving & pairs.valid[i][:, None]
            e_local = jnp.minimum(e_local, jnp.min(jnp.where(events, steps * ns + j, nt * ns), axis=1))
        return e_local

    e_local = per_used_triple(first_event, pairs, blocks, jnp.int32(nt * ns))  # [P]
    first = first_of_run(e_local, pairs, nt * ns)
    ef = jnp.minimum(e_local, nt * ns - 1)
    t_first = ef // ns
    violation = first & event_violation(states[owner, t_first, :2], heading[owner, t_first],
                                        agents.center[scene, agent, t_first + offsets[ef % ns]], risky[owner, t_first])
    step = per_proposal_min(jnp.where(violation, t_first, nt), pairs, k, nt)
    step = jnp.where(step < nt, step, -1).astype(jnp.int32)
    return jnp.where(step < 0, 1.0, 0.0).astype(jnp.float32), step


def batch_time_to_collision(scene: Scene, states: Float[Array, "B K T 11"],
                            areas: EgoAreas) -> tuple[Float[Array, "B K"], Int[Array, "B K"]]:
    """``time_to_collision`` of a batch [B, K]: per scene for ``Agents``, or over the broad phase's contact triples
    for ``PackedAgents`` (``jaxdrive.broadphase.pack_batch`` on the same states; identical results)."""
    if not isinstance(scene.agents, PackedAgents):
        return jax.vmap(time_to_collision)(scene, states, areas)
    packed = scene.agents
    return over_groups(_packed_ttc, packed.agents, packed.ttc, states, _risky(areas))
