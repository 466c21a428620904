"""The exact broad phase inside a jitted program: ``pack_on_device`` at fixed capacities, with an overflow flag.

The same culling criteria as the numpy packer (``jaxdrive.broadphase.host``; its module docstring states why they
are exact), computed in jnp on a padded ``Scene[B]`` / ``Proposals[B, K]``, compacted into the same structures
(``PackedMap``, ``PackedAgents``) at the static sizes of a ``PackSpec`` (per scene of the batch, like the host's):

* map units are the (proposal, 14-step chunk, polygon) triples whose bboxes overlap (a unit whose edges all miss the
  chunk's bbox stays, with no tiles: it counts nothing, as a dropped unit would); each unit's kept edges are cut into
  tiles of 8; TLC's units are the lane units of on-route lanes red at some step;
* agents are culled per scene, NC's and TTC's (proposal, agent, 8-step chunk) triples listed per group;
* LK's centreline segments per proposal; the centreline trimmed to ``PackSpec.centerline`` points.

Invalid proposals (``Proposals.valid`` False: padded proposals, filler scenes) get empty bboxes, so they use no
capacity and their rows are not meaningful. When a count exceeds its capacity the packed arrays are truncated and
``overflow`` is True: the caller must not use them (``jaxdrive.scorer`` then scores the unculled batch instead, so
results never depend on capacities). Bboxes are float32 here (float64 on the host): the ``MARGIN_M`` of 5 cm is far
above float32 rounding at ego-centred scales (~1e-5 m), so every kept set still contains every edge / agent / triple
that can change a result.

``needs`` (numpy, host) returns the capacities a host batch needs under these rules, for choosing a run's sizes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase.blocks import search_method
from jaxdrive.broadphase.host import (CENTERLINE_REACH_M, CONTACT_STEPS, EGO_RADIUS_M, MAP_CHUNK_STEPS, MARGIN_M,
                                      NC_STEPS, TILE_EDGES, TTC_FRAMES_AHEAD, TTC_HORIZON_S, TTC_STEPS, ContactPairs,
                                      EdgeTiles, PackedAgents, PackedMap, PackSpec, ego_chunk_bboxes, overlaps,
                                      kept_edges, polygon_bboxes, swept_bboxes)
from jaxdrive.errors import UserInputError
from jaxdrive.exported import files_hash
from jaxdrive.geometry import EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WIDTH, heading_unit
from jaxdrive.materialize import materialize
from jaxdrive.scene import FAR, Agents, AreaKind, Polygons, Proposals, Scene
from jaxdrive.scene.device import check_batch_shapes

# overlaps nothing. A numpy constant: a jnp array made at import would be a tracer when the first import happens
# inside a user's jax.jit (``jaxdrive.score`` is imported lazily), and leak into every later trace.
_EMPTY = np.array([np.inf, np.inf, -np.inf, -np.inf], np.float32)


_PREFIX_BLOCK = 128


def prefix_count(x: Int[Array, "*b n"] | Bool[Array, "*b n"]) -> Int[Array, "*b n"]:
    """Inclusive prefix sums along the last axis of small non-negative integers (flags, counts), int32.

    ``jnp.cumsum`` lowers to XLA's reduce-window, which on CPU costs tens of ns per element at the broad phase's
    shapes ([pairs, vertices] rows, flat masks of ~10^6 entries). This is a float32 product with a triangular matrix
    per block of 128 entries plus the same over the block totals: exact, as every partial sum is an integer below
    2**24 (longer axes fall back to ``jnp.cumsum``).
    """
    n = x.shape[-1]
    if n > 2 ** 24:
        return jnp.cumsum(x, axis=-1, dtype=jnp.int32)
    f = x.astype(jnp.float32)
    tri = lambda size: jnp.triu(jnp.ones((size, size), jnp.float32))
    if n <= 2 * _PREFIX_BLOCK:
        return jnp.matmul(f, tri(n), precision=jax.lax.Precision.HIGHEST).astype(jnp.int32)
    m = -(-n // _PREFIX_BLOCK)
    f = jnp.pad(f, [(0, 0)] * (x.ndim - 1) + [(0, m * _PREFIX_BLOCK - n)])
    within = jnp.matmul(f.reshape(x.shape[:-1] + (m, _PREFIX_BLOCK)), tri(_PREFIX_BLOCK),
                        precision=jax.lax.Precision.HIGHEST).astype(jnp.int32)
    before = prefix_count(within[..., -1]) - within[..., -1]  # totals of the earlier blocks
    return (within + before[..., None]).reshape(x.shape[:-1] + (m * _PREFIX_BLOCK,))[..., :n]


WORD_BITS = 16  # bit words small enough that a float32 product with powers of two builds them exactly


def bit_words(mask: Bool[Array, "*b n"]) -> Int[Array, "*b W"]:
    """``mask`` as little-endian ``WORD_BITS``-bit words (entry i is bit i % 16 of word i // 16), int32 [*b, W].

    A float32 product with a block-diagonal matrix of powers of two: exact (every word is an integer below 2**16)
    and, on CPU, far cheaper than shifting and OR-ing the bits one by one.
    """
    n = mask.shape[-1]
    w = -(-n // WORD_BITS)
    i = jnp.arange(n)
    powers = jnp.where(i[:, None] // WORD_BITS == jnp.arange(w), 2.0 ** (i % WORD_BITS)[:, None], 0.0)  # [n, W]
    return jnp.matmul(mask.astype(jnp.float32), powers.astype(jnp.float32),
                      precision=jax.lax.Precision.HIGHEST).astype(jnp.int32)


def nth_set_bit(words: Int[Array, "*b W"], rank: Int[Array, "*b R"]) -> Int[Array, "*b R"]:
    """Position of the ``rank``-th (0-based) set bit of each row's ``bit_words``, for R ranks per row (int32;
    meaningless where the row has at most ``rank`` set bits).

    Replaces a prefix sum over the row and a binary search in it: per rank, the word holding it (word popcounts,
    W is small) and a 4-step binary search on popcounts of that word's low bits, all elementwise.
    """
    counts = jax.lax.population_count(words)  # [*b, W]
    before = jnp.cumsum(counts, axis=-1) - counts  # set bits in the earlier words
    q = rank.astype(jnp.int32)[..., None]  # [*b, R, 1]
    in_word = (before[..., None, :] <= q) & (q < (before + counts)[..., None, :])  # [*b, R, W]: one-hot
    pick = lambda x: jnp.sum(jnp.where(in_word, x, 0), axis=-1)
    word, q = pick(words[..., None, :]), q[..., 0] - pick(before[..., None, :])  # the word, the rank within it
    return pick(jnp.arange(words.shape[-1], dtype=jnp.int32)) * WORD_BITS + _bit_of_rank(word, q)


def _bit_of_rank(word: Int[Array, "*r"], rank: Int[Array, "*r"]) -> Int[Array, "*r"]:
    """Position of the ``rank``-th (0-based) set bit of each ``WORD_BITS``-bit ``word``: a 4-step binary search on
    popcounts of the word's low bits, elementwise (meaningless where the word has at most ``rank`` set bits)."""
    pos = jnp.zeros(rank.shape, jnp.int32)
    for step in (8, 4, 2, 1):  # largest pos with popcount(word & (2^pos - 1)) <= rank
        low = word & ((1 << (pos + step)) - 1)
        pos = jnp.where(jax.lax.population_count(low) <= rank, pos + step, pos)
    return pos


def compact(mask: Bool[Array, "n"], size: int, fill: int) -> tuple[Int[Array, "size"], Int[Array, ""]]:
    """Indices of the True entries of ``mask`` in order, the first ``size`` of them, ``fill`` after; and the count.

    Two levels, so the prefix sum and the binary search run over 16x fewer entries than ``mask`` (the broad phase's
    masks are long and sparse: ~10^5-10^6 entries): ``mask`` as 16-bit words, the prefix sum of their popcounts, per
    output the word holding it (binary search) and the bit within that word (``_bit_of_rank``).
    """
    n = mask.shape[-1]
    words = bit_words(jnp.pad(mask, (0, -n % WORD_BITS)).reshape(-1, WORD_BITS))[:, 0]  # [ceil(n / 16)]
    counts = jax.lax.population_count(words)
    ends = prefix_count(counts)  # set bits up to and including each word
    total = ends[-1]
    q = jnp.arange(size, dtype=jnp.int32)  # 0-based rank of each output
    method = "compare_all" if ends.shape[0] <= 64 else search_method()  # short rows (LK's segments): no loop
    word = jnp.minimum(jnp.searchsorted(ends, q, side="right", method=method), words.shape[0] - 1).astype(jnp.int32)
    found = word * WORD_BITS + _bit_of_rank(words[word], q - (ends[word] - counts[word]))
    return jnp.where(q < total, found, fill), total


def _chunks(x: Float[Array, "... T"], size: int, reduce, fill: float) -> Float[Array, "... C"]:
    n = -(-x.shape[-1] // size)
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n * size - x.shape[-1])], constant_values=fill)
    return reduce(x.reshape(x.shape[:-1] + (n, size)), axis=-1)


def chunk_boxes(states: Float[Array, "B K T 11"], valid: Bool[Array, "B K"], size: int, steps: int | None = None,
                reach_s: float = 0.0) -> Float[Array, "B K C 4"]:
    """``host.ego_chunk_bboxes`` in float32 on device; invalid proposals get an empty box."""
    s = states[..., :steps, :]
    u = materialize(heading_unit(s[..., 2]))
    c, sn = u[..., 0], u[..., 1]
    cx, cy = s[..., 0] + EGO_REAR_AXLE_TO_CENTER * c, s[..., 1] + EGO_REAR_AXLE_TO_CENTER * sn
    hl, hw = 0.5 * EGO_LENGTH, 0.5 * EGO_WIDTH
    ex, ey = jnp.abs(hl * c) + jnp.abs(hw * sn), jnp.abs(hl * sn) + jnp.abs(hw * c)
    reach = reach_s * jnp.hypot(s[..., 3], s[..., 4])
    dx, dy = reach * c, reach * sn
    low = lambda x: _chunks(x, size, jnp.min, jnp.inf) - MARGIN_M
    high = lambda x: _chunks(x, size, jnp.max, -jnp.inf) + MARGIN_M
    box = jnp.stack([low(cx - ex + jnp.minimum(dx, 0.0)), low(cy - ey + jnp.minimum(dy, 0.0)),
                     high(cx + ex + jnp.maximum(dx, 0.0)), high(cy + ey + jnp.maximum(dy, 0.0))], axis=-1)
    return jnp.where(valid[..., None, None], box, _EMPTY)


def swept_boxes(states: Float[Array, "B K T 11"], valid: Bool[Array, "B K"]) -> Float[Array, "B K 4"]:
    """``host.swept_bboxes`` in float32 on device; invalid proposals get an empty box."""
    u = materialize(heading_unit(states[..., 2]))
    cx = states[..., 0] + EGO_REAR_AXLE_TO_CENTER * u[..., 0]
    cy = states[..., 1] + EGO_REAR_AXLE_TO_CENTER * u[..., 1]
    r = EGO_RADIUS_M + MARGIN_M
    box = jnp.stack([cx.min(-1) - r, cy.min(-1) - r, cx.max(-1) + r, cy.max(-1) + r], axis=-1)
    return jnp.where(valid[..., None], box, _EMPTY)


def _overlap(box: Float[Array, "*q 4"], other: Float[Array, "*q 4"]) -> Bool[Array, "*q"]:
    return ((box[..., 0] <= other[..., 2]) & (other[..., 0] <= box[..., 2]) & (box[..., 1] <= other[..., 3])
            & (other[..., 1] <= box[..., 3]))


def _polygon_boxes(polys: Polygons) -> Float[Array, "B P 4"]:
    v = polys.vertices
    return jnp.concatenate([v.min(-2), v.max(-2)], axis=-1)


def _tiles(verts: Float[Array, "Bg P V 2"], vertex_valid: Bool[Array, "Bg P V"], keep: Bool[Array, "Bg K C P"],
           box: Float[Array, "Bg K C 4"], npair: int, ntile: int):
    """One group's ``EdgeTiles`` (flat: [npair], [ntile, 8, 2]), each pair's (scene, polygon, chunk) and the
    overflow flag. Pairs in (slot, polygon) order, kept edges in ring order (``host._edge_units`` / ``_tile``)."""
    nb, k, nc, _ = keep.shape
    nv = verts.shape[2]
    flat = keep.reshape(-1)
    idx, count = compact(flat, npair, flat.shape[0])
    real = idx < flat.shape[0]
    b, kk, c, p = jnp.unravel_index(jnp.minimum(idx, flat.shape[0] - 1), keep.shape)
    slot = jnp.where(real, (b * k + kk) * nc + c, nb * k * nc - 1)
    poly = jnp.where(real, p, -1)

    a, e = verts, jnp.roll(verts, -1, axis=2)
    n_edges = jnp.minimum(vertex_valid.sum(-1) + 1, nv)  # the ring's edges plus one degenerate v0 -> v0 if padded
    bx = box[b, kk, c]  # [npair, 4]
    ymin, ymax = jnp.minimum(a[..., 1], e[..., 1])[b, p], jnp.maximum(a[..., 1], e[..., 1])[b, p]  # [npair, V]
    xmax = jnp.maximum(a[..., 0], e[..., 0])[b, p]
    edge = ((jnp.arange(nv) < n_edges[b, p][:, None]) & (ymin <= bx[:, 3:4]) & (ymax >= bx[:, 1:2])
            & (xmax >= bx[:, 0:1]) & real[:, None])
    words = bit_words(edge)  # [npair, W]
    n = jax.lax.population_count(words).sum(-1)
    tiles = -(-n // TILE_EDGES)
    ends = prefix_count(tiles)
    total = ends[-1]
    j = jnp.arange(ntile, dtype=jnp.int32)
    used = j < total
    tile_pair = jnp.where(used, jnp.searchsorted(ends, j, side="right", method=search_method()),
                          npair - 1).astype(jnp.int32)
    tp = jnp.minimum(tile_pair, npair - 1)
    rank = (j - (ends - tiles)[tp])[:, None] * TILE_EDGES + jnp.arange(TILE_EDGES)  # [ntile, 8]
    ok = used[:, None] & (rank < n[tp][:, None])
    ee = jnp.minimum(nth_set_bit(words[tp], rank), nv - 1)  # the rank-th kept edge of the tile's pair
    vb, vp = b[tp][:, None], p[tp][:, None]
    start = jnp.where(ok[..., None], verts[vb, vp, ee], FAR)
    end = jnp.where(ok[..., None], verts[vb, vp, (ee + 1) % nv], FAR)
    flat_tiles = dict(start=start.astype(jnp.float32), end=end.astype(jnp.float32), tile_pair=tile_pair,
                      pair_slot=slot.astype(jnp.int32), pair_poly=poly.astype(jnp.int32))
    return flat_tiles, (b, p, c, real), (count > npair) | (total > ntile)


def _rows(x: Array, nb: int) -> Array:
    """[G, n, ...] per-group arrays -> the [B, G * n / B, ...] rows of ``EdgeTiles`` / ``ContactPairs``."""
    return x.reshape((nb, -1) + x.shape[2:])


def _per_group(x: Array, groups: int) -> Array:
    return x.reshape((groups, x.shape[0] // groups) + x.shape[1:])


def _pack_map(scene: Scene, states: Float[Array, "B K T 11"], valid: Bool[Array, "B K"], spec: PackSpec,
              groups: int) -> tuple[PackedMap, Bool[Array, ""]]:
    m = scene.map
    nb = states.shape[0]
    per = nb // groups
    box = chunk_boxes(states, valid, MAP_CHUNK_STEPS)  # [B, K, C, 4]
    chunks = box.shape[2]
    over = lambda polys: _overlap(box[..., None, :], _polygon_boxes(polys)[:, None, None]) & polys.valid[:, None, None]
    lane_keep = over(m.lanes)
    red_any = m.lane_on_route & m.lane_red.any(-1)
    g = lambda x: _per_group(x, groups)

    def tiles(polys: Polygons, keep, pairs: int, ntiles: int):
        t, (b, p, c, real), overflow = jax.vmap(lambda v, vv, kp, bx: _tiles(v, vv, kp, bx, pairs * per, ntiles * per))(
            g(polys.vertices), g(polys.vertex_valid), g(keep), g(box))
        scene_of = b + (jnp.arange(groups) * per)[:, None]  # [G, npair] scene index in the batch
        edge_tiles = EdgeTiles(**{name: _rows(x, nb) for name, x in t.items()}, groups=groups)
        return edge_tiles, (scene_of, p, c, real), overflow.any()

    areas, (a_scene, a_poly, _, a_real), a_over = tiles(m.areas, over(m.areas), spec.area_pairs, spec.area_tiles)
    lanes, (l_scene, l_poly, _, l_real), l_over = tiles(m.lanes, lane_keep, spec.lane_pairs, spec.lane_tiles)
    red_keep = lane_keep & red_any[:, None, None, :]
    red_lanes, (r_scene, r_poly, r_chunk, r_real), r_over = tiles(m.lanes, red_keep, spec.red_pairs, spec.red_tiles)
    red = jnp.pad(m.lane_red, ((0, 0), (0, 0), (0, chunks * MAP_CHUNK_STEPS - m.lane_red.shape[-1])))
    red = red.reshape(red.shape[:2] + (chunks, MAP_CHUNK_STEPS))[r_scene, r_poly, r_chunk] & r_real[..., None]

    c_full = m.centerline.shape[-2]
    c = min(c_full, spec.centerline)
    real_points = m.centerline_valid.sum(-1).max()
    cl_over = (real_points + 1 > c) if c < c_full else jnp.asarray(False)
    centerline = m.centerline[..., :c, :]
    near, near_over = _near_segments(centerline, swept_boxes(states, valid), spec.near_segments)
    packed = PackedMap(
        areas=areas, junction=_rows((m.area_kind[a_scene, a_poly] == AreaKind.INTERSECTION) & a_real, nb),
        lanes=lanes, lane_on_route=_rows(m.lane_on_route[l_scene, l_poly] & l_real, nb),
        red_lanes=red_lanes,
        red_first=_rows(jnp.where(r_real[..., None], m.lanes.vertices[r_scene, r_poly, 0], FAR), nb),
        red=_rows(red, nb), centerline=centerline, centerline_valid=m.centerline_valid[..., :c],
        near_segments=near)
    return packed, a_over | l_over | r_over | cl_over | near_over


def _near_segments(centerline: Float[Array, "B C 2"], swept: Float[Array, "B K 4"],
                   size: int) -> tuple[Int[Array, "B K S"], Bool[Array, ""]]:
    """``host.near_segments`` at ``size`` segments per proposal."""
    pts = centerline
    seg = jnp.concatenate([jnp.minimum(pts[:, :-1], pts[:, 1:]), jnp.maximum(pts[:, :-1], pts[:, 1:])], axis=-1)
    reach = swept + jnp.array([-1.0, -1.0, 1.0, 1.0]) * (CENTERLINE_REACH_M + MARGIN_M)
    keep = _overlap(reach[:, :, None, :], seg[:, None])  # [B, K, C - 1]
    idx, count = jax.vmap(jax.vmap(lambda row: compact(row, size, -1)))(keep)
    return idx, (count > size).any()


def _agent_chunk_boxes(agents: Agents, chunks: int, ahead: int) -> Float[Array, "B N C 4"]:
    """``host.agent_chunk_bboxes`` on device."""
    live = (agents.present & agents.valid[..., None])[..., None]  # [B, N, T, 1]
    r = 0.5 * jnp.hypot(agents.length, agents.width)[..., None, None]
    lo = jnp.where(live, agents.center - r, jnp.inf)
    hi = jnp.where(live, agents.center + r, -jnp.inf)
    win = lambda i: slice(i * CONTACT_STEPS, (i + 1) * CONTACT_STEPS + ahead)
    return jnp.stack([jnp.concatenate([lo[:, :, win(i)].min(2), hi[:, :, win(i)].max(2)], axis=-1)
                      for i in range(chunks)], axis=2)


def _cull_agents(agents: Agents, states: Float[Array, "B K T 11"], valid: Bool[Array, "B K"],
                 size: int) -> tuple[Agents, Bool[Array, ""]]:
    """``host.cull_agents`` at ``size`` agents per scene."""
    speed = jnp.hypot(states[..., 3], states[..., 4]).max(-1)  # [B, K]
    reach = (TTC_HORIZON_S * speed)[..., None] * jnp.array([-1.0, -1.0, 1.0, 1.0])
    swept = swept_boxes(states, valid) + reach
    whole = _agent_chunk_boxes(agents, 1, agents.present.shape[-1])[:, :, 0]  # [B, N, 4] over every frame
    keep = (_overlap(swept[:, :, None], whole[:, None]) & agents.valid[:, None]).any(1)  # [B, N]
    idx, count = jax.vmap(lambda row: compact(row, size, -1))(keep)
    take = lambda leaf, fill: jnp.where((idx < 0).reshape(idx.shape + (1,) * (leaf.ndim - 2)), jnp.asarray(
        fill, leaf.dtype), jnp.take_along_axis(leaf, jnp.maximum(idx, 0).reshape(idx.shape + (1,) * (leaf.ndim - 2)),
                                               axis=1))
    culled = Agents(center=take(agents.center, FAR), heading=take(agents.heading, 0),
                    velocity=take(agents.velocity, 0), length=take(agents.length, 1), width=take(agents.width, 1),
                    type=take(agents.type, 0), present=take(agents.present, False), valid=take(agents.valid, False))
    return culled, (count > size).any()


def _contact_pairs(agents: Agents, states: Float[Array, "B K T 11"], valid: Bool[Array, "B K"], steps: int,
                   ahead: int, reach_s: float, size: int, groups: int) -> tuple[ContactPairs, Bool[Array, ""]]:
    """``host.contact_pairs`` at ``size`` triples per scene of each group."""
    ego = chunk_boxes(states, valid, CONTACT_STEPS, steps, reach_s)  # [B, K, C, 4]
    obj = _agent_chunk_boxes(agents, ego.shape[2], ahead)  # [B, N, C, 4]
    keep = _overlap(ego[:, :, None], obj[:, None]) & agents.valid[:, None, :, None]  # [B, K, N, C]
    nb, k, n, nc = keep.shape
    per = nb // groups
    npair = size * per

    def one(flat):
        idx, count = compact(flat, npair, flat.shape[0])
        real = idx < flat.shape[0]
        i = jnp.minimum(idx, flat.shape[0] - 1)
        key = i // nc  # (proposal, agent)
        change = jnp.concatenate([jnp.ones((1,), bool), key[1:] != key[:-1]])
        run = jnp.where(real, prefix_count(change) - 1, npair - 1)
        return dict(owner=jnp.where(real, i // (n * nc), per * k - 1), agent=jnp.where(real, i // nc % n, 0),
                    chunk=jnp.where(real, i % nc, 0), run=run, valid=real), count > npair

    out, overflow = jax.vmap(one)(keep.reshape(groups, -1))
    cast = {name: _rows(x if name == "valid" else x.astype(jnp.int32), nb) for name, x in out.items()}
    return ContactPairs(**cast, groups=groups), overflow.any()


def pack_on_device(scene: Scene, proposals: Proposals, spec: PackSpec,
                   groups: int = 1) -> tuple[Scene, Bool[Array, ""]]:
    """``scene`` with its map packed and its agents culled (``PackedMap``, ``PackedAgents``) at the capacities of
    ``spec`` (per scene of the batch), and whether anything overflowed them (then the packed scene is unusable).

    Jittable. ``scene`` is an unpacked ``Scene[B]``, ``proposals`` its ``Proposals[B, K]``; ``groups`` as in
    ``host.pack_map`` (B must be a multiple of it).
    """
    states, valid = proposals.states, proposals.valid
    nb = states.shape[0]
    if groups < 1 or nb % groups:
        raise UserInputError(f"pack_on_device: groups: expected a positive divisor of the batch size {nb}, got {groups}")
    packed_map, map_over = _pack_map(scene, states, valid, spec, groups)
    agents, agent_over = _cull_agents(scene.agents, states, valid, spec.agents)
    nc, nc_over = _contact_pairs(agents, states, valid, NC_STEPS, 0, 0.0, spec.nc_pairs, groups)
    ttc, ttc_over = _contact_pairs(agents, states, valid, TTC_STEPS, TTC_FRAMES_AHEAD, TTC_HORIZON_S, spec.ttc_pairs,
                                   groups)
    packed = scene.replace(map=packed_map, agents=PackedAgents(agents=agents, nc=nc, ttc=ttc))
    return packed, map_over | agent_over | nc_over | ttc_over


# ``PackSpec`` fields that sum over the scenes of a device group (then per scene: / scenes per group, rounded up);
# the others are maxima over scenes.
SUMMED_NEEDS = ("area_pairs", "area_tiles", "lane_pairs", "lane_tiles", "red_pairs", "red_tiles", "nc_pairs",
                "ttc_pairs")
NEEDS_FIELDS = tuple(f.name for f in dataclasses.fields(PackSpec))  # the columns of ``scene_needs``


def needs_fingerprint() -> str:
    """16 hex digits of the sources ``scene_needs`` depends on (the broad phase, the constants, the ego geometry):
    stored ``scene_needs`` rows with another fingerprint are stale."""
    root = Path(__file__).resolve().parent.parent
    return files_hash(sorted((root / "broadphase").glob("*.py")) + [root / "constants.py", root / "geometry.py"], root)


def needs(scene: Scene, proposals: Proposals, groups: int = 1) -> PackSpec:
    """The smallest capacities (per scene of the batch, like ``PackSpec``) with which ``pack_on_device`` does not
    overflow on this host batch (numpy leaves). For choosing a run's capacities from a few batches up front."""
    check_batch_shapes(scene, proposals, "needs")
    nb = np.shape(proposals.valid)[0]
    if groups < 1 or nb % groups:
        raise UserInputError(f"needs: groups: expected a positive divisor of the batch size {nb}, got {groups}")
    try:
        rows = scene_needs(scene, proposals)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        raise UserInputError("needs: measures a host batch, outside jax.jit (inside a trace its counts are not values): "
                         "call it before your jitted step and pass capacity_for(needs(...)) to jaxdrive.score as its "
                         "static capacity") from None
    return needs_of(rows, np.arange(nb) // (nb // groups), nb // groups)


def needs_of(rows: np.ndarray, group: np.ndarray, per: int) -> PackSpec:
    """The smallest capacities covering every device group of scenes at once, from their ``scene_needs`` ``rows``
    [N, len(NEEDS_FIELDS)] and the group of each row ``group`` [N] (any ids; groups of ``per`` scenes: scenes without
    a valid proposal, e.g. filler rows, need not be listed). Many batches' groups in one call: their union."""
    rows = np.asarray(rows, np.int64)
    _, group = np.unique(np.asarray(group), return_inverse=True)
    sums = np.zeros((int(group.max(initial=-1)) + 1, rows.shape[1]), np.int64)
    np.add.at(sums, group, rows)
    out = {}
    for i, name in enumerate(NEEDS_FIELDS):
        most = -(-int(sums[:, i].max(initial=0)) // per) if name in SUMMED_NEEDS else int(rows[:, i].max(initial=0))
        out[name] = max(most, 1)
    return PackSpec(**out)


def scene_needs(scene: Scene, proposals: Proposals) -> np.ndarray:
    """Per scene of a host batch (numpy leaves), int64 [B, len(NEEDS_FIELDS)]: what its proposals use of each
    ``PackSpec`` field (pairs, tiles and triples: counts, summed over a group by ``needs_of``; agents, centreline
    points and near segments: the scene's own need; ``needs_of`` combines them). A store keeps them
    (``data.store``) so a run sizes all its batches without scanning any."""
    states = np.asarray(proposals.states, np.float64)
    valid = np.asarray(proposals.valid)
    nb = states.shape[0]
    m = scene.map
    box = np.where(valid[..., None, None], ego_chunk_bboxes(states, MAP_CHUNK_STEPS), _EMPTY)

    def units(polys: Polygons, extra=None):
        keep = overlaps(box, polygon_bboxes(polys), polys.valid)  # [B, K, C, P]
        if extra is not None:
            keep = keep & extra[:, None, None, :]
        ub, _, _, _, edge = kept_edges(polys, keep, box)  # every kept pair: the device packs those without edges too
        tiles = -(-np.count_nonzero(edge, axis=-1) // TILE_EDGES)
        return np.bincount(ub, minlength=nb), np.bincount(ub, weights=tiles, minlength=nb).astype(np.int64)

    swept = np.where(valid[..., None], swept_bboxes(states), _EMPTY)
    cl = np.asarray(m.centerline, np.float64)
    seg = np.concatenate([np.minimum(cl[:, :-1], cl[:, 1:]), np.maximum(cl[:, :-1], cl[:, 1:])], axis=-1)
    reach = swept + np.array([-1.0, -1.0, 1.0, 1.0]) * (CENTERLINE_REACH_M + MARGIN_M)
    near = overlaps(reach, seg, np.ones(seg.shape[:2], bool)).sum(-1).max(-1, initial=0)
    agents, nc, ttc = np.asarray(jax.device_get(_agent_counts(scene.agents, proposals)))
    area_pairs, area_tiles = units(m.areas)
    lane_pairs, lane_tiles = units(m.lanes)
    red_pairs, red_tiles = units(m.lanes, np.asarray(m.lane_on_route) & np.asarray(m.lane_red).any(-1))
    columns = dict(area_pairs=area_pairs, area_tiles=area_tiles, lane_pairs=lane_pairs, lane_tiles=lane_tiles,
                   red_pairs=red_pairs, red_tiles=red_tiles,
                   centerline=np.asarray(m.centerline_valid).sum(-1) + 1, agents=agents, near_segments=near,
                   nc_pairs=nc, ttc_pairs=ttc)
    return np.stack([np.asarray(columns[name], np.int64) for name in NEEDS_FIELDS], axis=-1)


@jax.jit
def _agent_counts(agents: Agents, proposals: Proposals) -> Int[Array, "3 B"]:
    """Kept agents and NC / TTC triples per scene, measured with the device rules."""
    states, valid = proposals.states, proposals.valid
    n = agents.valid.shape[-1]
    culled, _ = _cull_agents(agents, states, valid, n)
    kept = culled.valid.sum(-1)

    def triples(steps, ahead, reach_s):
        ego = chunk_boxes(states, valid, CONTACT_STEPS, steps, reach_s)
        obj = _agent_chunk_boxes(culled, ego.shape[2], ahead)
        keep = _overlap(ego[:, :, None], obj[:, None]) & culled.valid[:, None, :, None]
        return keep.sum((1, 2, 3))

    return jnp.stack([kept, triples(NC_STEPS, 0, 0.0), triples(TTC_STEPS, TTC_FRAMES_AHEAD, TTC_HORIZON_S)])
