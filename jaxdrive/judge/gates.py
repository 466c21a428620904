"""DriveJudge's seven rule gates and the gated score (paper Eq. 14) on hard gates and on gate probabilities.

The judge decides per trajectory which of the paper's rules apply (``RULES``, in the judge's fixed output order):

    LK  NC  DAC  DDC  TTC  COMFORT  EP

A gate vector ``g`` [..., 7] (1 = the rule is invoked) expands onto the nine EPDMS gates of
``jaxdrive.rules.epdms.METRICS`` (``expand_gates``): COMFORT gates both history comfort (HC) and extended comfort
(EC); traffic-light compliance (TLC) is not one of the paper's rules and stays invoked. The gated score is then
``epdms.gated_score``: multipliers (NC, DAC, DDC, TLC) gated off count as 1, weighted metrics (EP 5, TTC 5, LK 2,
HC 2, EC 2) gated off leave the weighted average.

With gate probabilities ``p`` [..., 7] (independent Bernoulli gates, as the judge's per-rule yes/no slots give them)
the score is a random variable over the 2^7 = 128 invocation combinations. ``combination_scores`` evaluates the score
of every combination, ``combination_probs`` the probability of each, and ``expected_score`` their exact sum: no
sampling, one vectorised [..., 128] computation on device. Combination ``c`` invokes rule ``r`` iff bit ``r`` of
``c`` is set (``COMBINATIONS[c, r]``), so ``c = 0`` invokes nothing and ``c = 127`` everything (EPDMS but TLC-gated
as above). ``sample_gates`` draws rollouts from the same distribution (GRPO; statistical tests).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxdrive.errors import UserInputError
from jaxdrive.rules.epdms import METRICS, SubScores, gated_score

RULES = ("lk", "nc", "dac", "ddc", "ttc", "comfort", "ep")
RULE_LABELS = ("LK", "NC", "DAC", "DDC", "TTC", "COMFORT", "EP")
NUM_RULES = len(RULES)
NUM_COMBINATIONS = 2**NUM_RULES
# EPDMS gate (METRICS order) -> the rule that gates it; None: always invoked.
_METRIC_RULE = {"nc": "nc", "dac": "dac", "ddc": "ddc", "tlc": None, "ep": "ep", "ttc": "ttc", "lk": "lk",
                "hc": "comfort", "ec": "comfort"}
# [9, 7] 0/1: which rule drives each EPDMS gate.
_EXPAND = np.array([[float(_METRIC_RULE[m] == r) for r in RULES] for m in METRICS], np.float32)
_ALWAYS = np.array([_METRIC_RULE[m] is None for m in METRICS])
COMBINATIONS = ((np.arange(NUM_COMBINATIONS)[:, None] >> np.arange(NUM_RULES)[None, :]) & 1).astype(bool)  # [128, 7]


def expand_gates(gates: Bool[Array, "*b 7"]) -> Bool[Array, "*b 9"]:
    """Rule gates (``RULES`` order) -> EPDMS gates (``METRICS`` order): COMFORT -> HC and EC, TLC always on."""
    g = jnp.asarray(gates, jnp.float32)
    if g.shape[-1] != NUM_RULES:
        raise UserInputError(f"gates: expected a last axis of {NUM_RULES} rules {RULE_LABELS}, got shape {g.shape}")
    return (g @ _EXPAND.T > 0.5) | _ALWAYS


@jax.jit
def rule_gated_score(s: SubScores, gates: Bool[Array, "*b 7"]) -> Float[Array, "*b"]:
    """Eq. 14 with hard rule gates (1 = invoked) broadcast against the sub-scores' leading dims ``*b``."""
    return gated_score(s, expand_gates(gates))


def _broadcast_combinations(s: SubScores) -> SubScores:
    """The gated metrics of ``s`` [*b] repeated over a trailing combination axis [*b, 128]."""
    shape = s.nc.shape + (NUM_COMBINATIONS,)
    return s.replace(**{m: jnp.broadcast_to(jnp.asarray(getattr(s, m))[..., None], shape) for m in METRICS})


@jax.jit
def combination_scores(s: SubScores) -> Float[Array, "*b 128"]:
    """The gated score of every invocation combination (``COMBINATIONS`` order) for each sub-score row."""
    return gated_score(_broadcast_combinations(s), expand_gates(COMBINATIONS))


@jax.jit
def combination_probs(probs: Float[Array, "*b 7"]) -> Float[Array, "*b 128"]:
    """P(combination c) = prod_r p_r^{c_r} (1 - p_r)^{1 - c_r} for independent gates with P(invoke r) = p_r."""
    p = jnp.asarray(probs, jnp.float32)[..., None, :]
    c = jnp.asarray(COMBINATIONS)
    return jnp.prod(jnp.where(c, p, 1.0 - p), axis=-1)


@jax.jit
def expected_score(s: SubScores, probs: Float[Array, "*b 7"]) -> Float[Array, "*b"]:
    """E[score] under independent gate probabilities: the exact sum over the 128 combinations of P(c) x score(c).

    In float32 the P(c) sum to 1 only up to rounding, so the sum can leave the range of the combinations' scores by
    an ulp (1.0000001 where every combination scores 1); it is clipped back to [min_c score(c), max_c score(c)],
    which holds the exact expectation (NaN rows stay NaN)."""
    scores = combination_scores(s)
    total = jnp.sum(combination_probs(probs) * scores, axis=-1)
    return jnp.clip(total, jnp.min(scores, axis=-1), jnp.max(scores, axis=-1))


@jax.jit
def score_distribution(s: SubScores, probs: Float[Array, "*b 7"]) -> tuple[Float[Array, "*b 128"],
                                                                          Float[Array, "*b 128"]]:
    """The exact distribution of the gated score: (score of each combination, its probability), both [*b, 128]."""
    return combination_scores(s), combination_probs(probs)


def sample_gates(key: jax.Array, probs: Float[Array, "*b 7"], num: int) -> Bool[Array, "num *b 7"]:
    """``num`` independent rollouts of the gates (Bernoulli per rule), e.g. GRPO's rollout group."""
    p = jnp.asarray(probs, jnp.float32)
    return jax.random.bernoulli(key, p, (num,) + p.shape)

