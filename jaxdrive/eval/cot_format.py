"""The ``<think>...</think><answer>...</answer>`` response format of OpenREAD (and DeepSeek-R1-style GRPO).

``format_cot`` writes a target, ``extract_answer`` reads the answer span back, ``is_well_formed`` is the format
reward's test: the whole response is one think block then one answer block (whitespace around and between allowed),
and neither block contains another tag.
"""
from __future__ import annotations

import re

from jaxdrive.errors import UserInputError

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_WHOLE = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)

#: OpenREAD's GRPO-mode system prompt (``eval/Trajectory/traj_infer.py``, spec/eval-protocols.md §B).
SYSTEM_PROMPT = (
    "You are a mature and professional driver. Given a driving related question, please think about the reasoning "
    "process in mind and then provide the answer. The reasoning process and answer are enclosed within <think> "
    "</think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think><answer> answer "
    "here </answer>"
)


def format_cot(think: str, answer: str) -> str:
    """``"<think> {think} </think>\\n<answer> {answer} </answer>"`` (tags inside the parts are an error)."""
    for name, part in (("think", think), ("answer", answer)):
        if any(t in part for t in TAGS):
            raise UserInputError(f"{name}: must not contain the tags {TAGS}, got {part[:80]!r}")
    return f"<think> {think.strip()} </think>\n<answer> {answer.strip()} </answer>"


def extract_answer(text: str | None) -> str | None:
    """The stripped text of the first ``<answer>...</answer>`` span, or None (no span, or not a string)."""
    if not isinstance(text, str):
        return None
    m = _ANSWER.search(text)
    return m.group(1).strip() if m else None


def is_well_formed(text: str | None) -> bool:
    """True when ``text`` is exactly one think block followed by one answer block."""
    if not isinstance(text, str):
        return False
    m = _WHOLE.fullmatch(text)
    return bool(m) and not any(t in g for g in m.groups() for t in TAGS)
