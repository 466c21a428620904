"""DAC — Drivable Area Compliance (spec ``epdms.md`` §3.2): 0 if any ego corner leaves the drivable area at any step."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.rules.areas import EgoAreas, first_step
from jaxdrive.scene import Scene


def drivable_area_compliance(scene: Scene, states: Float[Array, "K T 11"],
                             areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """DAC per proposal ({0, 1}, float32) and the first step with a corner off the drivable area (-1 if none).

    Only the four corners are tested (NAVSIM never tests edges), via ``areas.non_drivable``; ``scene`` and ``states``
    are taken for the common rule signature.
    """
    del scene, states
    step = first_step(areas.non_drivable)
    return jnp.where(step < 0, 1.0, 0.0).astype(jnp.float32), step
