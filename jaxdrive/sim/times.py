"""Knot and query times in integer microseconds, built from float seconds as NAVSIM does (host-side numpy).

NAVSIM turns float seconds into µs timestamps with truncation (spec/tracker-json.md §3.3), so with nuPlan-like
timestamps (t0 ≈ 1.6e15 µs) some offsets come out one µs short (499999 instead of 500000). Offsets relative to t0
are returned; they are small exact integers, so the interpolation can run on them in float32 or float64.
"""
import numpy as np

from jaxdrive.sim import constants as C


def knot_and_query_offsets_us(t0_us: np.ndarray | int = 0) -> tuple[np.ndarray, np.ndarray]:
    """µs offsets (from t0) of the 9 interpolation knots and the 41 query times.

    Args:
      t0_us: [*batch] integer timestamps of the initial states [µs]. With 0 (or any whole second) the grid is
        exact: knots 0, 500000, ..., 4000000 and queries 0, 100000, ..., 4000000.

    Returns:
      (knot_offsets [*batch, 9], query_offsets [*batch, 41]) as int64 [µs]. Knot 0 and query 0 are 0; queries are
      clipped into [0, last knot], as `get_trajectory_as_array` clips them.
    """
    t0 = np.asarray(t0_us, dtype=np.int64)[..., None]
    t0_s = t0 * 1e-6
    knot_s = (np.arange(0.0, C.NUM_SUBMITTED_POSES * 0.5, 0.5) + 0.5) + t0_s
    knots = np.concatenate([t0, (knot_s * 1e6).astype(np.int64)], axis=-1)
    query_s = np.arange(0.0, C.NUM_STEPS * 0.1 + 0.1, 0.1) + t0_s
    queries = np.clip((query_s * 1e6).astype(np.int64), knots[..., :1], knots[..., -1:])
    return knots - t0, queries - t0


DEFAULT_KNOT_OFFSETS_US, DEFAULT_QUERY_OFFSETS_US = knot_and_query_offsets_us(0)
