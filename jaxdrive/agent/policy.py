"""A scripted tool-using policy for the synthetic MCQ set (tests, teacher trajectories for SFT).

``ScriptedPolicy`` reads only the conversation: it recognises the question kind from the question text, calls the tool
that answers it, reads the observation and picks the matching option; it cites the first retrieved experience entry
when there is one, and its reasoning states up to two memory phrases of the prompt (``reward.memory_phrases``: scene
objects' ids, experience clauses), which the reward's "memory cited" tier looks for. ``mistakes`` injects a malformed reply, a premature finish or a repeated call first (to exercise the
loop's counters).
"""
from __future__ import annotations

import json
import re

from jaxdrive.agent.mcq import KINDS

PLANS = {
    "leading": ("get_leading_object_detection", {}),
    "front_count": ("get_front_object_detections", {}),
    "goal": ("get_ego_states", {}),
    "speed": ("get_ego_states", {}),
    "drivable_left": ("get_drivable_at_locations", {"locations": [[-3.5, 0.0]]}),
}


def _question(messages: list[dict]) -> str:
    text = next(m["content"] for m in messages if m["role"] == "user")
    return text.split("Question:", 1)[1].strip()


def _options(question: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"([A-F])\) (.*?)(?= [A-F]\) |$)", question)}


def _memory_note(messages: list[dict]) -> str:
    """A reasoning step naming up to two memory phrases of the prompt (sorted: deterministic), or "" without any."""
    from jaxdrive.agent.reward import memory_phrases

    text = next(m["content"] for m in messages if m["role"] == "user")
    stm = text.split("Scene memory (short-term):\n", 1)[-1].split("\n\nRetrieved experience (long-term):", 1)[0]
    memory = text.split("Retrieved experience (long-term):\n", 1)[-1].split("\n\nQuestion:", 1)[0]
    phrases = sorted(memory_phrases("" if stm == "(none)" else stm, "" if memory == "(none)" else memory))[:2]
    return f"Step 0: the memory notes {' and '.join(repr(p) for p in phrases)}. " if phrases else ""


def _kind(question: str) -> str | None:
    return next((k for k, (stem, _) in KINDS.items() if question.startswith(stem)), None)


def _answer_text(kind: str, result) -> str:
    if kind == "leading":
        return "Yes" if result is not None else "No"
    if kind == "front_count":
        return str(len(result)) if len(result) < 3 else "3 or more"
    if kind == "goal":
        return result["mission_goal"]
    if kind == "speed":
        v = result["speed"]
        return "below 2 m/s" if v < 2 else "2 to 8 m/s" if v < 8 else "8 to 15 m/s" if v < 15 else "above 15 m/s"
    return "Yes" if result[0]["drivable"] else "No"


class ScriptedPolicy:
    def __init__(self, mistakes: tuple[str, ...] = ()):
        self.mistakes = tuple(mistakes)

    def __call__(self, messages: list[dict]) -> str:
        question = _question(messages)
        kind = _kind(question)
        done = sum(1 for m in messages if m["role"] == "assistant")
        if done < len(self.mistakes):
            m = self.mistakes[done]
            if m == "malformed":
                return "I think I should look around first."
            if m == "premature":
                return json.dumps({"think": "guess", "finish": True, "final_answer": "A) guess"})
            if m == "unknown":
                return json.dumps({"think": "try", "action": {"tool": "teleport", "arguments": {}}})
        if kind is None:
            return json.dumps({"think": "unknown question kind", "action": {"tool": "get_ego_states", "arguments": {}}})
        tool, args = PLANS[kind]
        obs = [m for m in messages
               if m.get("kind") == "observation" and m["content"].startswith(f"Observation ({tool})")]
        if not obs or ("repeat" in self.mistakes and len(obs) == 1 and done == len(self.mistakes)):
            return json.dumps({"think": f"The question needs evidence from {tool}.",
                               "action": {"tool": tool, "arguments": args}})
        result = json.loads(obs[-1]["content"].split(": ", 1)[1])["result"]
        text = _answer_text(kind, result)
        letter = next(k for k, v in _options(question).items() if v == text)
        has_memory = "[1]" in next(m["content"] for m in messages if m["role"] == "user")
        return json.dumps({
            "update": f"{tool} returned {json.dumps(result, separators=(',', ':'))[:200]}",
            "think": "The observation answers the question.", "finish": True,
            "reasoning": f"{_memory_note(messages)}Step 1: {tool} was queried for the current scene. Step 2: its result means '{text}'. "
                         f"Step 3: option {letter} matches the observation. Step 4: final answer {letter}.",
            "final_answer": f"{letter}) {text}", "memory_used": [1] if has_memory else []})
