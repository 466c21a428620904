"""Collision tests on the broad phase's contact triples (``jaxdrive.broadphase.ContactPairs``): shared plumbing.

NC and TTC only act on each (proposal, agent) pair's *first* event (``jaxdrive.rules.nc`` / ``ttc``). On a packed
batch they test, per group of scenes (one device's), only the (proposal, agent, chunk of 8 steps) triples whose boxes
can touch; a triple's earliest event is its chunk's, a pair's is the earliest over its run of triples (a sorted
segment minimum), and per-proposal results are sorted segment minima over the triples a proposal owns.

The per-triple tests run over the used triples only (``per_used_triple``: blocks of ``TRIPLE_BLOCK`` up to the last
valid one), so they cost what the batch uses (listing the triples, ``broadphase.device``, is capacity-sized).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase.blocks import block_size, covering
from jaxdrive.broadphase.host import ContactPairs, group_rows
from jaxdrive.broadphase.segments import sorted_segment_min
from jaxdrive.errors import UserInputError
from jaxdrive.scene import Agents

TRIPLE_BLOCK = 512  # triples per loop step over a group's used triples (CPU; see ``broadphase.blocks``)


def _block(pairs: ContactPairs) -> int:
    return block_size(TRIPLE_BLOCK, pairs.valid.shape[-1])


def used_blocks(pairs: ContactPairs) -> Int[Array, ""]:
    """Blocks of ``TRIPLE_BLOCK`` triples (from the first) holding every valid triple, the largest over the leading
    axes (one group's [P] or groups [G, P])."""
    return covering(pairs.valid, _block(pairs))


def per_used_triple(fn: Callable, pairs: ContactPairs, blocks: Int[Array, ""], fill) -> Array:
    """``fn(triple indices [TB]) -> [TB]`` for the first ``blocks`` blocks of triples, ``fill`` for the rest: [P]."""
    block, p = _block(pairs), pairs.valid.shape[0]
    fill = jnp.asarray(fill)

    def body(i, out):
        j = i * block + jnp.arange(block, dtype=jnp.int32)
        return jax.lax.dynamic_update_slice_in_dim(out, fn(jnp.minimum(j, p - 1)).astype(out.dtype), i * block, 0)

    out = jax.lax.fori_loop(0, blocks, body, jnp.full((-(-p // block) * block,), fill, fill.dtype))
    return out[:p]


def box_rows(boxes: Float[Array, "M T 4 2"], *extra: Float[Array, "M T"]) -> Float[Array, "M T F"]:
    """Per-step rows [x0, y0, .., x3, y3, *extra] of boxes computed once per (item, step), for ``windows``."""
    m, t = boxes.shape[:2]
    return jnp.concatenate([boxes.reshape(m, t, 8)] + [e[..., None].astype(boxes.dtype) for e in extra], axis=-1)


def windows(rows: Float[Array, "M T F"], row: Int[Array, "P"], start: Int[Array, "P"], size: int,
            steps: int) -> Float[Array, "P size F"]:
    """rows[row, start : start + size] per triple (one contiguous slice each), T zero-padded to ``steps`` first
    (``start + size <= steps``: a slice is never shifted back to fit)."""
    rows = jnp.pad(rows, ((0, 0), (0, steps - rows.shape[1]), (0, 0)))
    return jax.vmap(lambda r, s: jax.lax.dynamic_slice(rows, (r, s, 0), (1, size, rows.shape[-1]))[0])(row, start)


def corners(rows: Float[Array, "*p F"]) -> tuple[list[Array], list[Array]]:
    """The corner x's and y's of ``box_rows`` rows, as the per-corner lists ``geometry.boxes_intersect_xy`` takes."""
    return [rows[..., 2 * i] for i in range(4)], [rows[..., 2 * i + 1] for i in range(4)]


def first_of_run(first: Int[Array, "P"], pairs: ContactPairs, none: int) -> Bool[Array, "P"]:
    """Whether each triple holds its (proposal, agent) run's first event (``first``: the triple's earliest event
    index, ``none`` if it has none)."""
    run_min = sorted_segment_min(first, pairs.run, first.shape[0])
    return (first < none) & (first == run_min[pairs.run])


def per_proposal_min(x: Array, pairs: ContactPairs, num_proposals: int, empty) -> Array:
    """Minimum of per-triple values over each proposal's triples, capped at ``empty`` (the value of a proposal with
    no triples)."""
    low = sorted_segment_min(x, pairs.owner, num_proposals)
    return jnp.minimum(low, jnp.asarray(empty, x.dtype))


def over_groups(fn: Callable, agents: Agents, pairs: ContactPairs, states: Float[Array, "B K T 11"],
                flags: Bool[Array, "B K T"]):
    """``fn(agents[Bg, N], pairs[P], states[Bg * K, T, 11], flags[Bg * K, T], blocks)`` per group of scenes -> [B, K]
    leaves; ``blocks``: ``used_blocks`` of the largest group (one bound for all, so the loop is not batched)."""
    b, k = states.shape[:2]
    g = pairs.groups
    if pairs.owner.shape[0] != b or agents.valid.shape[0] != b or b % g:
        raise UserInputError(f"PackedAgents: packed for {agents.valid.shape[0]} scenes in {g} groups, got states of "
                         f"{b} scenes; pack the batch for these states (jaxdrive.broadphase.pack_batch)")
    grouped = lambda x: group_rows(x, g)  # [B, n, ...] -> [G, B / G * n, ...]
    by_scene = lambda x: x.reshape((g, b // g) + x.shape[1:])  # [B, ...] -> [G, B / G, ...]
    by_group = jax.tree_util.tree_map(grouped, pairs)
    out = jax.vmap(fn, in_axes=(0, 0, 0, 0, None))(jax.tree_util.tree_map(by_scene, agents), by_group,
                                                   grouped(states), grouped(flags), used_blocks(by_group))
    return jax.tree_util.tree_map(lambda x: x.reshape((b, k)), out)
