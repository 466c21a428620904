"""Baselines a context-aware judge must beat, fitted on the training split only (``jaxdrive judge baselines``):

* ``constant``: every gate p = c (no context, no rule knowledge); the score is the Eq. 14 expectation under those
  probabilities (``gates.expected_score``, as the judge's), c chosen from a grid by the training split's DQC AUC.
  A judge whose AUC a constant reaches has learnt nothing (the soft expectation alone lifts hard zeros).
* ``fixed_gates``: one gate vector of the 128 for every trajectory (context-free rule selection), the one with the
  best DQC AUC on the training split's challenging records (a soft rule broken, no hard one: where gates matter),
  ties to all records' AUC.
* ``trees``: the non-VLM baseline: gradient-boosted trees (scikit-learn ``HistGradientBoostingClassifier``) on the
  sub-scores and the scene-context facts the judge's text states (``context.context_features``), predicting the
  label directly; score = P(reasonable).

Each returns the test records' scores [N] and a short note of what was fitted (written beside the predictions). A
training split of one class (a hand-made set: ``labelled`` sets are checked for both) has no AUC to choose by and
nothing to separate: ``constant`` and ``fixed_gates`` then keep every rule on (EPDMS), ``trees`` scores that class,
and each note says so.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxdrive.eval.dqc import roc_auc
from jaxdrive.judge.baselines import subscores_of
from jaxdrive.judge.dataset import SUBSCORE_KEYS, Record, read_scenes
from jaxdrive.judge.gates import COMBINATIONS, RULE_LABELS, combination_scores, expected_score

CONSTANT_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)


def _auc(labels: np.ndarray, scores: np.ndarray) -> float:
    return roc_auc(labels, scores) if len(set(labels.tolist())) == 2 else float("nan")


def _challenging(records: list[Record]) -> np.ndarray:
    """[N] bool: the record's ``context.challenging`` when the set has it, else a soft rule broken and no hard one
    (the sub-scores: LK, DDC, TTC or HC below 1, NC, DAC and TLC all 1)."""
    def one(r: Record) -> bool:
        if "challenging" in r.context:
            return bool(r.context["challenging"])
        s = r.subscores
        return all(s[m] == 1.0 for m in ("nc", "dac", "tlc")) and any(s[m] < 1.0 for m in ("lk", "ddc", "ttc", "hc"))
    return np.array([one(r) for r in records], bool)


def _one_class(train: list[Record]) -> str | None:
    """The note's words when the training labels are of one class, else None."""
    got = {r.label for r in train}
    return None if len(got) == 2 else f"the training split has only label {got.pop()} (no AUC to fit by)"


def constant_scores(train: list[Record], test: list[Record]) -> tuple[np.ndarray, str]:
    labels = np.array([r.label for r in train])
    if (why := _one_class(train)) is not None:
        return (np.asarray(expected_score(subscores_of(test), np.ones((len(test), 7), np.float32)), np.float64),
                f"every gate p = 1.0 (EPDMS): {why}")
    sub = subscores_of(train)
    aucs = [_auc(labels, np.asarray(expected_score(sub, np.full((len(train), 7), c, np.float32))))
            for c in CONSTANT_GRID]
    c = float(CONSTANT_GRID[int(np.nanargmax(aucs))])
    return (np.asarray(expected_score(subscores_of(test), np.full((len(test), 7), c, np.float32)), np.float64),
            f"every gate p = {c} (training DQC AUC {100 * np.nanmax(aucs):.2f})")


def fixed_gate_scores(train: list[Record], test: list[Record]) -> tuple[np.ndarray, str]:
    labels = np.array([r.label for r in train])
    if (why := _one_class(train)) is not None:
        all_on = len(COMBINATIONS) - 1
        assert COMBINATIONS[all_on].all()
        return (np.asarray(combination_scores(subscores_of(test)))[:, all_on].astype(np.float64),
                f"rules on: {','.join(RULE_LABELS)} (EPDMS): {why}")
    hard = _challenging(train)
    combos = np.asarray(combination_scores(subscores_of(train)))  # [N, 128]
    key = [(_auc(labels[hard], combos[hard, j]), _auc(labels, combos[:, j])) for j in range(len(COMBINATIONS))]
    best = max(range(len(key)), key=lambda j: tuple(-1.0 if np.isnan(x) else x for x in key[j]))
    gates = COMBINATIONS[best]
    scores = np.asarray(combination_scores(subscores_of(test)))[:, best].astype(np.float64)
    on = ",".join(r for r, g in zip(RULE_LABELS, gates) if g) or "none"
    return scores, (f"rules on: {on} (training DQC AUC challenging {100 * key[best][0]:.2f}, "
                    f"all {100 * key[best][1]:.2f})")


def feature_matrix(root: Path, records: list[Record]) -> tuple[list[str], np.ndarray]:
    """(names, [N, F]): the records' sub-scores (EC null -> NaN) and ``context.context_features``."""
    from jaxdrive.judge.context import context_features

    scenes = read_scenes(root, records)
    cache: dict[str, tuple] = {}
    rows, names = [], None
    for r in records:
        if r.scene not in cache:
            cache[r.scene] = context_features(scenes[r.scene])
        names, x = cache[r.scene]
        subs = [np.nan if r.subscores.get(m) is None else r.subscores[m] for m in SUBSCORE_KEYS]
        rows.append(np.concatenate([subs, x[r.proposal]]))
    return list(SUBSCORE_KEYS) + list(names or []), np.array(rows, np.float64)


def tree_scores(root: Path, train: list[Record], test: list[Record], seed: int = 0) -> tuple[np.ndarray, str]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    _, x_train = feature_matrix(root, train)
    _, x_test = feature_matrix(root, test)
    if (why := _one_class(train)) is not None:  # (the classifier fits one class, and predict_proba[:, 1] is ~0)
        return np.full(len(test), float(train[0].label)), f"P(reasonable) = {train[0].label} for every record: {why}"
    # a feature without a value in training (EC undefined on every record, a fact no scene has) tells nothing, and
    # sklearn's binning fails on it ("window shape cannot be larger than input array shape")
    known = ~np.isnan(x_train).all(axis=0)
    x_train, x_test = x_train[:, known], x_test[:, known]
    model = HistGradientBoostingClassifier(max_iter=300, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=10,
                                           random_state=seed)
    model.fit(x_train, np.array([r.label for r in train]))
    return (model.predict_proba(x_test)[:, 1].astype(np.float64),
            f"gradient-boosted trees on {x_train.shape[1]} sub-score and context features ({int((~known).sum())} "
            f"without a value in training left out), {len(train)} records")


def context_baseline_scores(root: Path, train: list[Record], test: list[Record]) -> dict[str, tuple[np.ndarray, str]]:
    """{method: (test scores [N], note)} of ``constant``, ``fixed_gates`` and ``trees``."""
    return {"constant": constant_scores(train, test), "fixed_gates": fixed_gate_scores(train, test),
            "trees": tree_scores(root, train, test)}
