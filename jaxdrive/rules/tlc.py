"""TLC — Traffic Light Compliance (spec ``epdms.md`` §3.4).

TLC = 0 if at some step t the ego box intersects (closed: touching counts) an on-route lane/connector polygon whose
light status at t is red. No exemption for standing on the connector at t = 0. The contact flags are the
``red_light`` map predicate of ``jaxdrive.rules.areas`` (computed with the other area flags).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.rules.areas import EgoAreas, first_step
from jaxdrive.scene import Scene


def traffic_light_compliance(scene: Scene, states: Float[Array, "K T 11"],
                             areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """TLC per proposal ({0, 1}, float32) and the first step on a red on-route connector (-1 if none).

    ``scene`` and ``states`` are taken for the common rule signature; ``areas.red_light`` decides.
    """
    del scene, states
    step = first_step(areas.red_light)
    return jnp.where(step < 0, 1.0, 0.0).astype(jnp.float32), step
