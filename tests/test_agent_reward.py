"""The tiered reward of Table 8: every tier reachable, tiers mutually exclusive (each trajectory in exactly one), values
as the table; registered for `jaxdrive train`."""
import itertools

import ml_collections
import pytest

from jaxdrive.agent.reward import TIER_REWARD, memory_citations, tier, tiered_reward
from jaxdrive.agent.tools import Tool, ToolRegistry
from jaxdrive.train.registry import REWARDS

STM = "ego: v=5.0m/s a=+0.0m/s2 cruising goal=FORWARD\nveh0 vehicle: front near 8.0m same-dir 5.0m/s risk=high\n" \
      "road: lanes left=1 right=0\nrisk: high (vehicle veh0 front 8m)"
MEMORY = "[1] conditions: a stopped vehicle ahead in the ego lane; risks: rear-end collision"
# a tool that raises on valid arguments (an overflow, a bug): the registry's observation of the crash
CRASH = ToolRegistry([Tool("broken", "raises", {"type": "object"}, lambda ctx: 1 / 0)]).call(None, "broken", {})


def traj(answer, tool, cites):
    steps = {"legal": [{"ok": True}], "not_found": [{"ok": False, "error": "estimate_object_depth: no 'car' visible"}],
             "unknown": [{"ok": False, "error": "unknown tool 'fly'"}],
             "invalid": [{"ok": False, "error": "invalid arguments for x: ..."}],
             "crashed": [{"ok": False, "error": CRASH.error}],
             # a crash as trajectory files written before the "tool crashed" prefix recorded it
             "legacy_crash": [{"ok": False, "error": "broken failed: ZeroDivisionError: division by zero"}],
             "none": []}[tool]
    reasoning = {0: "I brake.", 1: "veh0 is close, so I brake.",
                 2: "veh0 is close and a stopped vehicle ahead in the ego lane means braking."}[cites]
    return {"final_answer": answer, "gold": "B", "steps": steps, "reasoning": reasoning, "stm": STM, "memory": MEMORY,
            "memory_used": []}


@pytest.mark.parametrize("answer,tool,cites,want", [
    ("B) Brake", "legal", 2, 1), ("B) Brake", "not_found", 2, 1), ("B) Brake", "legal", 1, 2),
    ("B) Brake", "legal", 0, 2),
    ("B) Brake", "none", 2, 3), ("B) Brake", "unknown", 2, 3), ("B) Brake", "invalid", 0, 3),
    ("B) Brake", "crashed", 2, 3), ("B) Brake", "legacy_crash", 2, 3),
    ("A) Go", "legal", 2, 4), ("A) Go", "none", 2, 5), ("A) Go", "unknown", 0, 5), ("A) Go", "crashed", 2, 5),
    ("", "legal", 2, 6), ("Brake", "legal", 2, 6), ("I think B", "none", 0, 6)])
def test_tiers(answer, tool, cites, want):
    t = traj(answer, tool, cites)
    assert tier(t) == want
    assert tiered_reward([""], [{"trajectory": t}]) == [TIER_REWARD[want]]


@pytest.mark.parametrize("answer,tool,want", [
    ("Brake, the lead vehicle has stopped.", "legal", 4), ("Brake, the lead vehicle has stopped.", "none", 5),
    ("B) Brake", "legal", 4), ("", "legal", 6), ("  ", "none", 6)])
def test_open_ended_items_reach_only_tiers_4_to_6(answer, tool, want):
    """Paper B.3: "open-ended items are treated as incorrect by the multiple-choice correctness test and can therefore
    only reach Tiers 4-6": a free-text answer with a legal tool call is tier 4 (it was scored malformed, tier 6, for
    lacking an option letter); an empty answer stays malformed."""
    t = {**traj(answer, tool, 2), "gold": "Brake, because the lead vehicle has stopped in the ego lane."}
    assert tier(t) == want


def test_table8_values_and_exclusivity():
    assert TIER_REWARD == {1: 0.7, 2: 0.5, 3: 0.0, 4: 0.2, 5: 0.0, 6: 0.0}
    # every combination of the predicates lands in exactly one tier, the one Table 8's conditions select
    seen = set()
    for answer, tool, cites in itertools.product(["B) x", "A) x", ""], ["legal", "none", "unknown"], [0, 1, 2]):
        t = traj(answer, tool, cites)
        malformed, correct, legal = answer == "", answer.startswith("B"), tool == "legal"
        cited = memory_citations(t) >= 2
        conds = {1: not malformed and correct and legal and cited, 2: not malformed and correct and legal and not cited,
                 3: not malformed and correct and not legal, 4: not malformed and not correct and legal,
                 5: not malformed and not correct and not legal, 6: malformed}
        assert sum(conds.values()) == 1 and conds[tier(t)]
        seen.add(tier(t))
    assert seen == set(TIER_REWARD)
    assert TIER_REWARD[4] > TIER_REWARD[3]  # the shaping term the paper argues for


def test_memory_citations_count_phrases_surfaced_in_the_reasoning():
    t = traj("B) x", "legal", 0)
    assert memory_citations(t) == 0
    assert memory_citations(dict(t, memory_used=["m1", "m2"])) == 0  # a list of entries is no phrase in the reasoning
    assert memory_citations(traj("B) x", "legal", 2)) == 2  # an object id and an experience clause
    assert memory_citations(dict(t, reasoning="VEH0 ahead")) == 1  # case-insensitive id
    assert memory_citations(dict(t, reasoning="veh01 ahead")) == 0  # whole ids only


def test_registered_and_single_turn():
    r = REWARDS.get("agent_tiered")(ml_collections.ConfigDict({"weight": 2.0}))
    assert r.weight == 2.0 and r.name == "agent_tiered"
    vals = r.fn(['{"final_answer": "B) Brake", "reasoning": "x"}', "garbage"], [{"gold": "B"}, {"gold": "B"}])
    assert vals == [0.0, 0.0]  # correct but no tool: tier 3; garbage: tier 6


@pytest.mark.parametrize("answer,want", [("B", 1), ("B.", 1), ("B. Brake", 1), ("B: Brake", 1), ("(B)", 1),
                                         (" A ", 4), ("A car", 6), ("Brake", 6), ("Answer: B", 6)])
def test_a_bare_option_letter_is_a_parseable_answer(answer, want):
    # the paper scores "the multiple-choice letter of the last parseable final answer": a model answering "B" (or
    # "B. Brake") chose option B; it was scored as malformed output (tier 6, reward 0) before
    assert tier(traj(answer, "legal", 2)) == want


def test_listing_retrieved_entries_without_using_them_is_no_memory_citation():
    """Memory cited "requires at least two concrete scene-state or experience phrases surfaced in the reasoning"
    (appendix B.3): the answer's own ``memory_used`` list counted an entry each, so a correct tool-using answer that
    listed two retrieved entries its reasoning never used reached tier 1 (+0.7) instead of tier 2 (+0.5)."""
    listed = dict(traj("B) Brake", "legal", 0), retrieved=["m1", "m2"], memory_used=["m1", "m2"])
    assert tier(listed) == 2
    assert tiered_reward([""], [{"trajectory": listed}]) == [TIER_REWARD[2]]
    used = dict(listed, reasoning="veh0 is close and a stopped vehicle ahead in the ego lane means braking.")
    assert tier(used) == 1
