"""EPDMS aggregation: sub-scores of every kernel, EP normalisation, EPDMS / PDMS, DriveJudge gates, human filter.

``spec/epdms.md`` §3.5 (EP), §4 (aggregation), §5 (PDMS v1.1); DriveJudge Eq. 14 (gated score).

* ``compute_metrics(scene, proposals)``: every sub-metric of ONE scene's K proposals (EP still raw progress).
* ``normalize_progress``: EP from raw progress by one of three normalisers, named by ``mode``:
  - ``"scene"``: NAVSIM's: D = max over the valid proposals of the scene of raw x M (M = NC*DAC*DDC*TLC); the fixtures
    were scored this way (all proposals of a scene together);
  - ``"batch"``: D = the same max over every valid proposal of the batch;
  - ``"reference"``: each proposal is coupled with a fixed per-scene reference progress R (e.g. PDM-Closed's raw progress
    x its multipliers, as in the official evaluation, which scores [PDM-Closed, agent]): D = max(R, raw x M).
  Then EP = clip(raw / D, 0, 1) if D > 5 m, else 1 (numerator unmasked). Invalid proposals never enter D.
* ``aggregate``: EPDMS = M x (5 EP + 5 TTC + 2 LK + 2 HC + 2 EC) / 16, EC's value and weight dropped (-> /14) where EC
  is NaN; the scorer's own ``pdm_score`` = M x (5 EP + 5 TTC + 2 LK + 2 HC) / 14; and PDMS v1.1 (see ``aggregate``).
  With ``gates`` (bool [..., 9], order ``METRICS``), DriveJudge Eq. 14: a gated-off multiplier counts as 1, a gated-off
  weighted metric leaves the weighted average (numerator and denominator).
* ``human_filter``: NAVSIM's human penalty filter (§4.2).
* ``score``: the jittable one-call entry point over a batch.
"""

from __future__ import annotations

from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jaxdrive import pytree as struct
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import PackedAgents
from jaxdrive.errors import UserInputError
from jaxdrive.metrics import GATES, MULTIPLIERS, WEIGHTS
from jaxdrive.rules.areas import EgoAreas, batch_ego_areas, ego_areas
from jaxdrive.rules.comfort import comfort_v1, extended_comfort, history_comfort
from jaxdrive.rules.dac import drivable_area_compliance
from jaxdrive.rules.ddc import driving_direction_compliance
from jaxdrive.rules.lk import lane_keeping
from jaxdrive.rules.nc import batch_no_at_fault_collisions, no_at_fault_collisions
from jaxdrive.rules.progress import raw_progress
from jaxdrive.rules.tlc import traffic_light_compliance
from jaxdrive.rules.ttc import batch_time_to_collision, time_to_collision
from jaxdrive.scene import Agents, MapData, Proposals, Scene
from jaxdrive.scene.device import check_batch_shapes

METRICS = GATES  # gate order (jaxdrive.metrics)
PROGRESS_THRESHOLD = 5.0  # m: D <= 5 m -> EP = 1 for every proposal (v2)
HUMAN_FILTERED = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc")
EpMode = Literal["scene", "batch", "reference"]


@struct.dataclass
class SubScores:
    """Per-proposal sub-scores (leading dims ``*b``: [K] for one scene, [B, K] for a batch).

    Values (float32): nc, ddc in {0, 0.5, 1}; dac, tlc, ttc, lk, hc in {0, 1}; ep in [0, 1] (raw progress in m before
    ``normalize_progress``); ec in {0, 1} or NaN without a previous frame; raw_progress (m); multiplier =
    nc*dac*ddc*tlc; pdm_score (scorer's aggregate, no EC), epdms, pdms (v1.1) and comfort_v1 (v1.1's comfort C).
    hc_checks: the six HC bound checks (``comfort.HC_CHECKS`` order). Steps (int32): first violating step, -1 if none
    (ttc_step is the ego step t of the first TTC violation).
    """

    nc: Float[Array, "*b"]
    dac: Float[Array, "*b"]
    ddc: Float[Array, "*b"]
    tlc: Float[Array, "*b"]
    ep: Float[Array, "*b"]
    ttc: Float[Array, "*b"]
    lk: Float[Array, "*b"]
    hc: Float[Array, "*b"]
    ec: Float[Array, "*b"]
    raw_progress: Float[Array, "*b"]
    multiplier: Float[Array, "*b"]
    pdm_score: Float[Array, "*b"]
    epdms: Float[Array, "*b"]
    pdms: Float[Array, "*b"]
    comfort_v1: Float[Array, "*b"]
    hc_checks: Bool[Array, "*b 6"]
    nc_step: Int[Array, "*b"]
    dac_step: Int[Array, "*b"]
    ddc_step: Int[Array, "*b"]
    tlc_step: Int[Array, "*b"]
    ttc_step: Int[Array, "*b"]
    lk_step: Int[Array, "*b"]


def comfort_metrics(history_padded: Float[Array, "14 11"], proposals: Proposals, *,
                    comfort_precision: str = "float64") -> tuple[Array, ...]:
    """(hc [K], hc_checks [K, 6], ec [K], comfort_v1 [K]) of one scene's K proposals: the sub-metrics that read
    neither the map nor the agents (``comfort_precision`` "float64": scoped x64, NAVSIM parity)."""
    states = proposals.states
    hc, hc_checks = history_comfort(history_padded, states, precision=comfort_precision)
    ec = extended_comfort(states, proposals.previous, proposals.has_previous, precision=comfort_precision)
    return hc, hc_checks, ec, comfort_v1(states, precision=comfort_precision)


def batch_comfort_metrics(scene: Scene, proposals: Proposals, *,
                          comfort_precision: str = "float64") -> tuple[Array, ...]:
    """``comfort_metrics`` of a batch ([B, K] each, hc_checks [B, K, 6]), for ``score(..., comfort=...)``."""
    return jax.vmap(lambda h, pr: comfort_metrics(h, pr, comfort_precision=comfort_precision))(
        scene.history_padded, proposals)


def compute_metrics(scene: Scene, proposals: Proposals, areas: EgoAreas | None = None, *,
                    comfort_precision: str = "float64", collisions: tuple[Array, ...] | None = None,
                    comfort: tuple[Array, ...] | None = None) -> SubScores:
    """All sub-metrics of one scene's K proposals (``scene`` and ``proposals`` unbatched).

    ``areas``: the proposals' ego-area flags [K, T] if already computed (required with a broad-phase ``PackedMap``,
    whose flags ``batch_ego_areas`` computes for the whole batch); by default ``ego_areas(scene.map, ...)``.
    ``ep`` holds the raw progress (m) until ``normalize_progress``; ``pdm_score``/``epdms``/``pdms`` are 0 until
    ``aggregate``. ``comfort_precision`` is passed to the comfort kernels ("float64": scoped x64, NAVSIM parity).
    ``collisions``: (nc, nc_step, ttc, ttc_step) [K] if already computed (required with the broad phase's
    ``PackedAgents``, whose contact triples ``batch_no_at_fault_collisions`` / ``batch_time_to_collision`` test for
    the whole batch). ``comfort``: ``comfort_metrics`` of these proposals if already computed.
    """
    states = proposals.states
    if areas is None:
        areas = ego_areas(scene.map, states)
    if collisions is None:
        collisions = no_at_fault_collisions(scene, states, areas) + time_to_collision(scene, states, areas)
    nc, nc_step, ttc, ttc_step = collisions
    dac, dac_step = drivable_area_compliance(scene, states, areas)
    ddc, ddc_step = driving_direction_compliance(scene, states, areas)
    tlc, tlc_step = traffic_light_compliance(scene, states, areas)
    lk, lk_step = lane_keeping(scene, states, areas)
    raw = raw_progress(scene, states, areas)
    if comfort is None:
        comfort = comfort_metrics(scene.history_padded, proposals, comfort_precision=comfort_precision)
    hc, hc_checks, ec, c_v1 = comfort
    zero = jnp.zeros_like(nc)
    return SubScores(nc=nc, dac=dac, ddc=ddc, tlc=tlc, ep=raw, ttc=ttc, lk=lk, hc=hc, ec=ec, raw_progress=raw,
                     multiplier=nc * dac * ddc * tlc, pdm_score=zero, epdms=zero, pdms=zero,
                     comfort_v1=c_v1, hc_checks=hc_checks,
                     nc_step=nc_step, dac_step=dac_step, ddc_step=ddc_step, tlc_step=tlc_step, ttc_step=ttc_step,
                     lk_step=lk_step)


def check_ep_mode(ep_mode: str, reference_progress) -> None:
    """``ep_mode`` one of ``EpMode``, with ``reference_progress`` when it is "reference"; a ValueError naming the
    argument otherwise."""
    if ep_mode not in get_args(EpMode):
        raise UserInputError(f"ep_mode: expected one of {get_args(EpMode)}, got {ep_mode!r}")
    if ep_mode == "reference" and reference_progress is None:
        raise UserInputError("reference_progress: ep_mode='reference' needs it ([B] metres per scene), got None")


def progress_normaliser(raw: Float[Array, "B K"], multiplier: Float[Array, "B K"], valid: Bool[Array, "B K"],
                        mode: EpMode = "scene", reference: Float[Array, "B"] | None = None) -> Float[Array, "B K"]:
    """The EP denominator D per proposal (m) for ``mode`` (module docstring)."""
    check_ep_mode(mode, reference)
    masked = jnp.where(valid, raw * multiplier, 0.0)
    if mode == "scene":
        d = jnp.max(masked, axis=-1, keepdims=True)
    elif mode == "batch":
        d = jnp.max(masked, keepdims=True)
    else:
        d = jnp.maximum(jnp.asarray(reference, masked.dtype)[..., None], masked)
    return jnp.broadcast_to(d, raw.shape)


def normalize_progress(raw: Float[Array, "B K"], multiplier: Float[Array, "B K"], valid: Bool[Array, "B K"],
                       mode: EpMode = "scene", reference: Float[Array, "B"] | None = None) -> Float[Array, "B K"]:
    """EP = clip(raw / D, 0, 1) where D > 5 m, else 1 (v2 rule; numerator unmasked). D from ``progress_normaliser``."""
    d = progress_normaliser(raw, multiplier, valid, mode, reference)
    big = d > PROGRESS_THRESHOLD
    return jnp.where(big, jnp.clip(raw / jnp.where(big, d, 1.0), 0.0, 1.0), 1.0).astype(jnp.float32)


def _v1_progress(s: SubScores, valid: Bool[Array, "B K"]) -> Float[Array, "B K"]:
    """PDMS v1.1 EP: raw*M1/D with M1 = NC*DAC and D = max over the scene's valid proposals of raw*M1, if D > 5 m;
    else 1 where M1 != 0 and 0 otherwise (spec §5)."""
    m1 = s.nc * s.dac
    masked = s.raw_progress * m1
    d = jnp.max(jnp.where(valid, masked, 0.0), axis=-1, keepdims=True)
    big = d > PROGRESS_THRESHOLD
    return jnp.where(big, masked / jnp.where(big, d, 1.0), jnp.where(m1 != 0, 1.0, 0.0))


def gated_score(s: SubScores, gates: Bool[Array, "*b 9"] | None = None) -> Float[Array, "*b"]:
    """DriveJudge Eq. 14 over (nc, dac, ddc, tlc) x weighted (ep 5, ttc 5, lk 2, hc 2, ec 2).

    prod_m (g_m s_m + 1 - g_m) * sum_m g_m w_m s_m / sum_m g_m w_m. A NaN EC (no previous frame) counts as gated
    off (NAVSIM's /14); a NaN in any other metric makes the score NaN (a bug upstream, never hidden). If
    every weighted metric is gated off, the weighted factor is 1 (the score is the gated product alone).
    All gates on (``None``) gives EPDMS.
    """
    g = jnp.ones(s.nc.shape + (len(METRICS),), bool) if gates is None else jnp.broadcast_to(
        jnp.asarray(gates, bool), s.nc.shape + (len(METRICS),))
    gate = {m: g[..., i] for i, m in enumerate(METRICS)}
    prod = jnp.ones_like(s.nc)
    for m in MULTIPLIERS:
        prod = prod * jnp.where(gate[m], getattr(s, m), 1.0)
    num = jnp.zeros_like(s.nc)
    den = jnp.zeros_like(s.nc)
    for m, w in WEIGHTS.items():
        value = getattr(s, m)
        on = gate[m] & ~jnp.isnan(value) if m == "ec" else gate[m]  # only a missing EC leaves; other NaNs surface
        num = num + jnp.where(on, w * value, 0.0)
        den = den + jnp.where(on, w, 0.0)
    return (prod * jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 1.0)).astype(jnp.float32)


def aggregate(s: SubScores, valid: Bool[Array, "B K"], gates: Bool[Array, "B K 9"] | None = None) -> SubScores:
    """Fill ``multiplier``, ``pdm_score``, ``epdms`` and ``pdms`` of normalised sub-scores [B, K].

    * epdms: ``gated_score(s, gates)`` (EPDMS with NaN EC -> /14 when ``gates`` is None);
    * pdm_score: the scorer's M x (5 EP + 5 TTC + 2 LK + 2 HC) / 14 (never gated);
    * pdms (v1.1): NC*DAC x (5 EP_v1 + 5 TTC + 2 C) / 12 with v1.1's EP rule (``_v1_progress``) and comfort C
      (``comfort_v1``). Approximations (documented in the spec's terms): TTC is v2's (ego t <= 31 over 41 frames; v1.1
      walks t <= 40 over a 5 s observation) and NC has no red-light objects either way.
    """
    multiplier = s.nc * s.dac * s.ddc * s.tlc
    weighted = (5.0 * s.ep + 5.0 * s.ttc + 2.0 * s.lk + 2.0 * s.hc) / 14.0
    pdms = s.nc * s.dac * (5.0 * _v1_progress(s, valid) + 5.0 * s.ttc + 2.0 * s.comfort_v1) / 12.0
    return s.replace(multiplier=multiplier, pdm_score=(multiplier * weighted).astype(jnp.float32),
                     epdms=gated_score(s, gates), pdms=pdms.astype(jnp.float32))


def human_filter(agent: SubScores, human: SubScores, apply: Bool[Array, "*b"] | bool = True) -> SubScores:
    """NAVSIM's human penalty filter (spec §4.2): for NC, DAC, DDC, TLC, EP, TTC, LK, HC, where the human's value is
    exactly 0 the agent's becomes 1 (0.5 does not trigger); the multiplier and EPDMS are recomputed; ``pdm_score`` is
    not updated (NAVSIM leaves it stale), nor is ``pdms`` (PDMS v1.1 has no human filter); EC is never filtered. ``human`` broadcasts against ``agent`` (e.g. [B, 1]
    against [B, K]); ``apply`` selects where the filter is on (original scenes with a logged human future).
    """
    apply = jnp.asarray(apply, bool)
    updates = {}
    for m in HUMAN_FILTERED:
        a, h = getattr(agent, m), getattr(human, m)
        updates[m] = jnp.where(apply & (h == 0.0), jnp.ones_like(a), a)
    out = agent.replace(**updates)
    multiplier = out.nc * out.dac * out.ddc * out.tlc
    return out.replace(multiplier=multiplier, epdms=gated_score(out))


def score(scene: Scene, proposals: Proposals, *, ep_mode: EpMode = "scene",
          reference_progress: Float[Array, "B"] | None = None, gates: Bool[Array, "B K 9"] | None = None,
          apply_human_filter: bool = False, comfort_precision: str = "float64",
          areas: EgoAreas | None = None, comfort: tuple[Array, ...] | None = None) -> SubScores:
    """Score a padded batch: ``Scene[B]``, ``Proposals[B, K]`` -> ``SubScores[B, K]`` (jittable; static options).

    Args:
      scene, proposals: a batch from ``jaxdrive.scene.batch_scenes`` (ego-centred float32).
      ep_mode: EP normaliser, "scene" (NAVSIM / fixtures), "batch" or "reference" (module docstring).
      reference_progress: [B] reference progress (m) for ep_mode="reference".
      gates: optional bool [B, K, 9] (or broadcastable) in ``METRICS`` order for DriveJudge's gated ``epdms``.
      apply_human_filter: score ``scene.human`` alone (one-proposal batch, no history: its EP and HC are 1) and apply
        ``human_filter`` where ``scene.has_human``; ``epdms`` is then the filtered (ungated) score unless ``gates``.
      comfort_precision: "float64" (default, scoped x64) or "float32" for devices without float64.
      areas: the batch's map predicates ``batch_ego_areas(scene.map, proposals.states)`` [B, K, T] if computed
        already; ``jaxdrive.scoring`` jits that call and this one separately (on CPU XLA fuses the two badly at some
        shapes).
      comfort: ``batch_comfort_metrics(scene, proposals)`` if computed already (``jaxdrive.score`` computes them
        outside its overflow ``lax.cond``: they read no map, and float64 code inside a branch would be re-batched
        outside its x64 scope under ``jax.vmap``).

    Padded proposals (``proposals.valid`` False) never enter the EP normaliser; their rows are masked: every float
    field NaN, every ``*_step`` -1, ``hc_checks`` False (``proposals.valid`` tells the real ones). A proposal with a
    non-finite state is scored the same way (``finite_proposals``).
    """
    if isinstance(scene.map, MapData) and isinstance(scene.agents, Agents):  # (a packed batch was checked before
        check_batch_shapes(scene, proposals, "score")                       # packing, by jaxdrive.score)
    proposals = proposals.replace(valid=finite_proposals(proposals))
    if areas is None:
        areas = batch_ego_areas(scene.map, proposals.states)
    elif areas.multiple_lanes.shape != proposals.states.shape[:3]:
        raise UserInputError(f"score: areas: expected flags of shape (B, K, T) = {proposals.states.shape[:3]} "
                         f"(batch_ego_areas of these proposals), got {areas.multiple_lanes.shape}")
    collisions = (batch_no_at_fault_collisions(scene, proposals.states, areas)
                  + batch_time_to_collision(scene, proposals.states, areas))
    per_scene = scene.replace(agents=scene.agents.agents) if isinstance(scene.agents, PackedAgents) else scene
    if comfort is None:
        comfort = batch_comfort_metrics(scene, proposals, comfort_precision=comfort_precision)
    raw = jax.vmap(lambda sc, pr, ar, co, cf: compute_metrics(sc, pr, ar, comfort_precision=comfort_precision,
                                                              collisions=co, comfort=cf))(
        per_scene, proposals, areas, collisions, comfort)
    ep = normalize_progress(raw.raw_progress, raw.multiplier, proposals.valid, ep_mode, reference_progress)
    out = aggregate(raw.replace(ep=ep), proposals.valid)
    if apply_human_filter:
        out = human_filter(out, _human_scores(scene, comfort_precision), scene.has_human[:, None])
    if gates is not None:
        out = out.replace(epdms=gated_score(out, gates))
    return mask_padded(out, proposals.valid)


def finite_proposals(proposals: Proposals) -> Bool[Array, "B K"]:
    """``proposals.valid`` less the proposals with a non-finite state (or previous plan, where given). ``score`` and
    ``jaxdrive.score`` treat those as padding: their rows are NaN (steps -1) and they enter no EP normaliser, so one
    diverged sample (an RL policy's NaN) neither scores 0 nor moves the EP of the others."""
    finite = lambda x: jnp.all(jnp.isfinite(x), axis=(-2, -1))
    return proposals.valid & finite(proposals.states) & (finite(proposals.previous) | ~proposals.has_previous)


def mask_padded(sub: SubScores, valid: Bool[Array, "*b"]) -> SubScores:
    """``sub`` with the rows of padded proposals (``valid`` False) set to NaN (floats), -1 (steps), False (checks)."""
    def one(x):
        v = valid.reshape(valid.shape + (1,) * (x.ndim - valid.ndim))
        if jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.where(v, x, jnp.nan)
        if jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.where(v, x, -1)
        return x & v

    return jax.tree_util.tree_map(one, sub)


def _human_scores(scene: Scene, comfort_precision: str) -> SubScores:
    """The logged human future scored alone per scene ([B, 1]): EP = 1 (normalised against itself), HC = 1."""
    def one(sc: Scene) -> SubScores:
        states = sc.human[None]
        human = Proposals(states=states, previous=jnp.zeros_like(states), has_previous=jnp.zeros((1,), bool),
                          valid=jnp.ones((1,), bool))
        return compute_metrics(sc, human, comfort_precision=comfort_precision)

    s = jax.vmap(one)(scene)
    return s.replace(ep=jnp.ones_like(s.ep), hc=jnp.ones_like(s.hc))
