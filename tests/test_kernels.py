"""``jaxdrive.kernels.tile_crossings``: the Pallas per-tile crossing counts (``interpret=True`` on CPU) equal the jnp twin.

Random tiles with points on edges and vertices (boundary hits), horizontal / degenerate / padded (``FAR``) edges, and
the real tiles of a packed fixture batch; the twin itself is what ``points_in_tiles`` runs, whose flags the broad-phase
tests compare with the unculled kernels.
"""

from __future__ import annotations

import glob

import jax
import numpy as np
import pytest

from jaxdrive.broadphase import TILE_EDGES, pack_map
from jaxdrive.data.scene_json import read_scene
from jaxdrive.rules.areas import ego_boxes
from jaxdrive.scene import FAR, PadSpec, batch_scenes
from jaxdrive.kernels.tile_crossings import ON_WEIGHT, tile_counts, tile_counts_jnp, tile_counts_pallas
from conftest import EPDMS_FIXTURES


def _random_tiles(rng, nt: int, n: int):
    a = rng.integers(-6, 7, (nt, TILE_EDGES, 2)).astype(np.float32)  # integer grid: many exact ties
    b = a + rng.integers(-3, 4, (nt, TILE_EDGES, 2)).astype(np.float32)
    b[:, 0, 1] = a[:, 0, 1]  # horizontal edges
    b[:, 1] = a[:, 1]  # degenerate edges
    a[:, -1] = b[:, -1] = FAR  # padding
    p = rng.uniform(-8, 8, (nt, n, 2)).astype(np.float32)
    p[:, :8] = a[:, :8]  # on vertices
    p[:, 8:16] = (0.5 * (a[:, :8] + b[:, :8])).astype(np.float32)  # on edges (exact midpoints of grid points)
    return p[..., 0], p[..., 1], a[..., 0], a[..., 1], b[..., 0], b[..., 1]


def test_pallas_interpret_equals_jnp_twin_on_random_tiles():
    args = _random_tiles(np.random.default_rng(0), 50, 205)  # neither dimension a multiple of the block sizes
    want = np.asarray(jax.jit(tile_counts_jnp)(*args))
    got = np.asarray(tile_counts_pallas(*args, interpret=True))
    assert got.shape == want.shape == (50, 205)
    np.testing.assert_array_equal(got, want)
    assert (want >= ON_WEIGHT).sum() > 100 and ((want % ON_WEIGHT) > 0).sum() > 1000  # boundary hits and crossings


def test_pallas_interpret_equals_jnp_twin_on_packed_fixture_tiles():
    files = sorted(glob.glob(str(EPDMS_FIXTURES / "scene_*.json")))[:8]
    scenes = [read_scene(f) for f in files]
    batch, props, _ = batch_scenes(scenes, PadSpec.fit(scenes), validate=False)
    packed, _ = pack_map(batch, props.states)
    lanes = jax.tree_util.tree_map(lambda x: np.asarray(x).reshape((-1,) + x.shape[2:]), packed.lanes)
    states = np.pad(np.asarray(props.states), ((0, 0), (0, 0), (0, 1), (0, 0)))  # 42 steps: 3 chunks of 14
    corners = np.asarray(jax.jit(jax.vmap(ego_boxes))(states)).reshape(-1, 14 * 4, 2)  # [B*K*C, 4L, 2] per slot
    slot = lanes.pair_slot[lanes.tile_pair]
    args = (corners[slot, :, 0], corners[slot, :, 1], lanes.start[..., 0], lanes.start[..., 1],
            lanes.end[..., 0], lanes.end[..., 1])
    np.testing.assert_array_equal(np.asarray(tile_counts_pallas(*args, interpret=True)),
                                  np.asarray(jax.jit(tile_counts_jnp)(*args)))


def test_implementation_switch(monkeypatch):
    args = _random_tiles(np.random.default_rng(1), 4, 16)
    monkeypatch.setenv("JAXDRIVE_KERNELS", "jnp")
    np.testing.assert_array_equal(np.asarray(tile_counts(*args)), np.asarray(tile_counts_jnp(*args)))
    monkeypatch.setenv("JAXDRIVE_KERNELS", "cuda")
    with pytest.raises(ValueError, match="JAXDRIVE_KERNELS"):
        tile_counts(*args)
