"""Ground-truth gate labels from human labels (DriveJudge Eq. 10-11) and per-rule threshold fitting (Eq. 13).

Eq. 10-11: with the rule scores s_i^m (``rule_values``) and a human label y_i (1 = reasonable driving),

    g_i^m = 0 if y_i = 1 and s_i^m < tau^m, else 1,

i.e. a rule that a reasonable trajectory breaks (below its tolerance tau^m) is not invoked for it; every rule stays
invoked on failures. The COMFORT rule's score is min(HC, EC) (EC undefined -> HC alone).

Eq. 13: tau = argmax_tau ACC_DQC(S(g(tau)), y), the accuracy of [S > tau_dqc] against y where S is the gated score
(Eq. 14) under the labels g(tau). Thresholds only change the reasonable samples' gates, and a threshold between two
consecutive score levels gives the same labels as any other there, so the search runs over a candidate grid per rule
reduced to the candidates that give distinct labels (the smallest of each), then either exhaustively over their
product (up to ``max_joint`` combinations, chunked and vmapped on device) or by coordinate ascent from the default.
Ties (the accuracy is flat above the level a rule needs) go to the fewest gated-off rules, then the smallest
thresholds: the lowest tolerances that achieve the best accuracy.
"""
from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxdrive.errors import UserInputError
from jaxdrive.judge.gates import NUM_RULES, RULE_LABELS, RULES, rule_gated_score
from jaxdrive.rules.epdms import SubScores

# Appendix B.1 (RULES order: LK, NC, DAC, DDC, TTC, COMFORT, EP), ACC_DQC = 93.80 on the paper's data.
PAPER_THRESHOLDS = np.array([0.7, 0.9, 0.4, 0.7, 0.9, 0.6, 0.5], np.float32)
DEFAULT_GRID = np.round(np.linspace(0.0, 1.0, 11), 2).astype(np.float32)


def rule_values(s: SubScores) -> Float[Array, "*b 7"]:
    """Per-rule scores s^m in ``RULES`` order: LK, NC, DAC, DDC, TTC, min(HC, EC) (NaN EC ignored), EP."""
    comfort = jnp.minimum(s.hc, jnp.where(jnp.isnan(s.ec), 1.0, s.ec))
    parts = {"lk": s.lk, "nc": s.nc, "dac": s.dac, "ddc": s.ddc, "ttc": s.ttc, "comfort": comfort, "ep": s.ep}
    return jnp.stack([parts[r] for r in RULES], axis=-1).astype(jnp.float32)


def gate_labels(values: Float[Array, "*b 7"], labels: Bool[Array, "*b"],
                thresholds: Float[Array, "7"] = PAPER_THRESHOLDS) -> Bool[Array, "*b 7"]:
    """Eq. 10-11: False (rule not invoked) where the sample is reasonable and s^m < tau^m; True elsewhere."""
    reasonable = jnp.asarray(labels).astype(bool)[..., None]
    return ~(reasonable & (jnp.asarray(values) < jnp.asarray(thresholds, jnp.float32)))


def dqc_correct(scores: Float[Array, "*b"], labels: Bool[Array, "*b"], tau: float) -> Bool[Array, "*b"]:
    """Eq. 1: [S > tau] == y."""
    return (scores > tau) == jnp.asarray(labels).astype(bool)


@dataclasses.dataclass(frozen=True)
class ThresholdFit:
    """Result of ``fit_thresholds``: thresholds [7] (``RULES`` order), their DQC accuracy (fraction), the accuracy of
    the appendix-B.1 defaults on the same data, the number of combinations evaluated and the search used."""

    thresholds: np.ndarray
    accuracy: float
    default_accuracy: float
    evaluated: int
    search: str

    def as_dict(self) -> dict:
        return {"thresholds": dict(zip(RULE_LABELS, map(float, self.thresholds))), "accuracy": self.accuracy,
                "default_accuracy": self.default_accuracy, "evaluated": self.evaluated, "search": self.search}


def _distinct_candidates(values: np.ndarray, grid: np.ndarray) -> list[np.ndarray]:
    """Per rule, the smallest candidate of each distinct gate pattern on the reasonable samples' values [N+, 7]."""
    out = []
    for r in range(values.shape[1]):
        counts = (values[:, r][None, :] < grid[:, None]).sum(1)
        _, first = np.unique(counts, return_index=True)
        out.append(np.sort(grid[first]))
    return out


def _make_evaluator(s: SubScores, values, labels, tau: float):
    """jitted [C, 7] thresholds -> ([C] correct counts, [C] gated-off counts)."""
    values, labels = jnp.asarray(values), jnp.asarray(labels, bool)

    @jax.jit
    def evaluate(thresholds):
        def one(t):
            g = gate_labels(values, labels, t)
            return dqc_correct(rule_gated_score(s, g), labels, tau).sum(), (~g).sum()

        return jax.vmap(one)(thresholds)

    return evaluate


def fit_thresholds(s: SubScores, labels, *, tau: float = 0.8, grid=DEFAULT_GRID, max_joint: int = 1 << 16,
                   chunk: int = 512, default=PAPER_THRESHOLDS, max_sweeps: int = 10) -> ThresholdFit:
    """Eq. 13 over sub-scores ``s`` [N] (normalised EP) and human labels [N] (1 = reasonable).

    ``tau``: the DQC threshold of the accuracy (Eq. 1). ``grid``: candidate thresholds per rule (sorted, in [0, 1]
    or a little above). Exhaustive search when the product of the distinct candidates is at most ``max_joint``,
    else coordinate ascent (one vmapped pass over a rule's candidates at a time) from ``default``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape != np.shape(s.nc):
        raise UserInputError(f"labels: expected shape {np.shape(s.nc)} (one per sub-score row), got {labels.shape}")
    if not np.isin(labels, (0, 1)).all():
        raise UserInputError("labels: expected 0/1 (1 = reasonable)")
    labels = labels.astype(bool)
    values = np.asarray(rule_values(s))
    grid = np.unique(np.asarray(grid, np.float32))
    cands = _distinct_candidates(values[labels], grid)
    evaluate = _make_evaluator(s, values, labels, tau)
    n = len(labels)

    def run(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        correct, off = [], []
        for i in range(0, len(table), chunk):
            part = table[i:i + chunk]
            pad = np.concatenate([part, np.repeat(part[-1:], chunk - len(part), 0)]) if len(part) < chunk else part
            c, o = jax.device_get(evaluate(jnp.asarray(pad)))
            correct.append(c[:len(part)])
            off.append(o[:len(part)])
        return np.concatenate(correct), np.concatenate(off)

    def best(table: np.ndarray, correct: np.ndarray, off: np.ndarray) -> int:
        return int(np.lexsort(tuple(table[:, ::-1].T) + (off, -correct))[0])

    default_acc = float(run(np.asarray(default, np.float32)[None])[0][0]) / n
    joint = int(np.prod([len(c) for c in cands]))
    if joint <= max_joint:
        table = np.array(list(itertools.product(*cands)), np.float32)
        correct, off = run(table)
        i = best(table, correct, off)
        return ThresholdFit(table[i], float(correct[i]) / n, default_acc, joint, "exhaustive")
    current = np.array([c[np.argmin(np.abs(c - d))] for c, d in zip(cands, np.asarray(default))], np.float32)
    evaluated = 0
    for _ in range(max_sweeps):
        before = current.copy()
        for r in range(NUM_RULES):
            table = np.repeat(current[None], len(cands[r]), 0)
            table[:, r] = cands[r]
            correct, off = run(table)
            evaluated += len(table)
            current = table[best(table, correct, off)]
        if np.array_equal(current, before):
            break
    correct, _ = run(current[None])
    return ThresholdFit(current, float(correct[0]) / n, default_acc, evaluated, "coordinate")
