"""TPS on a large held-out split: every baseline, the SFT judges, the GRPO runs, and paired tests of each GRPO run
against the SFT model it started from.

    python benchmarks/judge_grpo_table.py OUT        (OUT as written by benchmarks/judge_grpo.sh)

Reads the held-out split (the test split of OUT/heldout when it exists, i.e. a run with HELD_SEED, else of OUT/data)
and its baselines/test_tps_*.parquet (``jaxdrive judge baselines``),
OUT/<run>/tps.parquet for the judges (``benchmarks/judge_tps_pairs.py``), OUT/<run>/dqc.parquet when a judge was
also run on every held-out record (``jaxdrive judge run``: gate perfect match, DQC AUC), and OUT/<grpo run>/start
(the name of the SFT run a GRPO run started from). Paired tests (``jaxdrive.judge.significance``) compare the same
pairs: McNemar's exact test on the discordant pairs (b = start right / GRPO wrong, c = start wrong / GRPO right)
and a 10,000-resample paired bootstrap 95% interval of the TPS difference. A tie counts as wrong.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from jaxdrive.eval.dqc import dqc_metrics
from jaxdrive.judge.baselines import oracle_gates
from jaxdrive.judge.dataset import read_pairs, read_records
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.judge.significance import mcnemar_exact, paired_bootstrap

BASELINES = (("EPDMS (all gates on)", "epdms"), ("ADE", "ade"), ("FDE", "fde"),
             ("non-VLM (logreg on image, label)", "logreg"), ("non-VLM-Agent (logreg on image, gates)", "logreg_gates"),
             ("VLM direct score, fine-tuned", "direct"), ("oracle gates, Eq. 10-11 (ceiling)", "oracle"))
SFT_RUNS = (("DriveJudge SFT short (150 steps)", "sft_short"), ("DriveJudge SFT (300 steps)", "sft"),
            ("DriveJudge SFT long (600 steps)", "sft_long"))


def correct_of(path: Path, pair_ids: list[str]) -> np.ndarray:
    """Per-pair correctness (tie = wrong) of a TPS prediction parquet, in ``pair_ids`` order."""
    cols = pq.read_table(path).to_pydict()
    by_id = {i: (a, b, p) for i, a, b, p in zip(cols["id"], cols["score_a"], cols["score_b"], cols["preferred"])}
    missing = [i for i in pair_ids if i not in by_id]
    if missing:
        raise ValueError(f"{path}: {len(missing)} held-out pairs missing (e.g. {missing[0]})")
    return np.array([(by_id[i][0] > by_id[i][1]) if by_id[i][2] == "a" else (by_id[i][1] > by_id[i][0])
                     for i in pair_ids])


def dqc_cols(path: Path, test) -> tuple[str, str]:
    """(gate perfect match %, DQC AUC %) of a ``jaxdrive judge run`` dqc.parquet, or ("-", "-")."""
    if not path.exists():
        return "-", "-"
    cols = pq.read_table(path).to_pydict()
    assert cols["id"] == [r.id for r in test], f"{path}: records differ from the test split"
    gates = np.stack([np.asarray(cols[f"p_{g}"]) > 0.5 for g in RULE_LABELS], -1)
    pm = 100.0 * np.mean((gates == oracle_gates(test)).all(-1))
    auc = dqc_metrics(np.asarray(cols["score"]), np.array([r.label for r in test]))["auc"]
    return f"{pm:.2f}", f"{auc:.2f}"


def main(out: Path) -> None:
    data = out / "heldout" if (out / "heldout" / "records.jsonl").exists() else out / "data"
    test = read_records(data, "test")
    pairs = [p for p in read_pairs(data, "test") if p.a_record and p.b_record]
    ids = [p.id for p in pairs]
    n = len(ids)
    print(f"held-out: {len({r.scene for r in test})} scenes, {len(test)} records, {n} pairs "
          f"(data: {data}; GRPO pairs: {out / 'grpo_data'})\n")
    print("| method | TPS accuracy % (right / pairs) | gate perfect match % | DQC AUC % |\n|---|---|---|---|")
    correct = {}
    for label, key in BASELINES:
        path = data / "baselines" / f"test_tps_{key}.parquet"
        if path.exists():
            c = correct[key] = correct_of(path, ids)
            dqc = data / "baselines" / f"test_dqc_{key}.parquet"
            auc = (f"{dqc_metrics(*(np.asarray(v) for v in pq.read_table(dqc).select(['score', 'label']).to_pydict().values()))['auc']:.2f}"
                   if dqc.exists() else "-")
            print(f"| {label} | {100 * c.mean():.2f} ({int(c.sum())} / {n}) | - | {auc} |")
    runs = [(label, d) for label, d in SFT_RUNS if (out / d / "tps.parquet").exists()]
    runs += [(f"DriveJudge {d.name} (from {(d / 'start').read_text().strip()})", d.name)
             for d in sorted(out.glob("grpo*")) if (d / "tps.parquet").exists() and (d / "start").exists()]
    for label, d in runs:
        c = correct[d] = correct_of(out / d / "tps.parquet", ids)
        pm, auc = dqc_cols(out / d / "dqc.parquet", test)
        print(f"| {label} | {100 * c.mean():.2f} ({int(c.sum())} / {n}) | {pm} | {auc} |")
    print("\nPaired tests on the same held-out pairs (GRPO run vs the SFT model it started from):\n")
    print("| GRPO run | start | start TPS % | GRPO TPS % | b: start right, GRPO wrong | c: start wrong, GRPO right "
          "| diff pp | McNemar exact p | paired bootstrap 95% CI (pp) |\n|---|---|---|---|---|---|---|---|---|")
    for _, d in runs:
        if not d.startswith("grpo"):
            continue
        start = (out / d / "start").read_text().strip()
        if start not in correct:
            continue
        a, b = correct[start], correct[d]
        m, bs = mcnemar_exact(a, b), paired_bootstrap(a, b)
        print(f"| {d} | {start} | {100 * a.mean():.2f} | {100 * b.mean():.2f} | {m['b']} | {m['c']} | "
              f"{m['diff_pp']:+.2f} | {m['p_value']:.3g} | [{bs['ci_low']:+.2f}, {bs['ci_high']:+.2f}] |")

    print("\nTraining signal (OUT/<run>_run/metrics.jsonl, logged steps): share of rollout groups with zero reward "
          "variance in the rolled-out pool and in the trained batch, KL to the SFT policy at the end, validation TPS "
          "(the GRPO data's test pairs: unseen seed-3 scenes) at the start and the end:\n")
    print("| GRPO run | zero-variance groups, pool | zero-variance groups, trained batch | final KL | validation TPS % "
          "start -> end |\n|---|---|---|---|---|")
    for _, d in runs:
        path = out / f"{d}_run" / "metrics.jsonl"
        if not d.startswith("grpo") or not path.exists():
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        train = [r for r in rows if "train/zero_std_frac" in r]
        val = [r["eval/tps/tps_accuracy"] for r in rows if "eval/tps/tps_accuracy" in r]
        pool = np.mean([r["train/zero_std_frac"] for r in train])
        batch = np.mean([r.get("train/batch_zero_std_frac", r["train/zero_std_frac"]) for r in train])
        print(f"| {d} | {pool:.2f} | {batch:.2f} | {train[-1]['train/kl']:.3f} | "
              f"{val[0]:.2f} -> {val[-1]:.2f} |" if val else f"| {d} | {pool:.2f} | {batch:.2f} | - | - |")


def parse_out(argv: list[str] | None = None) -> Path:
    """OUT from the command line; a usage error (exit 2) unless it holds a held-out split (OUT/heldout or
    OUT/data with records.jsonl)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="output directory of benchmarks/judge_grpo.sh (OUT/heldout or OUT/data: "
                    "the held-out split; OUT/<run>: the judges)")
    out = ap.parse_args(argv).out
    if not any((out / d / "records.jsonl").is_file() for d in ("heldout", "data")):
        ap.error(f"out {out}: no heldout/records.jsonl or data/records.jsonl (run `bash benchmarks/judge_grpo.sh "
                 f"{out}` first)")
    return out


if __name__ == "__main__":
    main(parse_out())
