"""One scene x a trajectory vocabulary, GTRS semantics (``pdm_score_full_v2`` under ``PROGRESS_MODE=gen_gt``, as
GTRS's and DriveSuprim's scripts run it), in bounded memory.

For a scene with a reference trajectory (PDM-Closed, NAVSIM's row 0) and a vocabulary V (K, 40, 3) of
(x, y, heading) poses at 0.1 .. 4.0 s in the ego rear-axle frame:

1. each vocabulary trajectory goes to the scene's global frame about the ego rear axle at t = 0 and, unless
   ``simulate=False``, is tracked with NAVSIM's LQR + kinematic bicycle from the real ego state (the 40 poses are the
   0.1 s reference, so NAVSIM's interpolation is the identity); without simulation the 41 states are NAVSIM's
   interpolated array (ego state, then the poses with zero dynamics);
2. the K proposals are scored in chunks of ``chunk`` (memory bounded whatever K) with the scene's history (HC), no
   previous frame (EC left out: weights / 14), through the exact broad phase (``jaxdrive.scorer``; a chunk beyond its
   capacities is re-scored at grown ones: same results);
3. EP is normalised against the reference, with R = the reference's raw progress x its multiplier and
   m_k = raw_k x M_k (M: the product NC x DAC x TLC x DDC):

   * ``ep_mode="gtrs"`` (the default; GTRS's ``PDMScorer`` under ``PROGRESS_MODE=gen_gt``): D_k = max(m_k, R);
     EP_k = m_k / D_k if D_k > 5 m, else 1. The numerator is *masked*: a trajectory with M_k = 0 gets EP 0;
   * ``"pairwise"`` (NAVSIM's official [PDM-Closed, proposal] pairing, each trajectory scored as an agent would be):
     the same D_k, EP_k = clip(raw_k / D_k, 0, 1) if D_k > 5 m, else 1 (an unmasked numerator);
   * ``"batch"`` (GTRS's scorer without ``gen_gt``, the scorer run once on [reference, V]): one
     D = max(R, max_k m_k) over the reference and all K, EP_k = clip(raw_k / D, 0, 1) if D > 5 m, else 1;
4. the human penalty filter (the scene's human states scored alone: EP = HC = 1) unless ``human_filter=False``, the
   scene has no human trajectory or is not an ORIGINAL scene (``HostScene.filters_human``): each sub-score the
   human scores exactly 0 becomes 1;
5. the reference row itself is not returned (proposal 0 dropped).

``pdm_score`` is the scorer's column, computed before the human filter (as NAVSIM leaves it), except that with
``ep_mode="gtrs"`` it becomes 1 wherever the human's own ``pdm_score`` is 0, as GTRS's filter does (its loop over the
human's columns does not skip ``pdm_score``); ``epdms`` is the filtered EPDMS without EC.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.broadphase import PackSpec
from jaxdrive.broadphase.device import needs
from jaxdrive.errors import UserInputError
from jaxdrive.rules.epdms import SubScores, aggregate, human_filter, normalize_progress, score
from jaxdrive.scorer import capacity_for, default_capacity, score_with_overflow
from jaxdrive.scene import NUM_STEPS, STATE_DIM, HostScene, PadSpec, batch_scenes
from jaxdrive.sim.reference import track_poses

VOCAB_STEPS = NUM_STEPS - 1
FIELDS = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc", "raw_progress", "multiplier", "pdm_score", "epdms")
EpMode = Literal["gtrs", "pairwise", "batch"]
EP_MODES = ("gtrs", "pairwise", "batch")
PROGRESS_THRESHOLD_M = 5.0  # NAVSIM's progress_distance_threshold
VOCAB_INTERVAL_S = 0.1  # a vocabulary pose every 0.1 s (0.1 .. 4.0 s)
MAX_PLAUSIBLE_SPEED = 100.0  # m/s; faster steps mean a wrong frame, unit or sampling


def check_vocabulary(vocab: np.ndarray, name: str = "--vocabulary") -> np.ndarray:
    """A (K, 40, 3) finite float vocabulary as float64, or ValueError naming ``name``."""
    v = np.asarray(vocab)
    if v.ndim != 3 or v.shape[1:] != (VOCAB_STEPS, 3) or v.shape[0] < 1:
        raise UserInputError(f"{name}: expected shape (K, {VOCAB_STEPS}, 3) (x, y, heading at 0.1 .. 4.0 s, ego frame), "
                         f"got {v.shape}")
    if not np.issubdtype(v.dtype, np.floating):
        raise UserInputError(f"{name}: expected floats, got dtype {v.dtype}")
    if not np.all(np.isfinite(v)):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(v))[0])
        raise UserInputError(f"{name}: expected finite values, got NaN/inf at (trajectory, pose, field) {where}")
    v = v.astype(np.float64)
    _check_frame_and_units(v, name)
    return v


def _check_frame_and_units(vocab: np.ndarray, name: str) -> None:
    """ValueError naming ``name`` and the worst offending entry unless ``vocab`` (K, 40, 3) looks like metres and
    radians in the ego rear-axle frame: headings within ±2π (degrees exceed it on any turn over 6.3°) and no step,
    from the ego pose at t = 0 on, faster than ``MAX_PLAUSIBLE_SPEED`` (a global-frame / UTM vocabulary, centimetres,
    or poses sampled at 0.5 s instead of 0.1 s)."""
    heading = np.abs(vocab[..., 2])
    if np.any(heading > 2 * np.pi):
        at = tuple(int(i) for i in np.unravel_index(np.argmax(heading), heading.shape))
        raise UserInputError(f"{name}: heading {vocab[at + (2,)]:g} at (trajectory, pose) {at} exceeds 2π: expected "
                         "radians (degrees?)")
    xy = np.concatenate([np.zeros((vocab.shape[0], 1, 2)), vocab[..., :2]], axis=1)
    speed = np.hypot(*np.moveaxis(np.diff(xy, axis=1), -1, 0)) / VOCAB_INTERVAL_S
    if np.any(speed > MAX_PLAUSIBLE_SPEED):
        at = tuple(int(i) for i in np.unravel_index(np.argmax(speed), speed.shape))
        raise UserInputError(f"{name}: {np.max(speed):.4g} m/s into (trajectory, pose) {at} (from the ego at the origin "
                         f"for pose 0): expected metres in the ego rear-axle frame at {VOCAB_INTERVAL_S} s steps "
                         f"(a global frame, other units or another sampling?)")


def to_global(ego: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """(x, y, heading) poses [..., 3] in the rear-axle frame of ``ego`` (11 or 3 fields) -> global (SE2, float64)."""
    x0, y0, h0 = ego[0], ego[1], ego[2]
    c, s = np.cos(h0), np.sin(h0)
    x = x0 + c * poses[..., 0] - s * poses[..., 1]
    y = y0 + s * poses[..., 0] + c * poses[..., 1]
    h = np.arctan2(np.sin(h0 + poses[..., 2]), np.cos(h0 + poses[..., 2]))
    return np.stack([x, y, h], axis=-1)


def vocabulary_states(ego: np.ndarray, vocab: np.ndarray, *, simulate: bool = True, chunk: int = 1024) -> np.ndarray:
    """The K proposals NAVSIM scores for one scene: [K, 41, 11] (global frame, float64)."""
    k = vocab.shape[0]
    poses = np.concatenate([np.broadcast_to(ego[:3], (k, 1, 3)), to_global(ego, vocab)], axis=1)  # [K, 41, 3]
    if not simulate:
        out = np.zeros((k, NUM_STEPS, STATE_DIM))
        out[:, :, :3] = poses
        out[:, 0] = ego
        return out
    out = np.empty((k, NUM_STEPS, STATE_DIM))
    for start in range(0, k, chunk):
        part = poses[start:start + chunk]
        n = part.shape[0]
        padded = np.concatenate([part, np.broadcast_to(part[:1], (chunk - n,) + part.shape[1:])]) if n < chunk else part
        out[start:start + n] = track_poses(np.broadcast_to(ego, (chunk, STATE_DIM)), padded)[:n]
    return out


def bucket(n: int) -> int:
    p = 8
    while p < n:
        p *= 2
    return p


def rows_per_call(k: int, chunk: int) -> int:
    """Proposals per scoring call for K vocabulary rows (+ reference + human): ``chunk``, or fewer for a small K."""
    return min(chunk, -(-(k + 2) // 8) * 8)


def pad_for(scene: HostScene, proposals: int, previous: PadSpec | None = None) -> PadSpec:
    """A PadSpec holding ``scene`` with ``proposals`` slots: sizes rounded up to powers of two and never below
    ``previous`` (a run's shapes only grow, so it compiles a handful of times)."""
    fit = PadSpec.fit([dataclasses.replace(scene, proposal_states=np.zeros((1, NUM_STEPS, STATE_DIM)))])
    sizes = {f.name: max(bucket(getattr(fit, f.name)), getattr(previous, f.name) if previous else 0)
             for f in dataclasses.fields(PadSpec)}
    return PadSpec(**(sizes | {"proposals": proposals}))


@functools.partial(jax.jit, static_argnames="capacity")
def _culled_scores(scene, proposals, capacity: PackSpec) -> tuple[SubScores, jax.Array]:
    return score_with_overflow(scene, proposals, capacity=capacity, fallback=False)


@jax.jit
def _unculled_scores(scene, proposals) -> SubScores:
    return score(scene, proposals)


_GROWN: dict[int, PackSpec] = {}  # chunk size -> capacities grown by an overflow (they serve the rest of the run)


def _raw_scores(scene, proposals) -> SubScores:
    """Sub-scores through the exact broad phase at ``default_capacity`` (or capacities grown earlier in this
    process). A chunk that overflows them is re-scored at capacities grown to cover its needs (one more compile; later
    chunks use them), and only if that overflowed too by the unculled kernels: results never depend on capacities."""
    k = proposals.states.shape[1]
    capacity = _GROWN.get(k, default_capacity(k))
    out, overflow = _culled_scores(scene, proposals, capacity=capacity)
    if not bool(overflow):
        return out
    grown = capacity_for(needs(*jax.device_get((scene, proposals))))
    _GROWN[k] = capacity.union(grown)
    out, overflow = _culled_scores(scene, proposals, capacity=_GROWN[k])
    return _unculled_scores(scene, proposals) if bool(overflow) else out


def _with(scene: HostScene, states: np.ndarray) -> HostScene:
    k = states.shape[0]
    return dataclasses.replace(scene, proposal_states=states, proposal_names=[f"v{i}" for i in range(k)],
                               proposal_families=[""] * k, previous_states=None, previous_kinds=None)


def _score_rows(scene: HostScene, states: np.ndarray, spec: PadSpec) -> SubScores:
    """Un-normalised sub-scores [K] of ``states`` in chunks of ``spec.proposals`` (host numpy leaves)."""
    parts = []
    for start in range(0, states.shape[0], spec.proposals):
        part = states[start:start + spec.proposals]
        sc, props, _ = batch_scenes([_with(scene, part)], spec, validate=False)
        out = jax.device_get(_raw_scores(sc, props))
        parts.append(jax.tree.map(lambda a: np.asarray(a)[0, : part.shape[0]], out))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *parts)


def reference_states(scene: HostScene, fallback: str = "none") -> np.ndarray | None:
    """The scene's reference [41, 11]: the cached PDM-Closed states (``extra['reference']['states']``), else with
    ``fallback="first-proposal"`` the scene's proposal 0; None if neither."""
    ref = scene.extra.get("reference")
    if isinstance(ref, dict) and "states" in ref:
        states = np.asarray(ref["states"], np.float64)
        if states.shape != (NUM_STEPS, STATE_DIM):
            raise UserInputError(f"scene {scene.id!r}: reference.states: expected shape ({NUM_STEPS}, {STATE_DIM}), "
                             f"got {states.shape}")
        if not np.all(np.isfinite(states)):  # scored as padding, it would set R = NaN and so every EP to 1
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(states))[0])
            raise UserInputError(f"scene {scene.id!r}: reference.states: expected finite values, got {states[bad]} at "
                             f"{bad}")
        return states
    if fallback == "first-proposal" and scene.num_proposals > 0:
        return scene.proposal_states[0]
    return None


def score_vocabulary(scene: HostScene, vocab: np.ndarray, reference: np.ndarray, *, ep_mode: EpMode = "gtrs",
                     simulate: bool = True, human_filter_on: bool = True, chunk: int = 1024,
                     states: np.ndarray | None = None, pad: PadSpec | None = None) -> dict[str, np.ndarray]:
    """GTRS sub-scores of one scene's K vocabulary trajectories (module docstring): ``FIELDS`` -> float32 [K].

    ``states``: the [K, 41, 11] proposals if already built (``vocabulary_states``), else built here. ``pad``: the
    padded shape to use (grown to fit the scene; see ``pad_for``).
    """
    if ep_mode not in EP_MODES:
        raise UserInputError(f"--ep-mode: expected one of {', '.join(EP_MODES)}, got {ep_mode!r}")
    ego = scene.history_states[-1]
    if states is None:
        states = vocabulary_states(ego, vocab, simulate=simulate, chunk=chunk)
    k = states.shape[0]
    human_on = human_filter_on and scene.filters_human
    extra = [reference[None]] + ([scene.human_states[None]] if human_on else [])
    head = len(extra)  # the reference (and the human) ride along in the first chunk: one compiled shape
    spec = pad or pad_for(scene, rows_per_call(k, chunk))
    every = _score_rows(scene, np.concatenate(extra + [states]), spec)
    ref = jax.tree.map(lambda a: a[:1], every)
    rows = jax.tree.map(lambda a: a[head:], every)
    r = float(ref.raw_progress[0] * ref.multiplier[0])
    valid = np.ones((1, k), bool)
    batch = jax.tree.map(lambda a: a[None], rows)
    if ep_mode == "gtrs":
        ep = jnp.asarray(gtrs_progress(np.asarray(rows.raw_progress), np.asarray(rows.multiplier), r)[None])
    else:
        d = r if ep_mode == "pairwise" else max(r, float(np.max(rows.raw_progress * rows.multiplier)))
        ep = normalize_progress(batch.raw_progress, batch.multiplier, valid, "reference", jnp.asarray([d], jnp.float32))
    no_ec = lambda x: x.replace(ec=jnp.full(x.ec.shape, jnp.nan, jnp.float32))
    out = aggregate(no_ec(batch.replace(ep=ep)), valid)
    if human_on:  # scored alone and without history in NAVSIM: its EP and HC are 1
        human = jax.tree.map(lambda a: a[1:2][None], every)
        human = aggregate(no_ec(human.replace(ep=np.ones_like(human.ep), hc=np.ones_like(human.hc))),
                          np.ones((1, 1), bool))
        out = human_filter(out, human, True)
        if ep_mode == "gtrs" and float(human.pdm_score[0, 0]) == 0.0:
            out = out.replace(pdm_score=jnp.ones_like(out.pdm_score))
    return {f: np.asarray(getattr(out, f), np.float32)[0] for f in FIELDS}


def gtrs_progress(raw: np.ndarray, multiplier: np.ndarray, reference: float) -> np.ndarray:
    """GTRS's EP under ``PROGRESS_MODE=gen_gt`` (float64 arithmetic, float32 out) of [K] raw progress (m) and
    multipliers against the reference's masked progress ``reference`` (m): m_k / max(m_k, R) where that maximum
    exceeds 5 m, else 1, with m_k = raw_k x M_k."""
    masked = np.asarray(raw, np.float64) * np.asarray(multiplier, np.float64)
    d = np.maximum(masked, float(reference))
    far = d > PROGRESS_THRESHOLD_M
    return np.where(far, masked / np.where(far, d, 1.0), 1.0).astype(np.float32)
