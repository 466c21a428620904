"""TTC — time-to-collision within bound (spec ``epdms.md`` §3.6, §7.2, §11 items 3-4), in closed form.

NAVSIM walks ego steps t = 0..31 and offsets s in {0, 3, 6, 9} (0 .. 0.9 s) in lexicographic (t, s) order. The ego box
at t is translated (no rotation) by v_t (cos th_t, sin th_t) 0.1 s and intersected (closed) with every object box at
frame t + s. An event is skipped without remembering the object when v_t < 0.005 m/s; otherwise it is a violation
(TTC = 0) iff the object centroid is ahead of the unprojected rear axle at t (angle < 30 deg), or [multiple_lanes(t)
or non_drivable(t) or rear axle in an intersection at t] and it is not behind (angle <= 150 deg); a non-violating
object is ignored for the rest of the proposal. Hence only each (proposal, object) pair's first non-skipped event
matters. Ego flags and the rear axle come from step t, the object's position from frame t + s. Red lights are never
partners. One scene per call.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.geometry import boxes_intersect_xy
from jaxdrive.rules.areas import EgoAreas, ego_boxes
from jaxdrive.rules.nc import COS_AHEAD, COS_BEHIND, first_true, heading_cosine, object_boxes
from jaxdrive.scene import DT, Scene, StateIndex

TTC_STOPPED_SPEED = 5e-3  # m/s (PDMScorerConfig.stopped_speed_threshold)
OFFSETS = (0, 3, 6, 9)  # np.arange(0, int(1.0 * 10), 3): projection steps
LAST_EGO_STEP = 31  # 40 - 9


def time_to_collision(scene: Scene, states: Float[Array, "K T 11"],
                      areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """TTC per proposal ({0, 1}, float32) and the first ego step t of a violation (-1 if none).

    Args:
      scene: one scene (ego-centred float32); only ``scene.agents`` is used.
      states: proposal rear-axle states [K, T, 11] with T = 41.
      areas: ego-area flags (``multiple_lanes``, ``non_drivable``, ``rear_axle_in_intersection`` used).
    """
    agents = scene.agents
    nt = LAST_EGO_STEP + 1
    offsets = jnp.asarray(OFFSETS)
    ego = ego_boxes(states[:, :nt])  # [K, t, 4, 2]
    speed = jnp.hypot(states[:, :nt, StateIndex.VELOCITY_X], states[:, :nt, StateIndex.VELOCITY_Y])  # [K, t]
    heading = states[:, :nt, StateIndex.HEADING]
    direction = jnp.stack([jnp.cos(heading), jnp.sin(heading)], axis=-1)  # [K, t, 2]
    shift = (speed[..., None, None] * DT * offsets[None, None, :, None]) * direction[:, :, None, :]  # [K, t, S, 2]
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
    centroid = agents.center[n_idx, frame_first]  # [K, N, 2]
    rear = jnp.take_along_axis(states[:, :, :2], t_first[..., None], axis=1)
    cos, defined = heading_cosine(rear, jnp.take_along_axis(heading, t_first, axis=1), centroid)
    ahead = defined & (cos > COS_AHEAD)
    behind = defined & (cos < COS_BEHIND)
    risky = (areas.multiple_lanes | areas.non_drivable | areas.rear_axle_in_intersection)[:, :nt]
    violation = any_event & (ahead | (jnp.take_along_axis(risky, t_first, axis=1) & ~behind))  # [K, N]

    step = jnp.min(jnp.where(violation, t_first, nt), axis=1, initial=nt)
    step = jnp.where(jnp.any(violation, axis=1), step, -1).astype(jnp.int32)
    return jnp.where(step < 0, 1.0, 0.0).astype(jnp.float32), step
