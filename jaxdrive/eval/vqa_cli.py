"""``jaxdrive eval vqa drivelmm | drivemllm | stsbench --predictions FILE.jsonl``: the VQA scorers of
``jaxdrive.eval.vqa`` over a JSONL file of rows (fields per scorer: drivelmm ``idx``, ``response``, ``gt``;
drivemllm ``task``, ``output`` + the task's ground truth; stsbench ``answer``, ``gt``, ``group``, ``scenario``)."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def add_eval_vqa_subcommand(sub) -> None:
    p = sub.add_parser("vqa", help="score VQA predictions: DriveLMM-o1 MCQ, DriveMLLM (AccS), STSBench")
    p.add_argument("benchmark", choices=["drivelmm", "drivemllm", "stsbench"], help="the benchmark's scorer")
    p.add_argument("--predictions", type=Path, required=True, help="JSONL rows (see `jaxdrive.eval.vqa_cli`)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from jaxdrive.eval import vqa

    if not args.predictions.is_file():
        raise ValueError(f"--predictions {args.predictions}: no such file")
    rows = []
    with open(args.predictions) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"--predictions {args.predictions}:{n}: not JSON ({e})") from None
    try:
        if args.benchmark == "drivelmm":
            out = vqa.drivelmm_mcq(rows)
        elif args.benchmark == "stsbench":
            out = vqa.stsbench(rows)
        else:
            by_task = defaultdict(list)
            for r in rows:
                by_task[r["task"]].append(r)
            unknown = sorted(set(by_task) - set(vqa.DRIVEMLLM_TASKS))
            if unknown:
                raise ValueError(f"--predictions: unknown task(s) {unknown} (known: {list(vqa.DRIVEMLLM_TASKS)})")
            out = vqa.drivemllm(by_task)
    except KeyError as e:
        raise ValueError(f"--predictions {args.predictions}: a row lacks the field {e} that {args.benchmark} needs") \
            from None
    print(json.dumps(out, indent=1))
    return 0
