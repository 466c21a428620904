"""VQA benchmark scorers, exactly as their reference scripts score (``shared/spec/eval-protocols.md`` §C).

* DriveLMM-o1 (``evaluation/evaluation_script.py``): MCQ items are those whose id ends in 2, 3, 4, 5 or 8; the final
  answer is the text after the last occurrence of the first marker (in a fixed order) present in the response; the
  letter is the first ``X) ...`` match in it ('F' for "none of the ...", else 'none'); accuracy over MCQ items.
* DriveMLLM (``evaluation/eval_from_json.py``): the answer inside ``<OUTPUT FORMAT START>..<OUTPUT FORMAT END>``,
  validated per task; scores over valid outputs only; ``effective_ratio = valid / expected``. The paper's eight
  columns: PPos, BBox, L/R, F/B, CVD (dA), CD (dz), RD (dAB), RHD (dx); AccS = their arithmetic mean. The reference
  scores left / right and front / behind separately; L/R and F/B here are the means of those pairs (the reference does
  not say how the papers combine them).
* STSBench (``eval/eval.py``): correct iff the first character of the raw answer equals the ground-truth letter's
  (case-insensitive); accuracy per scenario type, macro-averaged within each of the 4 groups, then over the groups.
  An empty answer is incorrect (the reference would fail on it).
"""
from __future__ import annotations

import ast
import math
import re
from collections import defaultdict
from typing import Iterable, Sequence

DRIVELMM_MARKERS = ("The final answer is:", "**Final Answer:**", "Final Answer", "Answer", "Why take this action?:",
                    "**Final Answer**", "**Final Decision**:", "Final Step:", "<CONCLUSION>")
DRIVELMM_MCQ_NUMBERS = {2, 3, 4, 5, 8}
_OPTION = re.compile(r"([A-F])\)\s*(.+)")


def drivelmm_is_mcq(idx: str) -> bool:
    return int(str(idx).rsplit("_", 1)[-1]) in DRIVELMM_MCQ_NUMBERS


def drivelmm_final_answer(text: str) -> str:
    """Text after the last occurrence of the first marker (in ``DRIVELMM_MARKERS`` order) found in ``text``; ''."""
    for marker in DRIVELMM_MARKERS:
        if marker in text:
            return text.split(marker)[-1]
    return ""


def drivelmm_letter(text: str) -> str:
    """The option letter of a full response: 'A'..'F', or 'none'."""
    final = drivelmm_final_answer(text)
    hits = _OPTION.findall(final)
    if hits:
        return hits[0][0]
    return "F" if "none of the " in final.lower() else "none"


def drivelmm_mcq(rows: Iterable[dict]) -> dict:
    """MCQ accuracy over rows ``{"idx", "response", "gt"}`` (gt: the reference answer text, parsed the same way)."""
    marks = [float(drivelmm_letter(r["response"]) == drivelmm_letter(r["gt"]))
             for r in rows if drivelmm_is_mcq(r["idx"])]
    return {"mcq_accuracy": sum(marks) / len(marks) if marks else float("nan"), "mcq_items": len(marks)}


# ----------------------------------------------------------------------------------------------------------------------
# DriveMLLM
# ----------------------------------------------------------------------------------------------------------------------

DRIVEMLLM_TASKS = ("xy", "box", "left", "right", "front", "behind", "dA", "dz", "dAB", "dx")
DRIVEMLLM_EXPECTED = dict(zip(DRIVEMLLM_TASKS, (880, 880, 191, 191, 191, 191, 880, 880, 191, 191)))
PAPER_COLUMNS = ("PPos", "BBox", "L/R", "F/B", "CVD", "CD", "RD", "RHD")
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


def _gt(task: str, item: dict):
    if task in ("xy", "box"):
        return item["gt"]
    if task in ("left", "right"):
        (d1, p1), (d2, p2) = item["objects"]
        return d1 if (p1[0] < p2[0] if task == "left" else p1[0] > p2[0]) else d2
    a = item["xyz1"]
    if task == "front":
        return "Yes" if a[2] < item["xyz2"][2] else "No"
    if task == "behind":
        return "Yes" if a[2] > item["xyz2"][2] else "No"
    if task == "dA":
        return math.sqrt(sum(v * v for v in a))
    if task == "dz":
        return a[2]
    b = item["xyz2"]
    if task == "dAB":
        return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    return abs(a[0] - b[0])


def drivemllm_task_score(task: str, items: Sequence[dict], expected: int | None = None) -> dict:
    """Score of one task over items ``{"output": raw text, + ground truth}``; ground truth per task: xy/box ``gt``;
    left/right ``objects`` [(description, [x, y]), (description, [x, y])] and ``descriptions``; front/behind/dA/dz/
    dAB/dx ``xyz1`` (and ``xyz2``), camera frame. Returns {score (0-100, 2 decimals), valid, matched, total,
    effective_ratio (percent of ``expected``)}."""
    if task not in DRIVEMLLM_TASKS:
        raise ValueError(f"task: expected one of {DRIVEMLLM_TASKS}, got {task!r}")
    matched, valid = 0, []
    for it in items:
        m = _FORMAT.search(it["output"])
        if not m:
            continue
        matched += 1
        try:
            valid.append((_parse(task, m.group(1).strip(), it), it))
        except (ValueError, SyntaxError, TypeError, AssertionError, IndexError, KeyError, MemoryError, RecursionError):
            continue
    if not valid:
        score = 0.0
    elif task == "xy":
        err = sum(math.dist(v[:2], _gt(task, it)[:2]) for v, it in valid) / len(valid)
        score = round(_get_score(err, 0.005) * 100, 2)
    elif task == "box":
        score = round(sum(box_iou(_gt(task, it), v) for v, it in valid) / len(valid) * 100, 2)
    elif task in ("left", "right", "front", "behind"):
        score = round(sum(v == _gt(task, it) for v, it in valid) / len(valid) * 100, 2)
    else:
        err = sum(abs(v - _gt(task, it)) for v, it in valid) / len(valid)
        score = round(_get_score(err, 0.05) * 100, 2)
    exp = DRIVEMLLM_EXPECTED[task] if expected is None else expected
    return {"score": score, "valid": len(valid), "matched": matched, "total": len(items),
            "effective_ratio": len(valid) / exp * 100 if exp else float("nan")}


def drivemllm_columns(task_scores: dict[str, float]) -> dict[str, float]:
    """The paper's eight columns from the ten task scores, plus AccS (their mean)."""
    t = task_scores
    cols = {"PPos": t["xy"], "BBox": t["box"], "L/R": (t["left"] + t["right"]) / 2,
            "F/B": (t["front"] + t["behind"]) / 2,
            "CVD": t["dA"], "CD": t["dz"], "RD": t["dAB"], "RHD": t["dx"]}
    cols["AccS"] = accs([cols[c] for c in PAPER_COLUMNS])
    return cols


def accs(scores: Sequence[float]) -> float:
    """AccS: the arithmetic mean of the eight column scores."""
    if len(scores) != 8:
        raise ValueError(f"AccS: expected the 8 column scores, got {len(scores)}")
    return sum(scores) / 8


def drivemllm(items_by_task: dict[str, Sequence[dict]]) -> dict:
    """Every task's score and the paper's columns with AccS (tasks absent from ``items_by_task`` score 0)."""
    per = {t: drivemllm_task_score(t, items_by_task.get(t, [])) for t in DRIVEMLLM_TASKS}
    return {"tasks": per, "columns": drivemllm_columns({t: v["score"] for t, v in per.items()})}


# ----------------------------------------------------------------------------------------------------------------------
# STSBench
# ----------------------------------------------------------------------------------------------------------------------

STS_GROUPS = ("ego", "ego-agent", "agent", "agent-agent")


def stsbench_correct(answer: str, gt_letter: str) -> bool:
    return bool(answer) and bool(gt_letter) and answer[0].lower() == gt_letter[0].lower()


def stsbench(rows: Iterable[dict]) -> dict:
    """Rows ``{"answer", "gt", "group", "scenario"}`` -> per-type accuracy, per-group macro means and the Average."""
    marks: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["group"] not in STS_GROUPS:
            raise ValueError(f"group: expected one of {STS_GROUPS}, got {r['group']!r}")
        marks[r["group"]][r["scenario"]].append(stsbench_correct(r["answer"], r["gt"]))
    types = {g: {s: sum(v) / len(v) for s, v in d.items()} for g, d in marks.items()}
    groups = {g: sum(d.values()) / len(d) for g, d in types.items()}
    missing = [g for g in STS_GROUPS if g not in groups]
    average = sum(groups.values()) / len(STS_GROUPS) if not missing else float("nan")
    return {"types": types, "groups": groups, "average": average, "missing_groups": missing}
