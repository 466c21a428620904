"""TPS predictions of a DriveJudge model on a split's pairs only (2 records per pair, not all 4 per scene).

    python benchmarks/judge_tps_pairs.py MODEL DATA OUT.parquet [--split test] [--batch-size 16]

Writes OUT.parquet with columns id, score_a, score_b, preferred ("a" / "b"), the input of ``jaxdrive eval tps``.
The scores are the expected gated scores (Eq. 14) under the model's untempered gate probabilities, from the same
teacher-forced all-yes conversations (with the text description when the model was trained with it: its
jaxdrive_judge.json) that GRPO trains and evaluates on (``jaxdrive.judge.grpo.pair_scores``); ``jaxdrive judge run``
gives the same scores for these records but judges every record of the split, which is 2x the work when only TPS is
wanted.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import ml_collections
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxdrive.judge.grpo import pair_scores
from jaxdrive.judge.policy import answer_slots
from jaxdrive.judge.recipes import encoder_for, pair_examples
from jaxdrive.train import jobs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="DriveJudge model directory (an SFT / GRPO export_dir)")
    ap.add_argument("data", type=Path, help="DriveJudge set directory (`jaxdrive judge data --out DATA`)")
    ap.add_argument("out", type=Path, help="parquet file to write (id, score_a, score_b, preferred)")
    ap.add_argument("--split", default="test", choices=["train", "test"],
                    help="split whose pairs are judged (default: test)")
    ap.add_argument("--batch-size", type=int, default=16, help="conversations per forward pass (default: 16)")
    ap.add_argument("--max-len", type=int, default=512, help="token length of each conversation (default: 512)")
    args = ap.parse_args(argv)
    mcfg = ml_collections.ConfigDict(dict(kind="pretrained", path=str(args.model), dtype="float32", seed=0))
    tokenizer = jobs.load_tokenizer(mcfg)
    dcfg = ml_collections.ConfigDict(dict(kind="judge_pairs", path=str(args.data), split=args.split,
                                          model_path=str(args.model), describe=None, limit=0, max_len=args.max_len))
    examples = pair_examples(dcfg, tokenizer)
    slots = answer_slots(encoder_for(dcfg, tokenizer))
    scores = pair_scores(jobs.build_model(mcfg), examples, (slots.yes_id, slots.no_id), args.batch_size)
    pref = np.array([e["preferred"] for e in examples])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [e["id"] for e in examples], "score_a": scores[:, 0].tolist(),
                             "score_b": scores[:, 1].tolist(), "preferred": ["b" if p else "a" for p in pref]}),
                   args.out)
    right = np.where(pref == 0, scores[:, 0] > scores[:, 1], scores[:, 1] > scores[:, 0])
    print(f"{args.out}: {len(examples)} pairs, TPS accuracy {100.0 * right.mean():.2f}% ({int(right.sum())} right)")


if __name__ == "__main__":
    main()
