"""``jaxdrive.score``: EPDMS of a padded batch as one jittable function, the exact broad phase inside it.

One call scores ``Proposals[B, K]`` in ``Scene[B]`` (``jaxdrive.scene.batch_scenes``, or your own arrays of the same
pytrees) with no host round trip, so it runs inside a user's jitted training step as an RL reward::

    import functools, jax, jaxdrive

    reward_fn = functools.partial(jaxdrive.score, ep_mode="scene", comfort_precision="float32")

    @jax.jit
    def train_step(params, scene, proposals):
        proposals = proposals.replace(states=policy(params, scene))
        return reward_fn(scene, proposals).epdms  # [B, K]; NaN where proposals.valid is False

Inside the program the map edges, agents and collision triples each proposal can touch are culled
(``jaxdrive.broadphase.device.pack_on_device``) into arrays of fixed capacities (``capacity``, a ``PackSpec``; by
default ``default_capacity(K)``: generous for NAVSIM-like scenes). If a batch needs more than the capacities, an
on-device flag sends it through ``lax.cond`` to the unculled kernels instead: results are identical either way (the
broad phase is exact; tested bit for bit), only the time differs. Under ``jax.vmap`` the ``lax.cond`` becomes a
select that runs both branches: batch with the leading B axis instead. The unculled branch roughly doubles the compile
time and is far slower to run; a caller that can re-run a batch itself (the ``jaxdrive score`` runner re-scores an
overflowing batch at grown capacities) passes ``fallback=False`` to ``score_with_overflow`` and compiles the culled
program alone.

Static options (Python values, part of the compiled program): ``ep_mode``, whether ``gates`` are given (their values
are traced arrays), ``apply_human_filter``, ``comfort_precision``, ``capacity``, ``groups`` (and ``fallback``).

Rows of invalid proposals (``proposals.valid`` False: padded proposals, filler scenes) are NaN (steps -1, HC checks
False); they use no culling capacity and never enter the EP normaliser. So are the rows of proposals with a NaN or
infinite state (``rules.epdms.finite_proposals``): one diverged policy sample does not move the others' scores.

On CPU, start Python with ``GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=4294967296:
glibc.malloc.trim_threshold=4294967296`` (one line; ``jaxdrive.malloc_tunables``, which ``jaxdrive score`` applies
itself): XLA then reuses the step's temporary buffers instead of faulting them in afresh on every call (~38,000 page
faults, over a third of the step's CPU time, at 4,096 proposals on a 2-core CPU).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxdrive.broadphase.device import needs, pack_on_device
from jaxdrive.broadphase.host import PackSpec
from jaxdrive.errors import UserInputError
from jaxdrive.rules import epdms
from jaxdrive.rules.comfort import PRECISIONS as COMFORT_PRECISIONS
from jaxdrive.scene import Proposals, Scene
from jaxdrive.scene.device import check_batch_shapes

# Per real proposal, generous for NAVSIM-like scenes: the needs of the 61 NAVSIM fixtures and of the synthetic
# reference mix are at most about a third of the per-proposal sizes and two thirds of the per-scene ones
# (``tests/test_scorer.py`` checks that the defaults cover both). The tile sums, contact tests and LK's segments
# loop over the used entries only, but the packing is capacity-sized: at these defaults a step takes 1.4-1.7x the
# time it takes at ``capacity_for(needs(...))`` (``docs/scoring-at-scale.md``).
PER_PROPOSAL = dict(area_pairs=32, area_tiles=48, lane_pairs=48, lane_tiles=64, red_pairs=8, red_tiles=8,
                    nc_pairs=16, ttc_pairs=24)
DEFAULT_AGENTS = 64  # kept agents per scene
DEFAULT_CENTERLINE = 512  # centreline points
DEFAULT_NEAR_SEGMENTS = 160  # centreline segments within LK's reach of one proposal (needs: 79 fixtures, 95 mix)


def default_capacity(num_proposals: int) -> PackSpec:
    """Generous capacities for scenes of ``num_proposals`` (real) proposals: ``PER_PROPOSAL`` x K per scene."""
    return PackSpec(**{k: v * num_proposals for k, v in PER_PROPOSAL.items()}, agents=DEFAULT_AGENTS,
                    centerline=DEFAULT_CENTERLINE, near_segments=DEFAULT_NEAR_SEGMENTS)


# Red-light pairs and tiles: most scenes have no red light within reach and a few have many (the synthetic default
# scenes: mean 4.6 pairs per scene, p99 66, max 140), so a few batches' largest needs say little about the next
# batch's; their capacities are small and cost next to nothing in step time (x4: no measurable change at K = 16 and
# K = 256), so they get this much headroom at least.
RED_HEADROOM = 4.0


def capacity_for(needed: PackSpec, headroom: float = 1.25) -> PackSpec:
    """Capacities ``headroom`` x ``needed`` (``jaxdrive.broadphase.device.needs`` of a few batches), rounded up; the
    red-light fields at least ``RED_HEADROOM`` x."""
    if not isinstance(needed, PackSpec):
        raise UserInputError(f"capacity_for: needed: expected a PackSpec (jaxdrive.broadphase.device.needs(scene, "
                         f"proposals)), got {type(needed).__name__}")
    if not (isinstance(headroom, numbers.Real) and math.isfinite(headroom) and headroom >= 1):
        raise UserInputError(f"capacity_for: headroom: expected a finite factor >= 1 (below 1 every batch like these "
                         f"overflows), got {headroom!r}")

    def up(name: str, n: int) -> int:
        step = 64 if name == "centerline" else 8
        room = max(headroom, RED_HEADROOM) if name.startswith("red_") else headroom
        return max(step, -(-math.ceil(n * room) // step) * step)

    return PackSpec(**{f.name: up(f.name, getattr(needed, f.name)) for f in dataclasses.fields(PackSpec)})


def _kernel_dtypes(tree):
    """``tree``'s leaves as arrays of the kernels' dtypes: any floating leaf float32 (a bfloat16 policy output, float64
    arrays under ``jax_enable_x64``), any integer leaf int32, booleans kept; a leaf given as a (nested) list becomes
    one array."""
    def one(x):
        x = jnp.asarray(x)
        if jnp.issubdtype(x.dtype, jnp.floating):
            return x.astype(jnp.float32)
        return x.astype(jnp.int32) if jnp.issubdtype(x.dtype, jnp.integer) else x

    return jax.tree_util.tree_map(one, tree, is_leaf=lambda x: isinstance(x, list))  # a list: one array leaf


def _check(scene: Scene, proposals: Proposals, groups: int, gates=None, ep_mode: str = "scene",
           reference_progress=None, capacity=None, comfort_precision: str = "float64") -> None:
    """Static (shape, dtype and option) checks; values cannot be checked inside a jitted program."""
    try:
        epdms.check_ep_mode(ep_mode, reference_progress)
    except ValueError as e:
        raise UserInputError(f"jaxdrive.score: {e}") from None
    if comfort_precision not in COMFORT_PRECISIONS:
        raise UserInputError(f"jaxdrive.score: comfort_precision: expected one of {COMFORT_PRECISIONS}, got "
                         f"{comfort_precision!r}")
    if capacity is not None and not isinstance(capacity, PackSpec):
        raise UserInputError(f"jaxdrive.score: capacity: expected a PackSpec (jaxdrive.scorer.capacity_for / "
                         f"default_capacity) or None, got {type(capacity).__name__}")
    s = proposals.states
    b, k = s.shape[:2] if s.ndim >= 2 else (None, None)
    if jnp.result_type(proposals.valid) != jnp.bool_:
        raise UserInputError(f"jaxdrive.score: proposals.valid: expected booleans, got dtype "
                         f"{jnp.result_type(proposals.valid)}")
    if gates is not None and jnp.shape(gates) not in ((9,), (b, 1, 9), (b, k, 9)):
        raise UserInputError(f"jaxdrive.score: gates: expected shape (9,) (all proposals), ({b}, 1, 9) (per scene) or "
                         f"({b}, {k}, 9) (per proposal), got {jnp.shape(gates)}")
    if reference_progress is not None and ep_mode != "reference":
        raise UserInputError(f"jaxdrive.score: reference_progress: used only with ep_mode='reference' (got "
                         f"ep_mode={ep_mode!r})")
    if ep_mode == "reference" and reference_progress is not None and jnp.shape(reference_progress) != (b,):
        raise UserInputError(f"jaxdrive.score: reference_progress: expected shape ({b},) (metres per scene), got "
                         f"{jnp.shape(reference_progress)}")
    if gates is not None and jnp.result_type(gates) != jnp.bool_:
        raise UserInputError(f"jaxdrive.score: gates: expected booleans (on / off per metric), got dtype "
                         f"{jnp.result_type(gates)}; DriveJudge's gate probabilities give gates as p > 0.5 "
                         f"(jaxdrive.judge.gates.expected_score weighs by them instead)")
    check_batch_shapes(scene, proposals, "jaxdrive.score")
    if groups < 1 or s.shape[0] % groups:
        raise UserInputError(f"jaxdrive.score: groups: expected a positive divisor of the batch size {s.shape[0]}, "
                         f"got {groups}")


def mask_invalid(out: epdms.SubScores, valid: Bool[Array, "B K"]) -> epdms.SubScores:
    """Rows of invalid proposals: NaN values, -1 steps, False HC checks."""
    def one(x):
        if x.dtype == jnp.bool_:
            return x & valid.reshape(valid.shape + (1,) * (x.ndim - 2))
        if jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.where(valid, x, -1)
        return jnp.where(valid, x, jnp.nan)

    return jax.tree_util.tree_map(one, out)


def score_with_overflow(scene: Scene, proposals: Proposals, *, capacity: PackSpec | None = None,
                        ep_mode: epdms.EpMode = "scene", reference_progress: Float[Array, "B"] | None = None,
                        gates: Bool[Array, "*g 9"] | None = None, apply_human_filter: bool = False,
                        comfort_precision: str = "float64", groups: int = 1, fallback: bool = True
                        ) -> tuple[epdms.SubScores, Bool[Array, ""]]:
    """``score`` and whether the batch overflowed ``capacity``.

    ``fallback=True``: an overflowing batch is scored unculled inside the program (same results). ``fallback=False``:
    the unculled kernels are not compiled at all and the rows of an overflowing batch are NOT valid: the caller must
    re-score it (e.g. at ``capacity_for(needs(...))``).
    """
    # numpy leaves (a batch_scenes batch closed over by a user's jitted function) become constants here: the broad
    # phase indexes them with traced indices
    gates, reference_progress = (None if x is None else jnp.asarray(x) for x in (gates, reference_progress))
    scene, proposals, gates, reference_progress = _kernel_dtypes((scene, proposals, gates, reference_progress))
    _check(scene, proposals, groups, gates, ep_mode, reference_progress, capacity, comfort_precision)
    with jax.enable_x64(False):  # 32-bit kernels also where the caller enabled x64 (int64 indices would not mix)
        return _score_32(scene, proposals, capacity, ep_mode, reference_progress, gates, apply_human_filter,
                         comfort_precision, groups, fallback)


def _score_32(scene, proposals, capacity, ep_mode, reference_progress, gates, apply_human_filter, comfort_precision,
              groups, fallback) -> tuple[epdms.SubScores, Bool[Array, ""]]:
    """``score_with_overflow`` of checked float32 / int32 / bool inputs, traced with x64 off."""
    proposals = proposals.replace(valid=epdms.finite_proposals(proposals))  # NaN states: padding (no capacity)
    capacity = capacity or default_capacity(proposals.states.shape[1])
    packed, overflow = pack_on_device(scene, proposals, capacity, groups)
    # outside the lax.cond: read no map, and under jax.vmap (batched predicate) a branch is re-batched after its
    # scoped float64 (comfort_precision) has ended
    comfort = epdms.batch_comfort_metrics(scene, proposals, comfort_precision=comfort_precision)
    rules = lambda sc: epdms.score(sc, proposals, ep_mode=ep_mode, reference_progress=reference_progress,
                                   comfort_precision=comfort_precision, comfort=comfort)
    out = jax.lax.cond(overflow, lambda: rules(scene), lambda: rules(packed)) if fallback else rules(packed)
    if apply_human_filter:  # the human future is scored on the unculled map (one trajectory per scene)
        human = epdms._human_scores(scene, comfort_precision)
        out = epdms.human_filter(out, human, scene.has_human[:, None])
    if gates is not None:
        out = out.replace(epdms=epdms.gated_score(out, gates))
    return mask_invalid(out, proposals.valid), overflow


def score(scene: Scene, proposals: Proposals, *, capacity: PackSpec | None = None, ep_mode: epdms.EpMode = "scene",
          reference_progress: Float[Array, "B"] | None = None, gates: Bool[Array, "*g 9"] | None = None,
          apply_human_filter: bool = False, comfort_precision: str = "float64", groups: int = 1) -> epdms.SubScores:
    """EPDMS sub-scores ``SubScores[B, K]`` of ``proposals`` in ``scene`` (jittable; module docstring).

    Args:
      scene, proposals: a padded batch (ego-centred float32; ``jaxdrive.scene.batch_scenes``). Leaves of other
        widths are cast: floating ones (a bfloat16 policy's states; float64 with ``jax_enable_x64``) to float32,
        integer ones to int32; the kernels run in 32 bits whatever the process's x64 setting.
      capacity: the broad phase's fixed sizes (``PackSpec``, per scene of the batch); default
        ``default_capacity(K)``. ``capacity_for(needs(...))`` sizes it from data.
      ep_mode: EP normaliser: "scene" (NAVSIM), "batch" or "reference" (``jaxdrive.rules.epdms``).
      reference_progress: [B] metres, for ep_mode="reference".
      gates: bool [9] in ``METRICS`` order, or per scene [B, 1, 9], or per proposal [B, K, 9]: DriveJudge's gated
        ``epdms`` (None: all on).
      apply_human_filter: NAVSIM's human penalty filter where ``scene.has_human``.
      comfort_precision: "float64" (scoped x64, NAVSIM parity) or "float32" (devices without float64).
      groups: the batch's scenes are packed in this many groups of consecutive scenes (pass the number of devices
        B is sharded over, so no packed structure crosses devices).
    """
    return score_with_overflow(scene, proposals, capacity=capacity, ep_mode=ep_mode,
                               reference_progress=reference_progress, gates=gates,
                               apply_human_filter=apply_human_filter, comfort_precision=comfort_precision,
                               groups=groups)[0]


_score_culled = jax.jit(lambda scene, proposals, capacity: score_with_overflow(scene, proposals, capacity=capacity,
                                                                                fallback=False), static_argnums=2)


class BatchScorer:
    """EPDMS sub-scores [B, K] of host batches (numpy leaves; returned on the host) with the broad phase, for callers
    that score batch after batch outside a jitted program (``jaxdrive judge data``, ``DriveJudge.score``): capacities
    fixed from the first batch (``HEADROOM`` x its ``needs``) and grown when a later batch overflows them (that batch
    is re-scored at the grown capacities: one more compile). The values equal the unculled kernels' (``epdms.score``);
    rows of invalid proposals are NaN (``mask_invalid``)."""

    HEADROOM = 2.0  # small batches vary a lot; a compile costs more than scoring at twice the capacities

    def __init__(self, capacity: PackSpec | None = None):
        self.capacity = capacity

    def __call__(self, scene, proposals) -> epdms.SubScores:
        if self.capacity is None:
            self.capacity = capacity_for(needs(scene, proposals), self.HEADROOM)
        subs, overflow = _score_culled(scene, proposals, self.capacity)
        if bool(overflow):
            grown = capacity_for(needs(scene, proposals), self.HEADROOM)
            self.capacity = self.capacity.union(grown)
            subs, overflow = _score_culled(scene, proposals, self.capacity)
            if bool(overflow):
                raise RuntimeError(f"BatchScorer: a batch overflowed capacities grown to its own needs ({self.capacity})")
        return jax.device_get(subs)
