"""The DriveJudge table on labelled scenes held out by scene (issue 49): DQC AUC on the challenging records and on
all, TPS accuracy and gate perfect match of every method, and the paired tests of GRPO against its SFT start.

    python benchmarks/judge_labels_table.py OUT      (OUT as written by benchmarks/judge_labels.sh)

Reads ``OUT/data`` (the set of ``jaxdrive judge data --scenes --labels``: its test split and the records'
``context.challenging``), the baselines' prediction files in ``OUT/data/baselines`` and every judge evaluation
``OUT/eval_<name>/dqc.parquet`` (``jaxdrive judge run``). Rows that are absent are skipped. Significance (GRPO vs its
SFT start): McNemar's exact test on the TPS pairs each orders right, and a paired bootstrap by scene of the
difference in challenging / all DQC AUC (10,000 resamples of the held-out scenes).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from jaxdrive.eval.dqc import roc_auc
from jaxdrive.judge.baselines import oracle_gates
from jaxdrive.judge.dataset import read_pairs, read_records
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.judge.significance import mcnemar_exact

BASELINES = (("epdms", "EPDMS (no judge)"), ("constant", "constant-probability judge (every gate p = c, c fitted)"),
             ("fixed_gates", "one fixed gate vector (fitted, no context)"),
             ("logreg", "non-VLM: logistic regression on the BEV image (paper A.2)"),
             ("logreg_gates", "non-VLM-Agent: per-rule logistic regression on the image, Eq. 14"),
             ("trees", "non-VLM: gradient-boosted trees on sub-scores + context facts"),
             ("direct", "VLM direct score (fine-tuned)"), ("oracle", "oracle gates from the labels (ceiling)"))
JUDGES = (("bev", "DriveJudge SFT, BEV only"), ("sft", "DriveJudge SFT, BEV + description"),
          ("grpo", "DriveJudge SFT -> GRPO, BEV + description"))


class Split:
    def __init__(self, data: Path):
        self.records = read_records(data, "test")
        self.ids = [r.id for r in self.records]
        self.labels = np.array([r.label for r in self.records])
        self.hard = np.array([bool(r.context.get("challenging", False)) for r in self.records])
        self.scene = np.array([r.scene for r in self.records])
        self.pairs = [p for p in read_pairs(data, "test") if p.a_record and p.b_record]
        self.oracle = oracle_gates(self.records)


def _scores(path: Path, ids: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """(scores [N] in ``ids`` order, gates [N, 7] or None) of a DQC prediction file."""
    table = pq.read_table(path).to_pandas().set_index("id").loc[ids]
    gates = (np.stack([table[f"p_{r}"].to_numpy() > 0.5 for r in RULE_LABELS], -1)
             if all(f"p_{r}" in table for r in RULE_LABELS) else None)
    return table["score"].to_numpy(np.float64), gates


def _tps(split: Split, scores: np.ndarray) -> np.ndarray:
    """[P] bool: each pair ordered as preferred (a tie is wrong, as ``eval.dqc.tps_accuracy``)."""
    by_id = dict(zip(split.ids, scores))
    return np.array([(by_id[p.a_record] > by_id[p.b_record]) if p.preferred == "a" else
                     (by_id[p.b_record] > by_id[p.a_record]) for p in split.pairs], bool)


def _aucs(split: Split, scores: np.ndarray, rows: np.ndarray | None = None) -> tuple[float, float]:
    rows = np.arange(len(scores)) if rows is None else rows
    hard = split.hard[rows]
    return 100 * roc_auc(split.labels[rows][hard], scores[rows][hard]), 100 * roc_auc(split.labels[rows], scores[rows])


def _bootstrap(split: Split, a: np.ndarray, b: np.ndarray, num: int = 10_000, seed: int = 0) -> np.ndarray:
    """[num, 2] differences b - a of (challenging, all) AUC over scene resamples."""
    rng = np.random.default_rng(seed)
    scenes = np.unique(split.scene)
    rows_of = {s: np.flatnonzero(split.scene == s) for s in scenes}
    out = []
    for _ in range(num):
        rows = np.concatenate([rows_of[s] for s in rng.choice(scenes, len(scenes))])
        if len(set(split.labels[rows][split.hard[rows]])) < 2:
            continue
        out.append(np.subtract(_aucs(split, b, rows), _aucs(split, a, rows)))
    return np.array(out)


def main(out: Path, num_bootstrap: int = 10_000) -> None:
    split = Split(out / "data")
    rows, found = [], {}
    for key, name in BASELINES:
        path = out / "data" / "baselines" / f"test_dqc_{key}.parquet"
        if path.is_file():
            found[key] = _scores(path, split.ids)[0], (split.oracle if key == "oracle" else None)
            rows.append((key, name))
    for key, name in JUDGES:
        path = out / f"eval_{key}" / "dqc.parquet"
        if path.is_file():
            found[key] = _scores(path, split.ids)
            rows.append((key, name))
    n_hard = int(split.hard.sum())
    print(f"Held-out split: {len(np.unique(split.scene))} scenes, {len(split.ids)} records ({n_hard} challenging), "
          f"{len(split.pairs)} TPS pairs. Percent.\n")
    print(f"| method | DQC AUC, challenging ({n_hard}) | all ({len(split.ids)}) | TPS | gate perfect match |")
    print("|---|---|---|---|---|")
    for key, name in rows:
        scores, gates = found[key]
        hard, every = _aucs(split, scores)
        tps = 100 * _tps(split, scores).mean() if split.pairs else float("nan")
        pm = "-" if gates is None else f"{100 * (gates == split.oracle).all(-1).mean():.2f}"
        print(f"| {name} | {hard:.2f} | {every:.2f} | {tps:.2f} | {pm} |")
    if "sft" in found and "grpo" in found and split.pairs:
        a, b = _tps(split, found["sft"][0]), _tps(split, found["grpo"][0])
        m = mcnemar_exact(a, b)
        diffs = _bootstrap(split, found["sft"][0], found["grpo"][0], num_bootstrap)
        lo, hi = np.percentile(diffs, [2.5, 97.5], axis=0)
        print(f"\nGRPO vs its SFT start: TPS {100 * a.mean():.2f} -> {100 * b.mean():.2f} "
              f"(McNemar exact: {json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in m.items()})}); "
              f"DQC AUC difference, paired scene bootstrap 95% CI: challenging [{lo[0]:+.2f}, {hi[0]:+.2f}], "
              f"all [{lo[1]:+.2f}, {hi[1]:+.2f}]")
    notes = out / "data" / "baselines" / "test_baselines.json"
    if notes.is_file():
        print("\nFitted on the training split: " + "; ".join(f"{k}: {v}" for k, v in json.loads(notes.read_text()).items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the output directory of benchmarks/judge_labels.sh")
    parser.add_argument("--bootstrap", type=int, default=10_000, help="scene resamples of the AUC bootstrap")
    args = parser.parse_args()
    main(args.out, args.bootstrap)
