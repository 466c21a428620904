"""Driving Quality Classification (DriveJudge Sec. 3.1) and Trajectory Preference Selection (Sec. 3.2) metrics.

Conventions (scikit-learn 1.9.1's, ``spec/eval-protocols.md`` §E; equal to ``roc_auc_score``,
``average_precision_score`` and ``balanced_accuracy_score`` on the same inputs, ties included):

* ``acc_tau``: mean of [score > tau] == label (Eq. 1; label 1 = reasonable driving).
* ``bacc_tau``: balanced accuracy of the same predictions: the mean recall over the classes present in the labels
  (a single-class label set gives that class's recall, as scikit-learn).
* ``auc``: ROC AUC with reasonable = positive, ties counted 1/2 (Mann-Whitney); NaN when only one class is present.
* ``ap_pos``: average precision of reasonable ranked by score; ``ap_neg``: of failures ranked by -score. Step-wise
  sum over distinct thresholds, no interpolation; 0 when the class is absent (scikit-learn warns and returns 0;
  with every sample in the class it is 1).
* TPS ``accuracy``: mean of [argmax(score_a, score_b) == preferred]; a tie (score_a == score_b) counts as wrong.

All values in percent; undefined values (NaN) are written to JSON as null.
"""
from __future__ import annotations

import numpy as np

from jaxdrive.errors import UserInputError

DQC_TAUS = (0.7, 0.8, 0.9)


def _check_binary(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """(labels int64, scores) checked. Float scores keep their dtype: ``score > tau`` then compares in it, as numpy
    and sklearn on the same column do (a float32 0.8 is not above tau = 0.8; widened to float64 it was)."""
    y = np.asarray(labels)
    s = np.asarray(scores)
    if not (np.issubdtype(s.dtype, np.number) and not np.issubdtype(s.dtype, np.complexfloating)):
        raise UserInputError(f"score: expected numbers, got dtype {s.dtype}")
    s = s if np.issubdtype(s.dtype, np.floating) else s.astype(np.float64)
    if y.ndim != 1 or s.shape != y.shape:
        raise UserInputError(f"label/score: expected two 1-D columns of one length, got {y.shape} and {s.shape}")
    if y.size == 0:
        raise UserInputError("predictions: expected at least one row, got none")
    if not np.isin(y, (0, 1)).all():
        raise UserInputError(f"label: expected 0/1 (1 = reasonable, 0 = failure), got values {np.unique(y)[:5]}")
    if not np.isfinite(s).all():
        raise UserInputError(f"score: expected finite values, got {int((~np.isfinite(s)).sum())} NaN/inf")
    return y.astype(np.int64), s


def roc_auc(labels, scores) -> float:
    """ROC AUC (positive = 1) as the Mann-Whitney statistic with ties 1/2; NaN with a single class."""
    y, s = _check_binary(labels, scores)
    pos, neg = int(y.sum()), int(len(y) - y.sum())
    if pos == 0 or neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # average ranks, 1-based
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def average_precision(labels, scores) -> float:
    """AP = sum_n (R_n - R_{n-1}) P_n over distinct thresholds in decreasing order (positive = 1)."""
    y, s = _check_binary(labels, scores)
    pos = int(y.sum())
    if pos == 0:
        return 0.0
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s_sorted)), len(s) - 1]  # the last index of each distinct score
    tp = np.cumsum(y_sorted)[last]
    precision = tp / (last + 1.0)
    recall_gain = np.diff(np.r_[0, tp]) / pos
    return float(max(0.0, np.sum(recall_gain * precision)))


def balanced_accuracy(labels, predictions) -> float:
    """Mean recall over the classes present in ``labels``."""
    y = np.asarray(labels).astype(np.int64)
    p = np.asarray(predictions).astype(np.int64)
    return float(np.mean([np.mean(p[y == c] == c) for c in np.unique(y)]))


def dqc_metrics(scores, labels, taus=DQC_TAUS) -> dict[str, float]:
    """{acc_tau, bacc_tau for each tau, auc, ap_pos, ap_neg}, all in percent (NaN where undefined)."""
    y, s = _check_binary(labels, scores)
    out = {}
    for tau in taus:
        pred = (s > tau).astype(np.int64)
        out[f"acc_{tau}"] = 100.0 * float(np.mean(pred == y))
    for tau in taus:
        out[f"bacc_{tau}"] = 100.0 * balanced_accuracy(y, (s > tau).astype(np.int64))
    out["auc"] = 100.0 * roc_auc(y, s)
    out["ap_pos"] = 100.0 * average_precision(y, s)
    out["ap_neg"] = 100.0 * average_precision(1 - y, -s)
    return out


def roc_curve_points(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) at each distinct threshold, from (0, 0) (for plots)."""
    y, s = _check_binary(labels, scores)
    order = np.argsort(-s, kind="mergesort")
    last = np.r_[np.flatnonzero(np.diff(s[order])), len(s) - 1]
    tp = np.cumsum(y[order])[last]
    fp = last + 1 - tp
    return np.r_[0.0, fp / max(fp[-1], 1)], np.r_[0.0, tp / max(tp[-1], 1)]


def pr_curve_points(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """(recall, precision) at each distinct threshold in decreasing order (for plots)."""
    y, s = _check_binary(labels, scores)
    order = np.argsort(-s, kind="mergesort")
    last = np.r_[np.flatnonzero(np.diff(s[order])), len(s) - 1]
    tp = np.cumsum(y[order])[last]
    return tp / max(int(y.sum()), 1), tp / (last + 1.0)


def tps_accuracy(score_a, score_b, preferred) -> float:
    """Eq. 3 in percent: mean [argmax(score_a, score_b) == preferred]; ties are wrong."""
    for name, col in (("score_a", score_a), ("score_b", score_b)):
        dtype = np.asarray(col).dtype
        if not np.issubdtype(dtype, np.number) or np.issubdtype(dtype, np.complexfloating):
            raise UserInputError(f"{name}: expected numbers, got dtype {dtype}")
    a, b = np.asarray(score_a, np.float64), np.asarray(score_b, np.float64)
    pref = np.asarray(preferred).astype(str)
    if a.ndim != 1 or a.shape != b.shape or pref.shape != a.shape:
        raise UserInputError(f"score_a/score_b/preferred: expected three 1-D columns of one length, got {a.shape}, "
                         f"{b.shape}, {pref.shape}")
    if a.size == 0:
        raise UserInputError("predictions: expected at least one row, got none")
    if not np.isin(pref, ("a", "b")).all():
        raise UserInputError(f"preferred: expected 'a' or 'b', got values {np.unique(pref)[:5]}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise UserInputError("score_a/score_b: expected finite values")
    correct = np.where(pref == "a", a > b, b > a)
    return 100.0 * float(np.mean(correct))
