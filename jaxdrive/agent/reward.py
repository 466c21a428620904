"""The tiered outcome reward of trajectory-level GRPO (paper Table 8, appendix B.3). Each trajectory is in exactly one
tier:

    1  correct and tool and memory cited   +0.7
    2  correct and tool, no memory citation +0.5
    3  correct, no tool                     0.0
    4  incorrect and tool                  +0.2
    5  incorrect, no tool                   0.0
    6  malformed output                     0.0

* malformed: no parseable final answer (no option letter in the last answer turn) to a multiple-choice item (gold an
  option letter);
* correct: that letter equals the gold letter. An open-ended item (gold not an option letter) is never correct: its
  non-empty final answer is incorrect, tier 4 or 5 ("open-ended items are treated as incorrect by the multiple-choice
  correctness test and can therefore only reach Tiers 4-6", B.3); an empty one is malformed;
* tool: at least one action passed the schema legality check (a known tool with valid arguments that ran: a tool that
  then answers "not found" still counts, one that crashed does not; ``tools.registry.is_legal``, the rule the loop's
  counters follow);
* memory cited: "at least two concrete scene-state or experience phrases surfaced in the reasoning": the distinct
  short-term-memory object ids and retrieved long-term-memory clauses (>= 3 words) that appear verbatim
  (case-insensitive) in the reasoning. The answer's own ``memory_used`` list is no phrase in the reasoning and counts
  for nothing (listing retrieved entries the reasoning never uses earns no reward); it is kept in the record for
  consolidation's utility credit.
"""
from __future__ import annotations

import re

from jaxdrive.agent.loop import answer_letter, parse_reply
from jaxdrive.agent.tools.registry import is_legal
from jaxdrive.train.rewards import Reward

TIER_REWARD = {1: 0.7, 2: 0.5, 3: 0.0, 4: 0.2, 5: 0.0, 6: 0.0}


def legal_tool_call(traj: dict) -> bool:
    """Whether any step of the trajectory passed the legality check."""
    return any(is_legal(bool(s.get("ok")), s.get("error")) for s in traj.get("steps", []))


def memory_phrases(stm: str, memory: str) -> set[str]:
    """Citable phrases: the object ids of the short-term memory lines and the long-term-memory clauses."""
    out = set()
    for line in stm.splitlines():
        head = line.split(":", 1)[0].split()
        if len(head) == 2 and head[0] not in ("ego", "road", "risk"):
            out.add(head[0].lower())
    for clause in re.split(r"[;\n]|\[\d+\]", memory):
        clause = re.sub(r"^\s*(conditions|risks|success pattern|tool strategy):", "", clause.strip()).strip()
        if len(clause.split()) >= 3:
            out.add(clause.lower())
    return out


def memory_citations(traj: dict) -> int:
    """The number of distinct memory phrases (``memory_phrases`` of the record's ``stm`` and ``memory``) surfaced in
    its reasoning: an object id as a whole word, a clause as a substring, both case-insensitive."""
    reasoning = str(traj.get("reasoning", "")).lower()
    words = set(re.findall(r"[a-z0-9_]+", reasoning))
    return len({p for p in memory_phrases(traj.get("stm", ""), traj.get("memory", ""))
                if (p in words if " " not in p else p in reasoning)})


def is_option_letter(gold) -> bool:
    """Whether an item's ``gold`` is a multiple-choice option letter (A-F), i.e. the item is not open-ended."""
    return isinstance(gold, str) and len(gold) == 1 and "A" <= gold <= "F"


def tier(traj: dict) -> int:
    """The Table 8 tier of a trajectory record (``jaxdrive.agent.loop`` format; ``gold`` is the correct letter)."""
    answer = str(traj.get("final_answer", ""))
    letter = answer_letter(answer)
    tool = legal_tool_call(traj)
    if not is_option_letter(traj.get("gold")):  # open-ended: incorrect whatever its answer, unless there is none
        return (4 if tool else 5) if answer.strip() else 6
    if letter is None:
        return 6
    correct = letter == traj.get("gold")
    if correct and tool:
        return 1 if memory_citations(traj) >= 2 else 2
    if correct:
        return 3
    return 4 if tool else 5


def tiered_reward(completions: list[str], examples: list[dict]) -> list[float]:
    """Host reward: the tier reward of ``examples[i]["trajectory"]`` (multi-turn rollouts), or of a single-turn
    completion (one JSON answer, no tool calls) against ``examples[i]["gold"]``."""
    out = []
    for text, ex in zip(completions, examples):
        traj = ex.get("trajectory")
        if traj is None:
            obj = parse_reply(text) or {}
            traj = {"final_answer": str(obj.get("final_answer", "")), "gold": ex.get("gold"),
                    "reasoning": str(obj.get("reasoning", "")), "stm": ex.get("stm", ""),
                    "memory": ex.get("memory", "")}
        out.append(TIER_REWARD[tier(traj)])
    return out


def tiered_from_config(cfg) -> Reward:
    """Registry factory ``rewards.agent_tiered`` (``weight``, default 1)."""
    return Reward(name="agent_tiered", fn=tiered_reward, weight=float(cfg.get("weight", 1.0)))
