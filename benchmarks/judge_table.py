"""The DriveJudge synthetic-set table: gate perfect match, DQC AUC and TPS accuracy of every method, held-out split.

    python benchmarks/judge_table.py OUT     (OUT as written by benchmarks/judge_synthetic.sh)

Rows: the majority gate vector of the training split (for every record), EPDMS (every gate on), the oracle gates of
Eq. 10-11 (the ceiling), the non-VLM classifiers (logistic regression on image embeddings: direct label and per-rule
gates), the VLM direct-score baseline, DriveJudge zero-shot / SFT short / SFT / SFT with more steps from the SFT
model / GRPO from SFT short / GRPO from SFT (``benchmarks/judge_synthetic.sh``; directories that are absent are
skipped). Perfect match: all seven gates equal
the Eq. 10-11 labels (paper D.2; methods without gates show "-"). Metrics from ``jaxdrive.eval.dqc`` (percent).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from jaxdrive.eval.dqc import dqc_metrics, tps_accuracy
from jaxdrive.judge.baselines import oracle_gates, subscores_of
from jaxdrive.judge.classifier import _fit, image_embeddings
from jaxdrive.judge.dataset import read_pairs, read_records
from jaxdrive.judge.gates import RULE_LABELS, rule_gated_score


def _row(name, records, pairs, scores, gates=None):
    by_id = dict(zip([r.id for r in records], scores))
    pm = "-" if gates is None else f"{100.0 * np.mean((gates == oracle_gates(records)).all(-1)):.2f}"
    auc = dqc_metrics(np.asarray(scores), np.array([r.label for r in records]))["auc"]
    tps = tps_accuracy([by_id[p.a_record] for p in pairs], [by_id[p.b_record] for p in pairs],
                       [p.preferred for p in pairs]) if pairs else float("nan")
    return f"| {name} | {pm} | {auc:.2f} | {tps:.2f} |"


def main(out: Path) -> None:
    data = out / "data"
    train, test = read_records(data, "train"), read_records(data, "test")
    pairs = [p for p in read_pairs(data, "test") if p.a_record and p.b_record]
    sub = subscores_of(test)
    truth = oracle_gates(test)
    vectors, counts = np.unique(oracle_gates(train), axis=0, return_counts=True)
    majority = np.broadcast_to(vectors[np.argmax(counts)], truth.shape)
    all_on = np.ones_like(truth)
    x_train, x_test = image_embeddings(data, train), image_embeddings(data, test)
    logreg_gates = np.stack([_fit(x_train, np.array([r.gates[g] for r in train]))(x_test) > 0.5
                             for g in RULE_LABELS], -1)
    read = lambda p: pq.read_table(p).to_pydict()  # noqa: E731
    rows = [_row("majority gates", test, pairs, np.asarray(rule_gated_score(sub, majority)), majority),
            _row("EPDMS (all gates on)", test, pairs, [r.subscores["epdms"] for r in test], all_on),
            _row("oracle gates (ceiling)", test, pairs, np.asarray(rule_gated_score(sub, truth)), truth),
            _row("non-VLM (logreg, label)", test, pairs, read(data / "baselines/test_dqc_logreg.parquet")["score"]),
            _row("non-VLM-Agent (logreg gates)", test, pairs, np.asarray(rule_gated_score(sub, logreg_gates)),
                 logreg_gates)]
    direct = data / "baselines/test_dqc_direct.parquet"
    if direct.exists():
        rows.append(_row("VLM direct score (SFT)", test, pairs, read(direct)["score"]))
    for name, d in (("DriveJudge zero-shot", "zero_shot"), ("DriveJudge SFT, short", "sft_short"),
                    ("DriveJudge SFT", "sft"), ("DriveJudge SFT, more steps (sft_long)", "sft_long"),
                    ("DriveJudge SFT short + GRPO", "grpo"), ("DriveJudge SFT + GRPO", "grpo_sft")):
        path = out / d / "dqc.parquet"
        if path.exists():
            cols = read(path)
            assert cols["id"] == [r.id for r in test], f"{path}: records differ from the test split"
            gates = np.stack([np.asarray(cols[f"p_{g}"]) > 0.5 for g in RULE_LABELS], -1)
            rows.append(_row(name, test, pairs, cols["score"], gates))
    print(f"held-out: {len(test)} records, {len(pairs)} pairs ({len(train)} training records)\n")
    print("| method | gate perfect match % | DQC AUC % | TPS accuracy % |\n|---|---|---|---|")
    print("\n".join(rows))


def parse_out(argv: list[str] | None = None) -> Path:
    """OUT from the command line; a usage error (exit 2) unless it holds the synthetic set (OUT/data/records.jsonl)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="output directory of benchmarks/judge_synthetic.sh (OUT/data: the set; "
                    "OUT/<run>/dqc.parquet: the judges)")
    out = ap.parse_args(argv).out
    if not (out / "data" / "records.jsonl").is_file():
        ap.error(f"out {out}: no data/records.jsonl (run `bash benchmarks/judge_synthetic.sh {out}` first)")
    return out


if __name__ == "__main__":
    main(parse_out())
