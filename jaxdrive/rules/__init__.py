"""EPDMS rule kernels (NAVSIM parity) and their aggregation. ``score`` is the one-call entry point.

Per-metric kernels take ONE scene (``fn(scene, states [K, T, 11], areas) -> (value [K], first_step [K])``) and are
batched with ``jax.vmap``; the map predicates ``areas`` come from ``ego_areas`` (one scene) or ``batch_ego_areas`` (a
batch, also on the broad phase's packed map); ``score`` does all of it for a padded batch and returns
``SubScores[B, K]``.
"""

from jaxdrive.rules.areas import EgoAreas, batch_ego_areas, ego_areas, ego_boxes, ego_centers
from jaxdrive.rules.comfort import HC_CHECKS, comfort_v1, extended_comfort, history_comfort
from jaxdrive.rules.dac import drivable_area_compliance
from jaxdrive.rules.ddc import driving_direction_compliance
from jaxdrive.rules.epdms import (METRICS, SubScores, aggregate, compute_metrics, gated_score, human_filter,
                                  normalize_progress, progress_normaliser, score)
from jaxdrive.rules.lk import lane_keeping
from jaxdrive.rules.nc import no_at_fault_collisions
from jaxdrive.rules.progress import raw_progress
from jaxdrive.rules.savgol import savgol_matrix
from jaxdrive.rules.tlc import traffic_light_compliance
from jaxdrive.rules.ttc import time_to_collision

__all__ = [
    "EgoAreas", "HC_CHECKS", "METRICS", "SubScores", "aggregate", "batch_ego_areas", "comfort_v1", "compute_metrics",
    "drivable_area_compliance", "driving_direction_compliance", "ego_areas", "ego_boxes", "ego_centers",
    "extended_comfort", "gated_score", "history_comfort", "human_filter", "lane_keeping", "no_at_fault_collisions",
    "normalize_progress", "progress_normaliser", "raw_progress", "savgol_matrix", "score", "time_to_collision",
    "traffic_light_compliance",
]
