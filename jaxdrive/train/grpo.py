"""All GRPO advantage and policy-loss math (the one home of it; see spec/eval-protocols.md §D).

Everything here is a pure ``jnp`` function of padded arrays + masks, in float32, safe inside ``jit``.

Advantages (``group_advantages``), rewards ``r`` [N] with N = prompts x G and each group of G rows contiguous:

    A_i = (r_i - mean_g) / (std + eps)   scale="group": std = Bessel std of the group   (GRPO)
                                         scale="batch": std = Bessel std of the batch
    A_i =  r_i - mean_g                  scale="none"                                    (Dr.GRPO)

Named conventions (``ADVANTAGE_CONVENTIONS``): "trl" (group, eps 1e-4), "verl" and "tunix" (group, eps 1e-6),
"drgrpo" (none). The library default is verl/Tunix (eps 1e-6).

A group of one (G = 1) has no baseline: its advantage is 0 (TRL's behaviour: mean = r, std = 0) unless
``singleton="raw"`` is asked for, which returns the raw reward (verl's behaviour: mean = 0, std = 1, so
r / (1 + eps), or r with scale="none"). An all-equal
group gives advantage 0 in every convention. Rows with ``valid=False`` (no reward scored them, where missing values
were explicitly allowed) are left out of the mean/std and get advantage 0, as TRL does with NaN rewards.

Policy loss (``policy_loss`` / ``policy_loss_terms``), per completion token t of sequence i:

    delta = clip(logp - old_logp, -log_ratio_clip, +log_ratio_clip);  rho = exp(delta)
    pg    = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))              (PPO clipped surrogate)
    pg    = min(pg, -A dual_clip)  where A < 0, if dual_clip is given       (verl/Tunix dual clip, c ~ 3)
    l     = pg + beta kl,   kl from ``kl_penalty`` (k1 | k2 | k3, clamped)

aggregated with ``agg`` (see ``AGG_MODES``) as a (sum, denominator) pair so that micro-batches and gradient
accumulation give the true mean: ``loss = sum(sums) / sum(denominators)``.
"""
from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxdrive.errors import UserInputError

ADVANTAGE_CONVENTIONS: dict[str, dict] = {
    "trl": dict(scale="group", eps=1e-4),
    "verl": dict(scale="group", eps=1e-6),
    "tunix": dict(scale="group", eps=1e-6),
    "drgrpo": dict(scale="none", eps=0.0),
}
DEFAULT_ADV_EPS = 1e-6

#: Aggregation modes. For N sequences, per-token losses l and mask m:
#:   "seq-mean-token-mean":     sum_i [sum_t m l / sum_t m] / #non-empty sequences   (GRPO; TRL "grpo", verl, Tunix)
#:   "token-mean":              sum m l / sum m                                        (DAPO; TRL "bnpo", verl default)
#:   "seq-mean-token-sum-norm": sum m l / (N * max_len)                                (Dr.GRPO; TRL "dr_grpo")
AGG_MODES = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k2", "k3")
_KL_ALIASES = {"kl": "k1", "mse_kl": "k2", "low_var_kl": "k3"}
KL_NAMES = KL_ESTIMATORS + tuple(_KL_ALIASES)  # what ``kl_penalty(kind=...)`` accepts (Tunix's names included)


def resolve_advantage_convention(name: str) -> dict:
    """Keyword arguments of ``group_advantages`` for a named convention ("trl", "verl", "tunix", "drgrpo")."""
    if name not in ADVANTAGE_CONVENTIONS:
        raise UserInputError(f"advantage convention: expected one of {sorted(ADVANTAGE_CONVENTIONS)}, got {name!r}")
    return dict(ADVANTAGE_CONVENTIONS[name])


def _bessel_std(x: Float[Array, "*b n"], w: Float[Array, "*b n"]) -> Float[Array, "*b"]:
    """Weighted (0/1 weights) Bessel-corrected std over the last axis; 0 where fewer than two entries."""
    n = w.sum(-1)
    mean = (x * w).sum(-1) / jnp.maximum(n, 1.0)
    var = (((x - mean[..., None]) ** 2) * w).sum(-1) / jnp.maximum(n - 1.0, 1.0)
    return jnp.where(n > 1, jnp.sqrt(var), 0.0)


def group_advantages(
    rewards: Float[Array, "n"],
    group_size: int,
    *,
    scale: Literal["group", "batch", "none"] = "group",
    eps: float = DEFAULT_ADV_EPS,
    valid: Bool[Array, "n"] | None = None,
    singleton: Literal["zero", "raw"] = "zero",
) -> Float[Array, "n"]:
    """Group-relative advantages, computed on device.

    Args:
      rewards: [N] float scalar reward per completion; N = prompts x group_size, each group's rows contiguous.
      group_size: G, completions per prompt (static).
      scale: "group" divides by the group's Bessel std + eps, "batch" by the whole batch's Bessel std + eps,
        "none" only subtracts the group mean (Dr.GRPO).
      eps: added to the std ("group"/"batch"); 1e-4 is TRL, 1e-6 verl/Tunix.
      valid: optional [N] bool; False rows (explicitly allowed missing rewards) are excluded from the statistics and
        get advantage 0. Their reward value is ignored (it may be NaN).
      singleton: G = 1 policy: "zero" (no baseline, advantage 0; TRL) or "raw" (reward / (1 + eps); verl).
    Returns:
      [N] float32 advantages.
    """
    if scale not in ("group", "batch", "none"):
        raise UserInputError(f"scale: expected 'group', 'batch' or 'none', got {scale!r}")
    if singleton not in ("zero", "raw"):
        raise UserInputError(f"singleton: expected 'zero' or 'raw', got {singleton!r}")
    n = rewards.shape[0]
    if group_size < 1 or n % group_size:
        raise UserInputError(f"rewards: length {n} is not a multiple of group_size={group_size}")
    r = rewards.astype(jnp.float32)
    w = jnp.ones_like(r) if valid is None else valid.astype(jnp.float32)
    r = jnp.where(w > 0, r, 0.0)
    if group_size == 1:
        if singleton == "zero":
            return jnp.zeros_like(r)
        return r * w / (1.0 + eps) if scale != "none" else r * w
    rg, wg = r.reshape(-1, group_size), w.reshape(-1, group_size)
    # Shift each group by one of its own valid rewards first: an all-equal group then centres to exact zeros
    # (a float32 mean of 0.7s is not exactly 0.7, and the tiny residue divided by std + eps is not small).
    shift = jnp.take_along_axis(rg, jnp.argmax(wg, -1)[:, None], -1)
    rg = jnp.where(wg > 0, rg - shift, 0.0)
    mean = (rg * wg).sum(-1, keepdims=True) / jnp.maximum(wg.sum(-1, keepdims=True), 1.0)
    centred = rg - mean
    if scale == "group":
        centred = centred / (_bessel_std(rg, wg)[:, None] + eps)
    elif scale == "batch":
        centred = centred / (_bessel_std(r - r[0], w) + eps)
    return (centred * wg).reshape(n)


def zero_std_fraction(rewards: Float[Array, "n"], group_size: int, atol: float = 1e-6,
                      valid: Bool[Array, "n"] | None = None) -> Float[Array, ""]:
    """Fraction of groups whose valid rewards are all equal, or fewer than two (they carry no GRPO learning signal:
    every advantage of the group is 0). ``valid`` as in ``group_advantages``: False rows are left out."""
    rg = rewards.astype(jnp.float32).reshape(-1, group_size)
    wg = jnp.ones(rg.shape, bool) if valid is None else valid.reshape(-1, group_size)
    spread = jnp.where(wg, rg, -jnp.inf).max(-1) - jnp.where(wg, rg, jnp.inf).min(-1)
    return jnp.mean((wg.sum(-1) < 2) | (spread <= atol))


def mean_group_std(rewards: Float[Array, "n"], group_size: int,
                   valid: Bool[Array, "n"] | None = None) -> Float[Array, ""]:
    """TRL's logged ``reward_std``: the mean over groups of each group's sample standard deviation (ddof 1, as
    ``torch.std``) of its valid rewards; groups with fewer than two valid rows are left out (NaN when none is left).
    The spread within groups, which GRPO's advantages divide by, not the spread of the whole batch."""
    rg = rewards.astype(jnp.float32).reshape(-1, group_size)
    wg = jnp.ones(rg.shape, bool) if valid is None else valid.reshape(-1, group_size)
    n = wg.sum(-1)
    mean = jnp.where(wg, rg, 0.0).sum(-1) / jnp.maximum(n, 1)
    var = jnp.where(wg, (rg - mean[:, None]) ** 2, 0.0).sum(-1) / jnp.maximum(n - 1, 1)
    kept = n >= 2
    return jnp.where(kept.any(), jnp.sum(jnp.where(kept, jnp.sqrt(var), 0.0)) / jnp.maximum(kept.sum(), 1), jnp.nan)


def kl_penalty(
    logp: Float[Array, "*s"],
    ref_logp: Float[Array, "*s"],
    kind: str = "k3",
    *,
    log_ratio_clip: float = 20.0,
    kl_clip: float = 10.0,
) -> Float[Array, "*s"]:
    """Per-token KL(pi || ref) estimators on samples from pi, x = ref_logp - logp clamped to +-log_ratio_clip.

      k1 = -x            (Tunix "kl"; unbiased, high variance, can be negative)
      k2 = x^2 / 2       (Tunix "mse_kl")
      k3 = e^x - x - 1   (Schulman's low-variance estimator; TRL, verl "low_var_kl"), then clamped to +-kl_clip

    The clamp of x keeps e^x finite for extreme log-prob gaps (the step-0 NaN pitfall).
    """
    kind = _KL_ALIASES.get(kind, kind)
    x = jnp.clip(ref_logp.astype(jnp.float32) - logp.astype(jnp.float32), -log_ratio_clip, log_ratio_clip)
    if kind == "k1":
        return -x
    if kind == "k2":
        return 0.5 * x * x
    if kind == "k3":
        return jnp.clip(jnp.exp(x) - x - 1.0, -kl_clip, kl_clip)
    raise UserInputError(f"kl: expected one of {KL_ESTIMATORS} (or {sorted(_KL_ALIASES)}), got {kind!r}")


def aggregate_terms(
    per_token: Float[Array, "n t"], mask: Float[Array, "n t"], agg: str, max_len: int | None = None
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(sum, denominator) of masked per-token values under aggregation mode ``agg`` (see ``AGG_MODES``).

    ``max_len`` is the Dr.GRPO normaliser (default: the padded length T). Summing the pairs of several
    micro-batches and dividing gives the same number as aggregating the concatenated batch, except for
    "seq-mean-token-sum-norm" whose constant denominator is additive too.
    """
    m = mask.astype(jnp.float32)
    masked = per_token.astype(jnp.float32) * m
    if agg == "token-mean":
        return masked.sum(), m.sum()
    if agg == "seq-mean-token-mean":
        tokens = m.sum(-1)
        return (masked.sum(-1) / jnp.maximum(tokens, 1.0)).sum(), (tokens > 0).sum().astype(jnp.float32)
    if agg == "seq-mean-token-sum-norm":
        length = per_token.shape[-1] if max_len is None else max_len
        return masked.sum(), jnp.asarray(per_token.shape[0] * length, jnp.float32)
    raise UserInputError(f"agg: expected one of {AGG_MODES}, got {agg!r}")


def safe_ratio(total: Float[Array, ""], denom: Float[Array, ""]) -> Float[Array, ""]:
    """total / denom, 0 when the denominator is 0 (an all-masked batch contributes nothing)."""
    return jnp.where(denom > 0, total / jnp.maximum(denom, 1e-8), 0.0)


def policy_loss_terms(
    logp: Float[Array, "n t"],
    old_logp: Float[Array, "n t"],
    advantages: Float[Array, "n"],
    mask: Float[Array, "n t"],
    *,
    ref_logp: Float[Array, "n t"] | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    beta: float = 0.0,
    kl: str = "k3",
    agg: str = "seq-mean-token-mean",
    max_len: int | None = None,
    log_ratio_clip: float = 20.0,
    kl_clip: float = 10.0,
) -> tuple[Float[Array, ""], Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Clipped GRPO objective as (sum, denominator, token-level metric sums); see module docstring.

    Args:
      logp: [N, T] log-probs of the completion tokens under the policy being trained (differentiated).
      old_logp: [N, T] log-probs under the policy that sampled them (stored; no gradient).
      advantages: [N] per-sequence advantages (broadcast over tokens).
      mask: [N, T] 1 on completion tokens that count, 0 on prompt/padding.
      ref_logp: [N, T] reference-policy log-probs; required when beta != 0.
      eps_low, eps_high: ratio clip range [1 - eps_low, 1 + eps_high].
      dual_clip: optional c > 1 bounding the loss of negative-advantage tokens by -A c.
      beta, kl: KL coefficient and estimator ("k1" | "k2" | "k3").
      agg, max_len: aggregation mode (``AGG_MODES``) and the Dr.GRPO normaliser.
    Returns:
      (loss_sum, loss_denominator, sums) where ``sums`` holds token sums of "clip_frac", "kl", "ratio",
      "neg_logp" plus "tokens" (their denominator), so micro-batch metrics can be combined exactly.
    """
    if beta != 0.0 and ref_logp is None:
        raise UserInputError("ref_logp: required when beta != 0 (the KL term needs the reference log-probs)")
    if dual_clip is not None and dual_clip <= 1.0:
        raise UserInputError(f"dual_clip: expected a constant > 1, got {dual_clip}")
    logp = logp.astype(jnp.float32)
    m = mask.astype(jnp.float32)
    adv = advantages.astype(jnp.float32)[:, None]
    delta = jnp.clip(logp - jax.lax.stop_gradient(old_logp.astype(jnp.float32)), -log_ratio_clip, log_ratio_clip)
    ratio = jnp.exp(delta)
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg = jnp.maximum(pg_unclipped, pg_clipped)
    if dual_clip is not None:
        pg = jnp.where(adv < 0, jnp.minimum(pg, -adv * dual_clip), pg)
    per_token = pg
    kl_tok = jnp.zeros_like(logp)
    if ref_logp is not None:
        kl_tok = kl_penalty(logp, jax.lax.stop_gradient(ref_logp), kl, log_ratio_clip=log_ratio_clip, kl_clip=kl_clip)
        if beta != 0.0:
            per_token = per_token + beta * kl_tok
    total, denom = aggregate_terms(per_token, m, agg, max_len)
    sg = jax.lax.stop_gradient
    sums = {
        "clip_frac": ((pg_clipped > pg_unclipped).astype(jnp.float32) * m).sum(),
        "kl": (sg(kl_tok) * m).sum(),
        "ratio": (sg(ratio) * m).sum(),
        "neg_logp": (-sg(logp) * m).sum(),
        "tokens": m.sum(),
    }
    return total, denom, sums


def policy_loss(
    logp: Float[Array, "n t"],
    old_logp: Float[Array, "n t"],
    advantages: Float[Array, "n"],
    mask: Float[Array, "n t"],
    **kwargs,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Scalar GRPO loss and metrics; keyword arguments as ``policy_loss_terms``.

    Returns (loss, metrics) with metrics "clip_frac", "kl", "ratio" (token means) and "entropy" (token mean of
    -logp of the sampled tokens: a Monte-Carlo estimate of the policy entropy when the tokens were sampled from it).
    """
    total, denom, sums = policy_loss_terms(logp, old_logp, advantages, mask, **kwargs)
    return safe_ratio(total, denom), token_metrics(sums)


def token_metrics(sums: dict[str, Float[Array, ""]]) -> dict[str, Float[Array, ""]]:
    """Token means from the sums of ``policy_loss_terms`` (possibly added over micro-batches)."""
    t = sums["tokens"]
    return {
        "clip_frac": safe_ratio(sums["clip_frac"], t),
        "kl": safe_ratio(sums["kl"], t),
        "ratio": safe_ratio(sums["ratio"], t),
        "entropy": safe_ratio(sums["neg_logp"], t),
    }
