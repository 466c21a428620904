"""``jaxdrive eval vqa drivelmm | drivemllm | stsbench --predictions FILE.jsonl``: the VQA scorers of
``jaxdrive.eval.vqa`` over a JSONL file of rows. Fields per scorer: drivelmm ``idx``, ``response``, ``gt`` (the
dataset's ``final_answer``); drivemllm ``task``, ``output`` + the task's ground truth; stsbench ``answer``, ``gt``
(the option letter A-E), ``group``, ``scenario``.

Prints the scores as JSON: a score that is not defined (no MCQ item, a task or group with no rows, a non-finite
value) is ``null``, with a warning on stderr. A row that cannot be scored is an error naming its line and field; so
are a file without rows and (drivelmm) an ``idx`` given twice."""
from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from jaxdrive.errors import UserInputError


def add_eval_vqa_subcommand(sub) -> None:
    p = sub.add_parser("vqa", help="score VQA predictions: DriveLMM-o1 MCQ, DriveMLLM (AccS), STSBench")
    p.add_argument("benchmark", choices=["drivelmm", "drivemllm", "stsbench"], help="the benchmark's scorer")
    p.add_argument("--predictions", type=Path, required=True, help="JSONL rows (see `jaxdrive.eval.vqa_cli`)")
    p.set_defaults(func=_run)


def _read_rows(path: Path, benchmark: str) -> list[dict]:
    """The JSON objects of the non-blank lines of ``path`` (at least one; for drivelmm each ``idx`` once), each
    checked by ``vqa.check_row``; ValueError naming the line otherwise."""
    from jaxdrive.datasets.base import first_use, read_jsonl_file
    from jaxdrive.eval import vqa

    rows, first = [], {}
    try:
        for where, row in read_jsonl_file(path):  # not JSON / not an object: an error naming FILE:LINE
            try:
                vqa.check_row(benchmark, row)
            except ValueError as e:
                raise UserInputError(f"{where}: {e}") from None
            if benchmark == "drivelmm":  # an item given twice would be scored twice
                first_use(first, row["idx"], where, "idx")
            rows.append(row)
    except ValueError as e:  # each names FILE:LINE
        raise UserInputError(f"--predictions {e}") from None
    if not rows:
        raise UserInputError(f"--predictions {path}: no rows (expected one JSON object per line)")
    return rows


def _json_ready(value):
    """``value`` with every non-finite float (NaN, inf) replaced by None, through nested dicts."""
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _non_finite(value, path: str = "") -> list[str]:
    """The dotted paths of the non-finite floats in ``value`` (nested dicts)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite(v, f"{path}.{k}" if path else str(k))]
    return [path] if isinstance(value, float) and not math.isfinite(value) else []


def _warnings(benchmark: str, out: dict) -> list[str]:
    """What the printed scores leave out, one line each."""
    lines = []
    if benchmark == "drivelmm" and not out["mcq_items"]:
        lines.append("no MCQ item (question number 2, 3, 4, 5 or 8): mcq_accuracy is null")
    if benchmark == "stsbench" and out["missing_groups"]:
        lines.append(f"no rows for group(s) {out['missing_groups']}: the Average is null")
    if benchmark == "drivemllm" and out["missing_tasks"]:
        lines.append(f"no rows for task(s) {out['missing_tasks']}: their scores and columns are null; AccS averages "
                     f"{out['accs_columns']} only, not the paper's 8 columns")
    bad = _non_finite(out)
    if bad:
        lines.append(f"non-finite {bad} written as null (e.g. an answer 'nan': the reference's float() takes it "
                     "as valid, which makes its task's mean error NaN)")
    return lines


def _run(args) -> int:
    from jaxdrive.eval import vqa

    if args.predictions.is_dir():
        raise UserInputError(f"--predictions {args.predictions}: is a directory; expected a JSONL file")
    if not args.predictions.is_file():
        raise UserInputError(f"--predictions {args.predictions}: no such file")
    rows = _read_rows(args.predictions, args.benchmark)
    if args.benchmark == "drivelmm":
        out = vqa.drivelmm_mcq(rows)
    elif args.benchmark == "stsbench":
        out = vqa.stsbench(rows)
    else:
        by_task = defaultdict(list)
        for r in rows:
            by_task[r["task"]].append(r)
        out = vqa.drivemllm(by_task)
    for line in _warnings(args.benchmark, out):
        print(f"jaxdrive eval vqa {args.benchmark}: warning: {line}", file=sys.stderr)
    print(json.dumps(_json_ready(out), indent=1, allow_nan=False))
    return 0
