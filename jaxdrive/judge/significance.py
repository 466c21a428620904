"""Paired significance of two judges on the same preference pairs (TPS): McNemar's exact test and a paired
bootstrap of the accuracy difference.

Both take per-pair correctness of judge A and judge B on the *same* pairs (a tie counts as wrong, as in
``jaxdrive.eval.dqc.tps_accuracy``). Only the discordant pairs (right under one judge, wrong under the other) carry
information about the difference: with b = #(A right, B wrong) and c = #(A wrong, B right), McNemar's exact test
is the two-sided binomial test of c ~ Bin(b + c, 1/2), p = min(1, 2 P(X <= min(b, c))).
"""
from __future__ import annotations

import math

import numpy as np

from jaxdrive.errors import UserInputError


_DRAWS_PER_CHUNK = 1 << 22  # resampled indices held at once by the bootstrap (32 MiB of int64)


def _correctness(values, name: str) -> np.ndarray:
    """``values`` as bool, or ValueError naming ``name`` unless they are bools or 0/1 (a score of 0.3 became True)."""
    v = np.asarray(values)
    if v.dtype != bool and not (np.issubdtype(v.dtype, np.number) and np.isin(v, (0, 1)).all()):
        raise UserInputError(f"{name}: expected per-pair correctness (bool or 0/1), got values {np.unique(v)[:5]}")
    return v.astype(bool)


def mcnemar_exact(correct_a, correct_b) -> dict:
    """McNemar's exact (binomial) test. Returns n, b (A right / B wrong), c (A wrong / B right), the accuracy
    difference B - A in percent points and the two-sided p-value (1 when there is no discordant pair)."""
    a, b_ = _correctness(correct_a, "correct_a"), _correctness(correct_b, "correct_b")
    if a.shape != b_.shape or a.ndim != 1:
        raise UserInputError(f"correct_a, correct_b: expected two 1-d arrays of one length, got {a.shape}, {b_.shape}")
    b, c = int(np.sum(a & ~b_)), int(np.sum(~a & b_))
    m, k = b + c, min(b, c)
    tail = sum(math.comb(m, i) for i in range(k + 1)) / (1 << m) if m else 1.0  # exact ints: no overflow
    return {"n": int(a.size), "b": b, "c": c, "diff_pp": 100.0 * (c - b) / max(a.size, 1),
            "p_value": min(1.0, 2.0 * tail)}


def paired_bootstrap(correct_a, correct_b, *, num: int = 10_000, seed: int = 0, level: float = 0.95) -> dict:
    """Paired bootstrap (resampling pairs with replacement) of the accuracy difference B - A in percent points:
    the difference, its percentile confidence interval at ``level`` and the fraction of resamples with a
    difference <= 0 (a one-sided bootstrap p-value for "B is better")."""
    a, b = _correctness(correct_a, "correct_a").astype(float), _correctness(correct_b, "correct_b").astype(float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise UserInputError(f"correct_a, correct_b: expected two non-empty 1-d arrays of one length, got {a.shape}, "
                         f"{b.shape}")
    d = b - a
    rng = np.random.default_rng(seed)
    rows = max(1, _DRAWS_PER_CHUNK // d.size)  # [num, n] at once took 16 GB for 10k resamples of 100k pairs
    diffs = 100.0 * np.concatenate([d[rng.integers(0, d.size, (min(rows, num - i), d.size))].mean(-1)
                                    for i in range(0, num, rows)])  # the same draws as one [num, n] call
    lo, hi = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    return {"diff_pp": 100.0 * float(d.mean()), "ci_low": float(lo), "ci_high": float(hi), "level": level,
            "frac_le_0": float(np.mean(diffs <= 0.0))}
