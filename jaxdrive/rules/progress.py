"""Raw ego progress (spec ``epdms.md`` §3.5): arc-length gain of the ego centre along the route centreline.

raw = max(0, proj(c_40) - proj(c_0)), where proj is the arc length of the nearest centreline point (shapely
``LineString.project`` semantics: clamped to the polyline, first segment on ties). Normalisation across proposals is
not done here (see ``jaxdrive.rules.epdms``).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxdrive.geometry import polyline_arc_lengths
from jaxdrive.rules.areas import EgoAreas, ego_centers
from jaxdrive.scene import Scene


def raw_progress(scene: Scene, states: Float[Array, "K T 11"], areas: EgoAreas) -> Float[Array, "K"]:
    """Raw progress per proposal (m, >= 0, float32) from the first to the last step."""
    del areas
    c = ego_centers(states[:, jnp.array([0, -1])])  # [K, 2, 2]
    arc = polyline_arc_lengths(c[..., 0], c[..., 1], scene.map.centerline)  # [K, 2]
    return jnp.maximum(arc[:, 1] - arc[:, 0], 0.0).astype(jnp.float32)
