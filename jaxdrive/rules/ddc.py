"""DDC — Driving Direction Compliance (spec ``epdms.md`` §3.3).

Per step, the ego centre's displacement d_t = |c_t - c_{t-1}| (d_0 = 0) counts only while the centre is off every
on-route lane (``oncoming``) and not inside an intersection. W_t sums d over steps t-10 .. t: **11** displacements
(NAVSIM's window quirk; clipped at step 0). With m = max_t W_t: DDC = 1 if m < 2 m, 0.5 if m < 6 m, else 0.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.rules.areas import EgoAreas, ego_centers, first_step
from jaxdrive.scene import Scene

WINDOW = 11  # int(1.0 s / 0.1 s) + 1 entries, as NAVSIM sums them
COMPLIANCE_M = 2.0
VIOLATION_M = 6.0


def windowed_oncoming_progress(states: Float[Array, "K T 11"], areas: EgoAreas) -> Float[Array, "K T"]:
    """W_t (m): masked centre displacement summed over the 11 steps ending at t."""
    c = ego_centers(states)
    d = jnp.sqrt(jnp.sum((c[:, 1:] - c[:, :-1]) ** 2, axis=-1))
    d = jnp.concatenate([jnp.zeros_like(d[:, :1]), d], axis=1)
    d = jnp.where(areas.oncoming & ~areas.center_in_intersection, d, 0.0)
    padded = jnp.pad(d, ((0, 0), (WINDOW - 1, 0)))
    t = d.shape[1]
    return sum(padded[:, i:i + t] for i in range(WINDOW))


def driving_direction_compliance(scene: Scene, states: Float[Array, "K T 11"],
                                 areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """DDC per proposal ({0, 0.5, 1}, float32) and the first step whose window reaches 2 m (-1 if none)."""
    del scene
    w = windowed_oncoming_progress(states, areas)
    m = jnp.max(w, axis=-1)
    value = jnp.where(m < COMPLIANCE_M, 1.0, jnp.where(m < VIOLATION_M, 0.5, 0.0)).astype(jnp.float32)
    return value, first_step(w >= COMPLIANCE_M)
