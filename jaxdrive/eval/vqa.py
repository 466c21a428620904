"""VQA benchmark scorers, exactly as their reference scripts score (``shared/spec/eval-protocols.md`` §C).

* DriveLMM-o1 (``evaluation/evaluation_script.py``): MCQ items are those whose id ends in 2, 3, 4, 5 or 8; the final
  answer of a response is the text after the last occurrence of the first marker (in a fixed order) present in it; the
  letter is the first ``X) ...`` match in that final answer ('F' for "none of the ...", else 'none'). The ground truth
  is the dataset's ``final_answer`` ("A) Slow down ..."), whose letter is read the same way but without the marker
  step. Accuracy over MCQ items.
* DriveMLLM (``evaluation/eval_from_json.py``): the answer inside ``<OUTPUT FORMAT START>..<OUTPUT FORMAT END>``,
  validated per task; scores over valid outputs only; ``effective_ratio = valid / expected``. The paper's eight
  columns: PPos, BBox, L/R, F/B, CVD (dA), CD (dz), RD (dAB), RHD (dx); AccS = their arithmetic mean. The reference
  scores left / right and front / behind separately; L/R and F/B here are the means of those pairs (the reference does
  not say how the papers combine them).
* STSBench (``eval/eval.py``): correct iff the first character of the raw answer equals the ground-truth letter's
  (case-insensitive); accuracy per scenario type, macro-averaged within each of the 4 groups, then over the groups.
  An empty answer is incorrect (the reference would fail on it); a ground truth that is not an option letter A-E
  (alone or before the option's text) is an error, not a question nobody can answer.

Every row is checked before scoring: a missing field, a field of the wrong JSON type or a malformed ground truth is a
ValueError naming the row and the field (``check_row`` checks one row of a benchmark). A score that is not defined
(no MCQ item, a task or group with no rows) is None.
"""
from __future__ import annotations

import ast
import math
import re
from collections import defaultdict
from typing import Callable, Iterable, Iterator, Sequence

from jaxdrive.errors import UserInputError
from jaxdrive.json_values import is_finite_number


def _need(row, fields: dict[str, type]) -> None:
    """Raise ValueError naming the first of ``fields`` (name -> JSON type) that ``row`` lacks or holds as another
    type (or saying that ``row`` is not a JSON object)."""
    if not isinstance(row, dict):
        raise UserInputError(f"expected a JSON object, got {type(row).__name__} ({row!r:.40})")
    for name, kind in fields.items():
        if name not in row:
            raise UserInputError(f"lacks the field {name!r}")
        if not isinstance(row[name], kind):
            raise UserInputError(f"{name}: expected {kind.__name__}, got {type(row[name]).__name__} ({row[name]!r:.40})")


def _rows(rows: Iterable, check: Callable) -> Iterator[tuple]:
    """(row, ``check(row)``) for each row; a ValueError from ``check`` is raised again naming the row (1-based)."""
    for i, r in enumerate(rows, 1):
        try:
            checked = check(r)
        except ValueError as e:
            raise UserInputError(f"row {i}: {e}") from None
        yield r, checked


def check_row(benchmark: str, row) -> None:
    """Raise ValueError when ``row`` cannot be scored by ``benchmark`` ('drivelmm', 'drivemllm' or 'stsbench'):
    a missing field, one of the wrong type, a malformed ground truth, an unknown task or group."""
    if benchmark == "drivelmm":
        _drivelmm_row(row)
    elif benchmark == "stsbench":
        _stsbench_row(row)
    elif benchmark == "drivemllm":
        _need(row, {"task": str})
        if row["task"] not in DRIVEMLLM_TASKS:
            raise UserInputError(f"task: expected one of {DRIVEMLLM_TASKS}, got {row['task']!r}")
        _drivemllm_gt(row["task"], row)
    else:
        raise UserInputError(f"benchmark: expected drivelmm, drivemllm or stsbench, got {benchmark!r}")


# ----------------------------------------------------------------------------------------------------------------------
# DriveLMM-o1
# ----------------------------------------------------------------------------------------------------------------------

DRIVELMM_MARKERS = ("The final answer is:", "**Final Answer:**", "Final Answer", "Answer", "Why take this action?:",
                    "**Final Answer**", "**Final Decision**:", "Final Step:", "<CONCLUSION>")
DRIVELMM_MCQ_NUMBERS = {2, 3, 4, 5, 8}
_OPTION = re.compile(r"([A-F])\)\s*(.+)")


def drivelmm_is_mcq(idx: str) -> bool:
    """Whether the item ``<scene>_<sample>_<question number>`` is a multiple-choice one; ValueError naming ``idx``
    when the part after its last "_" is not a whole number."""
    try:
        number = int(str(idx).rsplit("_", 1)[-1])
    except ValueError:
        raise UserInputError(f"idx: expected '<scene>_<sample>_<question number>', got {idx!r}") from None
    return number in DRIVELMM_MCQ_NUMBERS


def drivelmm_final_answer(text: str) -> str:
    """Text after the last occurrence of the first marker (in ``DRIVELMM_MARKERS`` order) found in ``text``; ''."""
    for marker in DRIVELMM_MARKERS:
        if marker in text:
            return text.split(marker)[-1]
    return ""


def drivelmm_option(text: str) -> str:
    """The option letter of a final answer (the reference's ``extract_options``): the first ``X) ...`` match,
    'A'..'F'; else 'F' when it says "none of the ...", else 'none'."""
    hits = _OPTION.findall(text)
    if hits:
        return hits[0][0]
    return "F" if "none of the " in text.lower() else "none"


def drivelmm_letter(text: str) -> str:
    """The option letter of a full response: ``drivelmm_option`` of its final answer."""
    return drivelmm_option(drivelmm_final_answer(text))


def _drivelmm_row(row) -> bool:
    _need(row, {"idx": str, "response": str, "gt": str})
    return drivelmm_is_mcq(row["idx"])


def drivelmm_mcq(rows: Iterable[dict]) -> dict:
    """MCQ accuracy over rows ``{"idx", "response", "gt"}`` (gt: the dataset's ``final_answer``, e.g. "A) Slow
    down."); ``mcq_accuracy`` is None when no row is an MCQ item."""
    marks = [float(drivelmm_letter(r["response"]) == drivelmm_option(r["gt"]))
             for r, mcq in _rows(rows, _drivelmm_row) if mcq]
    return {"mcq_accuracy": sum(marks) / len(marks) if marks else None, "mcq_items": len(marks)}


# ----------------------------------------------------------------------------------------------------------------------
# DriveMLLM
# ----------------------------------------------------------------------------------------------------------------------

DRIVEMLLM_TASKS = ("xy", "box", "left", "right", "front", "behind", "dA", "dz", "dAB", "dx")
DRIVEMLLM_EXPECTED = dict(zip(DRIVEMLLM_TASKS, (880, 880, 191, 191, 191, 191, 880, 880, 191, 191)))
_PAIR = {"objects": list, "descriptions": list}
_ONE, _TWO = {"xyz1": list}, {"xyz1": list, "xyz2": list}
DRIVEMLLM_FIELDS = {"xy": {"gt": list}, "box": {"gt": list}, "left": _PAIR, "right": _PAIR, "front": _TWO,
                    "behind": _TWO, "dA": _ONE, "dz": _ONE, "dAB": _TWO, "dx": _TWO}  # each task's ground truth
PAPER_COLUMNS = ("PPos", "BBox", "L/R", "F/B", "CVD", "CD", "RD", "RHD")
_COLUMN_TASKS = dict(zip(PAPER_COLUMNS, (("xy",), ("box",), ("left", "right"), ("front", "behind"), ("dA",), ("dz",),
                                          ("dAB",), ("dx",))))
_FORMAT = re.compile(r"<OUTPUT FORMAT START>(.*?)<OUTPUT FORMAT END>", re.DOTALL)


def _get_score(err: float, k: float) -> float:
    return 1.0 / (1.0 + k * err)


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _parse(task: str, content: str, item: dict):
    """The validated answer of one output, or raise (ValueError / SyntaxError / TypeError / AssertionError)."""
    w, h = item.get("width", 1600), item.get("height", 900)
    if task == "xy":
        xy = ast.literal_eval(content.strip())
        assert 0 <= xy[0] <= w - 1 and 0 <= xy[1] <= h - 1
        return xy
    if task == "box":
        b = ast.literal_eval(content.strip())
        assert all(0 <= b[i] <= (w if i % 2 == 0 else h) - 1 for i in range(4))
        return b
    if task in ("left", "right"):
        obj = content.strip().replace("the ", "")
        assert obj in item["descriptions"]
        return obj
    if task in ("front", "behind"):
        v = content.strip()
        assert v in ("Yes", "No")
        return v
    return float(content.strip())


def _numbers(v, n: int, name: str) -> list[float]:
    """The first ``n`` entries of ``v`` as floats; ValueError naming ``name`` unless ``v`` is a list of at least
    ``n`` finite numbers (a NaN or infinite ground truth makes its task's mean error NaN or inf)."""
    ok = isinstance(v, (list, tuple)) and len(v) >= n
    if not (ok and all(is_finite_number(x) for x in v[:n])):
        raise UserInputError(f"{name}: expected a list of at least {n} numbers, all finite, got {v!r:.60}")
    return [float(x) for x in v[:n]]


def _image_size(item: dict) -> None:
    """The optional ``width`` / ``height`` of an item (pixels; the image bounds of xy / box answers) are positive
    numbers: another value made every answer of the item invalid, silently."""
    for name in ("width", "height"):
        if name in item and not (is_finite_number(item[name]) and item[name] > 0):
            raise UserInputError(f"{name}: expected a positive number of pixels, got {item[name]!r:.40}")


def _gt(task: str, item: dict):
    if task == "xy":
        return _numbers(item["gt"], 2, "gt")
    if task == "box":
        return _numbers(item["gt"], 4, "gt")
    if task in ("left", "right"):
        pair = item["objects"]
        if len(pair) != 2 or not all(isinstance(o, (list, tuple)) and len(o) == 2 for o in pair):
            raise UserInputError(f"objects: expected [[description, [x, y]], [description, [x, y]]], got {pair!r:.60}")
        (d1, p1), (d2, p2) = pair
        x1, x2 = _numbers(p1, 1, "objects")[0], _numbers(p2, 1, "objects")[0]
        return d1 if (x1 < x2 if task == "left" else x1 > x2) else d2
    a = _numbers(item["xyz1"], 3, "xyz1")
    if task == "dA":
        return math.sqrt(sum(v * v for v in a))
    if task == "dz":
        return a[2]
    b = _numbers(item["xyz2"], 3, "xyz2")
    if task == "front":
        return "Yes" if a[2] < b[2] else "No"
    if task == "behind":
        return "Yes" if a[2] > b[2] else "No"
    if task == "dAB":
        return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    return abs(a[0] - b[0])


def _drivemllm_gt(task: str, item):
    """The ground truth of one item of ``task``, after checking its ``output`` and ground-truth fields."""
    _need(item, {"output": str, **DRIVEMLLM_FIELDS[task]})
    _image_size(item)
    return _gt(task, item)


def drivemllm_task_score(task: str, items: Sequence[dict], expected: int | None = None) -> dict:
    """Score of one task over items ``{"output": raw text, + ground truth}``; ground truth per task: xy/box ``gt``;
    left/right ``objects`` [(description, [x, y]), (description, [x, y])] and ``descriptions``; front/behind/dAB/dx
    ``xyz1`` and ``xyz2``, dA/dz ``xyz1``, camera frame (m). Returns {score (0-100, 2 decimals), valid, matched, total,
    effective_ratio (percent of ``expected``; None when it is 0)}; ValueError naming the item (1-based) and the field
    when a field is missing or malformed."""
    if task not in DRIVEMLLM_TASKS:
        raise UserInputError(f"task: expected one of {DRIVEMLLM_TASKS}, got {task!r}")
    matched, valid = 0, []
    for it, gt in _rows(items, lambda r: _drivemllm_gt(task, r)):
        m = _FORMAT.search(it["output"])
        if not m:
            continue
        matched += 1
        try:
            valid.append((_parse(task, m.group(1).strip(), it), gt))
        except (ValueError, SyntaxError, TypeError, AssertionError, IndexError, KeyError, MemoryError, RecursionError):
            continue
    if not valid:
        score = 0.0
    elif task == "xy":
        err = sum(math.dist(v[:2], gt) for v, gt in valid) / len(valid)
        score = round(_get_score(err, 0.005) * 100, 2)
    elif task == "box":
        score = round(sum(box_iou(gt, v) for v, gt in valid) / len(valid) * 100, 2)
    elif task in ("left", "right", "front", "behind"):
        score = round(sum(v == gt for v, gt in valid) / len(valid) * 100, 2)
    else:
        err = sum(abs(v - gt) for v, gt in valid) / len(valid)
        score = round(_get_score(err, 0.05) * 100, 2)
    exp = DRIVEMLLM_EXPECTED[task] if expected is None else expected
    return {"score": score, "valid": len(valid), "matched": matched, "total": len(items),
            "effective_ratio": len(valid) / exp * 100 if exp else None}


def drivemllm_columns(task_scores: dict[str, float | None]) -> dict[str, float | None]:
    """The paper's eight columns from the task scores (0-100), None where a task they need is absent or None (L/R
    and F/B need both of their pair), plus AccS: the paper's (``accs``) when all eight are present, else the mean
    of the columns present (None when none is)."""
    cols = {}
    for col, tasks in _COLUMN_TASKS.items():
        scores = [task_scores.get(t) for t in tasks]
        cols[col] = None if None in scores else sum(scores) / len(scores)
    present = [cols[c] for c in PAPER_COLUMNS if cols[c] is not None]
    if len(present) == len(PAPER_COLUMNS):
        cols["AccS"] = accs(present)
    else:
        cols["AccS"] = sum(present) / len(present) if present else None
    return cols


def accs(scores: Sequence[float]) -> float:
    """AccS: the arithmetic mean of the eight column scores."""
    if len(scores) != 8:
        raise UserInputError(f"AccS: expected the 8 column scores, got {len(scores)}")
    return sum(scores) / 8


def drivemllm(items_by_task: dict[str, Sequence[dict]]) -> dict:
    """Every task's score and the paper's columns with AccS. A task with no items is not scored: its entry and its
    column are None and it is listed in ``missing_tasks``; AccS then averages only the columns listed in
    ``accs_columns`` (not the paper's AccS unless all eight are)."""
    unknown = sorted(set(items_by_task) - set(DRIVEMLLM_TASKS))
    if unknown:
        raise UserInputError(f"unknown task(s) {unknown} (known: {list(DRIVEMLLM_TASKS)})")
    per = {t: drivemllm_task_score(t, items_by_task[t]) if items_by_task.get(t) else None for t in DRIVEMLLM_TASKS}
    cols = drivemllm_columns({t: v["score"] for t, v in per.items() if v is not None})
    return {"tasks": per, "columns": cols, "accs_columns": [c for c in PAPER_COLUMNS if cols[c] is not None],
            "missing_tasks": [t for t, v in per.items() if v is None]}


# ----------------------------------------------------------------------------------------------------------------------
# STSBench
# ----------------------------------------------------------------------------------------------------------------------

STS_GROUPS = ("ego", "ego-agent", "agent", "agent-agent")
STS_OPTIONS = "ABCDE"  # each question is five-way multiple choice (the MTSR paper's appendix C)
# a valid ground truth: an option letter (either case), alone or before the option's text ("B", "b) stop"); the
# reference reads its first character, so "" failed there and " A" or "Ego turns left" were never matched
_STS_GT = re.compile(rf"[{STS_OPTIONS}{STS_OPTIONS.lower()}](?![A-Za-z])")


def stsbench_correct(answer: str, gt_letter: str) -> bool:
    return bool(answer) and bool(gt_letter) and answer[0].lower() == gt_letter[0].lower()


def _stsbench_row(row) -> None:
    """The fields of a row; its ground truth is valid (``_STS_GT``), its answer may be anything (wrong unless its
    first character is the ground truth's letter)."""
    _need(row, {"answer": str, "gt": str, "group": str, "scenario": str})
    if row["group"] not in STS_GROUPS:
        raise UserInputError(f"group: expected one of {STS_GROUPS}, got {row['group']!r}")
    if not _STS_GT.match(row["gt"]):
        raise UserInputError(f"gt: expected the letter of one of the {len(STS_OPTIONS)} options "
                         f"({STS_OPTIONS[0]}-{STS_OPTIONS[-1]}), got {row['gt']!r:.40}")


def stsbench(rows: Iterable[dict]) -> dict:
    """Rows ``{"answer", "gt", "group", "scenario"}`` -> per-type accuracy, per-group macro means and the Average
    (None unless all 4 groups have rows; the absent ones are listed in ``missing_groups``)."""
    marks: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r, _ in _rows(rows, _stsbench_row):
        marks[r["group"]][r["scenario"]].append(stsbench_correct(r["answer"], r["gt"]))
    types = {g: {s: sum(v) / len(v) for s, v in d.items()} for g, d in marks.items()}
    groups = {g: sum(d.values()) / len(d) for g, d in types.items()}
    missing = [g for g in STS_GROUPS if g not in groups]
    average = sum(groups.values()) / len(STS_GROUPS) if not missing else None
    return {"types": types, "groups": groups, "average": average, "missing_groups": missing}
