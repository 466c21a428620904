"""The Think-Action-Observation-Update loop (paper Sec. 3.3, B.4) and its JSONL trajectories.

A policy maps the conversation so far (``messages``) to one text reply holding one JSON object:

* a tool turn:   ``{"update": "<belief update from the last observation>", "think": "...",
                   "action": {"tool": "<name>", "arguments": {...}}}``
* the answer:    ``{"update": "...", "think": "...", "finish": true, "reasoning": "...",
                   "final_answer": "B) ...", "memory_used": [1, 2]}``  (numbers of the retrieved entries it used)

The executor runs the tool and appends the observation as a user turn. Budget: at most ``MAX_TOOL_TURNS`` (7) tool
turns and one answer turn, i.e. at most 8 policy turns. ``finish`` is accepted only after one useful action (a tool
call that returned a result). A reply is read by ``read_reply``, the rule the GRPO rollouts share: an accepted
``finish`` ends the episode whatever its answer (to a multiple-choice item, one without a parseable option letter
is scored malformed output, tier 6; it is not retried). Malformed replies, unknown tools, invalid arguments, tool errors (the tool's own "cannot
answer"), tool crashes (the tool raised), repeated identical calls, premature finishes and running out of turns are fed
back as observations and counted; none of them raise.

Trajectory record (one JSON line): ``id``, ``scene_id``, ``question``, ``gold``, ``stm``, ``memory`` (prompt text),
``retrieved`` (entry ids), ``messages`` (role, content, kind: prompt | action | observation | feedback | answer),
``steps`` (per tool call: think, action, observation, ok, error, latency_ms, update), ``reasoning`` (a string,
``reasoning_text``), ``final_answer``, ``answer_letter``, ``correct``, ``termination`` (finish | max_turns),
``memory_used`` (entry ids), ``counters``.
"""
from __future__ import annotations

import json
import re
from typing import Callable, Sequence

from jaxdrive.agent.tools import ToolContext, ToolRegistry
from jaxdrive.agent.tools.registry import failure_kind
from jaxdrive.errors import UserInputError

MAX_TOOL_TURNS = 7
# counter of each kind of failed tool call (``registry.failure_kind``)
FAILURE_COUNTERS = {"unknown_tool": "unknown_tool", "invalid_args": "invalid_args", "tool_error": "tool_errors",
                    "tool_crash": "tool_crashes"}
Policy = Callable[[list[dict]], str]

SYSTEM = """You are a driving reasoning agent. Answer the question about the current driving scene. Use the scene memory
(short-term), the retrieved experience (long-term) and the tools. Reply with ONE JSON object per turn:
tool turn: {"update": "<what the last observation changed>", "think": "<goal and evidence gap>",
            "action": {"tool": "<tool name>", "arguments": {...}}}
answer:    {"update": "...", "think": "...", "finish": true, "reasoning": "<step-by-step>",
            "final_answer": "<letter>) <option>", "memory_used": [<numbers of the experience entries you used>]}
At most 7 tool calls; finish only after at least one useful tool call. Coordinates: ego frame, x right, y forward (m).
Tools:
"""


def system_prompt(registry: ToolRegistry) -> str:
    return SYSTEM + "\n".join(json.dumps(s, separators=(",", ":")) for s in registry.specs())


def user_prompt(question: str, stm: str, memory: str) -> str:
    return (f"Scene memory (short-term):\n{stm or '(none)'}\n\nRetrieved experience (long-term):\n{memory or '(none)'}"
            f"\n\nQuestion: {question}")


def parse_reply(text: str) -> dict | None:
    """The first JSON object in ``text`` (code fences allowed), or None."""
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            return obj if isinstance(obj, dict) else None
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return None


def read_reply(obj: dict | None) -> tuple:
    """What one parsed reply asks for, the rule the loop and the GRPO rollouts share: ``("finish", obj)`` for
    ``finish`` true with a string ``final_answer`` (a finish takes precedence over an action in the same reply),
    ``("tool", name, arguments)`` for an action naming a tool, else ``("malformed",)``. A finish ends the episode
    whatever its answer: one without a parseable option letter is scored by the reward (``reward.tier``: malformed
    output for a multiple-choice item, incorrect for an open-ended one), not a malformed reply given another turn
    (the paper's loop ends on ``finish``; open-ended answers carry no letter)."""
    if not obj:
        return ("malformed",)
    if obj.get("finish") is True and isinstance(obj.get("final_answer"), str):
        return ("finish", obj)
    action = obj.get("action")
    if isinstance(action, dict) and isinstance(action.get("tool"), str):
        return ("tool", action["tool"], action.get("arguments", {}))
    return ("malformed",)


LETTER = re.compile(r"^\s*\(?([A-F])(?:\)|[.:](?:\s|$)|\s*$)")


def answer_letter(final_answer: str) -> str | None:
    """The option letter a final answer starts with: "B) Brake", "(B)", "B. Brake", "B: Brake" or a bare "B"; None
    for anything else ("Brake", "A car", "I think B")."""
    m = LETTER.match(final_answer or "")
    return m.group(1) if m else None


def cited_entries(numbers, retrieved: Sequence[str]) -> list[str]:
    """The ids of the retrieved entries an answer's ``memory_used`` numbers (1-based) name; anything but a list of
    in-range integers (a model's malformed field: a bare number, null, strings) names nothing."""
    if not isinstance(numbers, list):
        return []
    return [retrieved[n - 1] for n in numbers
            if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(retrieved)]


def _key(tool: str, args) -> str:
    return tool + json.dumps(args, sort_keys=True)


def run_episode(policy: Policy, ctx: ToolContext, registry: ToolRegistry, item: dict, *, stm: str = "",
                memory: str = "", retrieved: Sequence[str] = (), max_tool_turns: int = MAX_TOOL_TURNS) -> dict:
    """One episode of ``policy`` on ``item`` (``id``, ``question``, optional ``gold`` / ``scene_id``); returns the
    trajectory record (see the module docstring)."""
    msgs = [{"role": "system", "content": system_prompt(registry), "kind": "prompt"},
            {"role": "user", "content": user_prompt(item["question"], stm, memory), "kind": "prompt"}]
    counters = dict(turns=0, tool_calls=0, useful_calls=0, malformed=0, unknown_tool=0, invalid_args=0, tool_errors=0,
                    tool_crashes=0, repeated=0, premature_finish=0, max_turns=0)
    steps: list[dict] = []
    seen: set[str] = set()
    final = None
    for turn in range(max_tool_turns + 1):
        answer_turn = turn == max_tool_turns
        reply = policy(msgs)
        counters["turns"] += 1
        obj = parse_reply(reply)
        action = read_reply(obj)
        is_finish = action[0] == "finish"
        msgs.append({"role": "assistant", "content": reply, "kind": "answer" if is_finish else "action"})
        if steps and obj and isinstance(obj.get("update"), str) and not steps[-1]["update"]:
            steps[-1]["update"] = obj["update"]
        if action[0] == "malformed":
            counters["malformed"] += 1
            feedback = "error: malformed reply; expected one JSON object with an action or finish=true"
        elif is_finish and counters["useful_calls"] == 0:
            counters["premature_finish"] += 1
            feedback = "error: finish is allowed only after at least one useful tool call"
        elif is_finish:
            final = obj
            break
        elif answer_turn:
            feedback = None
        else:
            _, tool, args = action
            key = _key(tool, args)
            if key in seen:
                counters["repeated"] += 1
                feedback = "error: repeated identical call; its observation is already above"
            else:
                seen.add(key)
                obs = registry.call(ctx, tool, args)
                counters["tool_calls"] += 1
                counters["useful_calls" if obs.ok else FAILURE_COUNTERS[failure_kind(obs.error)]] += 1
                steps.append({"think": obj.get("think", ""), "action": {"tool": tool, "arguments": args},
                              "observation": obs.text(), "ok": obs.ok, "error": obs.error,
                              "latency_ms": round(obs.latency_ms, 3), "update": ""})
                msgs.append({"role": "user", "content": f"Observation ({tool}): {obs.text()}",
                             "kind": "observation"})
                if turn == max_tool_turns - 1:
                    msgs.append({"role": "user", "content": "Tool budget used up: answer now (finish=true).",
                                 "kind": "feedback"})
                continue
        if answer_turn:
            break
        msgs.append({"role": "user", "content": feedback, "kind": "feedback"})
    if final is None:
        counters["max_turns"] = 1
    memory_used = cited_entries(final.get("memory_used") if final else None, retrieved)
    final_answer = final["final_answer"] if final else ""
    letter = answer_letter(final_answer)
    return {
        "id": item["id"], "scene_id": item.get("scene_id", ""), "question": item["question"],
        "gold": item.get("gold"), "stm": stm, "memory": memory, "retrieved": list(retrieved), "messages": msgs,
        "steps": steps, "reasoning": reasoning_text(final), "final_answer": final_answer,
        "answer_letter": letter, "correct": letter is not None and letter == item.get("gold"),
        "termination": "finish" if final else "max_turns", "memory_used": memory_used, "counters": counters,
    }


def reasoning_text(final: dict | None) -> str:
    """The record's ``reasoning`` (a string) from an accepted answer: its ``reasoning`` as given when a string, the
    JSON text of a model's list or object, "" without an answer or reasoning (null included)."""
    value = final.get("reasoning") if final else None
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, ensure_ascii=False)


def write_jsonl(path, records: Sequence[dict]) -> None:
    """``records`` as JSON lines, replacing ``path`` atomically: a writer killed midway leaves the previous file (a
    truncated one could end on a line boundary and read back as a silently shorter set)."""
    from jaxdrive.atomic import replacing

    with replacing(path) as tmp, open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def read_trajectories(path, fields: dict | None = None, check=None) -> list[dict]:
    """Trajectory records from a JSONL file (``run_episode``'s format): at least one, each a JSON object with a string
    ``id`` of its own (a trajectory given twice would be converted or consolidated twice) and the ``fields``
    (name -> type) a reader needs, and passing ``check(record, "FILE:LINE")`` when given; ``ValueError`` naming the
    file (and line, field) otherwise."""
    from pathlib import Path

    from jaxdrive.datasets.base import first_use, read_jsonl_file, require

    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: {'is a directory; expected' if path.is_dir() else 'no such file'} (trajectories "
                         "JSONL)")
    out, first = [], {}
    for where, obj in read_jsonl_file(path):
        require(obj, where, {"id": str, **(fields or {})})
        if check is not None:
            check(obj, where)
        first_use(first, obj["id"], where)
        out.append(obj)
    if not out:
        raise UserInputError(f"{path}: no trajectories (expected one JSON object per line)")
    return out
