"""The reasoning loop end to end: a scripted policy answers a synthetic MCQ set from generated scenes by calling
tools; the loop's rules and counters; JSONL trajectories; the stepwise converter's phase-1 / phase-2 records and masks;
the short-term memory scene graph."""
import json
import os
import re

import pytest
from agent_scenes import CROSSWALK, known_scene

from jaxdrive.agent import stm
from jaxdrive.agent.consolidate import verify
from jaxdrive.agent.loop import MAX_TOOL_TURNS, read_trajectories, run_episode, write_jsonl
from jaxdrive.agent.mcq import KINDS, make_mcq_set
from jaxdrive.agent.policy import ScriptedPolicy
from jaxdrive.agent.reward import tier
from jaxdrive.agent.sft_data import convert, read_records, stepwise_records, to_arrays
from jaxdrive.agent.tools import ToolContext, default_registry
from jaxdrive.data.synthetic import generate_scene

REG = default_registry()


@pytest.fixture(scope="module")
def mcq():
    return make_mcq_set(4, seed=10)


def _ctx(item):
    return ToolContext.from_scene(generate_scene(item["scene_seed"], num_proposals=1))


def test_stm_scene_graph_known_scene():
    ctx = ToolContext.from_scene(known_scene(), {"crosswalks": [CROSSWALK]})
    g = stm.build(ctx)
    nodes = {n.id: n for n in g.nodes}
    assert [n.id for n in g.nodes] == ["left", "lead", "cone", "ped"]  # by distance
    lead = nodes["lead"]
    assert (lead.sector, lead.band, lead.distance, lead.motion, lead.speed) == ("front", "near", 8.0, "same-dir", 5.0)
    assert "in_ego_lane" in lead.relations and "following_path" in lead.relations
    assert nodes["left"].sector == "front-left" and "left_of_ego" in nodes["left"].relations
    assert "receding" in nodes["left"].relations  # 10 m/s vs the ego's 5 m/s
    assert nodes["cone"].sector == "rear" and nodes["ped"].motion == "stopped"
    assert "approaching" in nodes["ped"].relations  # static, the ego drives towards it
    assert g.road == {"lanes_left": 1, "lanes_right": 0, "crosswalk_m": 32.05, "shoulder": (5.3, 1.8)}
    text = g.serialise()
    assert text.splitlines()[0] == "ego: v=5.0m/s a=+0.0m/s2 cruising goal=FORWARD"
    assert "lead vehicle: front near 8.0m same-dir 5.0m/s" in text and text.splitlines()[-1].startswith("risk:")
    assert len(text) < 800


def test_scripted_policy_answers_mcq_through_the_loop(mcq, tmp_path):
    assert len(mcq) == 4 * len(KINDS) and {i["gold"] for i in mcq} >= {"A", "B"}
    trajs = []
    for item in mcq:
        ctx = _ctx(item)
        trajs.append(run_episode(ScriptedPolicy(), ctx, REG, item, stm=stm.build(ctx).serialise(),
                                 memory="[1] conditions: dense traffic ahead", retrieved=["m7"]))
    assert all(t["correct"] for t in trajs)
    assert all(t["termination"] == "finish" and t["counters"]["turns"] == 2 for t in trajs)
    assert all(t["memory_used"] == ["m7"] and verify(t) for t in trajs)
    assert all(tier(t) == 1 for t in trajs)  # its reasoning states an object id and the clause
    assert all(t["steps"][0]["update"] and t["steps"][0]["latency_ms"] >= 0 for t in trajs)
    write_jsonl(tmp_path / "t.jsonl", trajs)
    assert read_trajectories(tmp_path / "t.jsonl") == json.loads(json.dumps(trajs))


def test_trajectories_are_replaced_atomically(tmp_path, monkeypatch):
    """Found reading the CLI: `agent run` / `agent convert` truncated --out and wrote it line by line, so a kill midway
    left a prefix that could read back as a shorter set; now the previous file survives a failed write."""
    import jaxdrive.agent.loop as loop

    out = tmp_path / "t.jsonl"
    write_jsonl(out, [{"id": "a"}, {"id": "b"}])
    real = json.dumps

    def dumps(obj, **kw):
        if obj.get("id") == "d":
            raise KeyboardInterrupt  # killed after the first record
        return real(obj, **kw)

    monkeypatch.setattr(loop.json, "dumps", dumps)
    with pytest.raises(KeyboardInterrupt):
        write_jsonl(out, [{"id": "c"}, {"id": "d"}])
    monkeypatch.undo()
    assert [t["id"] for t in read_trajectories(out)] == ["a", "b"] and sorted(os.listdir(tmp_path)) == ["t.jsonl"]


def test_loop_counts_mistakes_and_enforces_budget(mcq):
    item = mcq[0]
    ctx = _ctx(item)
    t = run_episode(ScriptedPolicy(mistakes=("malformed", "premature", "unknown", "repeat")), ctx, REG, item)
    c = t["counters"]
    assert (c["malformed"], c["premature_finish"], c["unknown_tool"], c["repeated"]) == (1, 1, 1, 1)
    assert t["correct"] and t["termination"] == "finish" and c["useful_calls"] == 1 and c["turns"] == 6

    calls = iter(range(100))

    def greedy_caller(messages):  # never finishes: a fresh (non-repeated) valid call every turn
        y = next(calls)
        return json.dumps({"think": "more", "action": {"tool": "get_drivable_at_locations",
                                                       "arguments": {"locations": [[0.0, float(y)]]}}})

    t = run_episode(greedy_caller, ctx, REG, item)
    assert t["termination"] == "max_turns" and not t["correct"] and t["answer_letter"] is None
    assert t["counters"]["turns"] == MAX_TOOL_TURNS + 1 and t["counters"]["tool_calls"] == MAX_TOOL_TURNS
    assert t["counters"]["max_turns"] == 1 and not verify(t)
    assert t["messages"][-2]["content"].startswith("Tool budget used up")


def test_stepwise_converter_masks(mcq):
    item = mcq[1]
    ctx = _ctx(item)
    t = run_episode(ScriptedPolicy(mistakes=("malformed",)), ctx, REG, item)
    p1, p2 = stepwise_records(t, 1), stepwise_records(t, 2)
    assert len(p1) == 1 and len(p2) == 2  # one tool decision; the tool turn and the answer turn
    for r in p1 + p2:
        assert [s["train"] for s in r["segments"]] == [False] * (len(r["segments"]) - 1) + [True]
        assert all(s["kind"] != "feedback" for s in r["segments"])  # the rejected malformed turn is dropped
        assert "look around" not in json.dumps(r)
    assert all(s["kind"] != "observation" for s in p1[0]["segments"])  # phase 1: no observations
    assert set(json.loads(p1[0]["segments"][-1]["text"])) == {"action"}  # tool-call tokens only
    obs = [s for s in p2[1]["segments"] if s["kind"] == "observation"]
    assert len(obs) == 1 and not obs[0]["train"]  # phase 2: the observation is context, masked
    assert json.loads(p2[1]["segments"][-1]["text"])["finish"] is True
    encode = lambda s: [ord(ch) for ch in s]  # noqa: E731 - a character tokenizer is enough to check the masks
    ids, mask = to_arrays(p2[1], encode)
    assert ids.shape == mask.shape
    target = p2[1]["segments"][-1]["text"] + "<|im_end|>"
    assert mask.sum() == len(target) and "".join(chr(i) for i in ids[mask == 1]) == target
    obs_text = obs[0]["text"]
    start = "".join(map(chr, ids)).index(obs_text)
    assert mask[start:start + len(obs_text)].sum() == 0
    assert len(convert([t, dict(t, correct=False)], 2)) == 2  # the unverified copy gives no records


def test_phase1_keeps_candidate_detections_for_instance_selection():
    ctx = ToolContext.from_scene(known_scene())
    item = {"id": "sel", "question": "Which car is ahead? A) lead B) left", "gold": "A"}
    replies = iter([
        {"think": "find cars", "action": {"tool": "detect_objects_2d_open_vocab",
                                          "arguments": {"camera": "CAM_FRONT", "objects": ["car"]}}},
        None,  # select the detection in the image centre, from the observation
        {"update": "confirmed", "think": "done", "finish": True, "reasoning": "the centred car is the lead",
         "final_answer": "A) lead"}])

    def policy(messages):
        r = next(replies)
        if r is None:
            dets = json.loads(messages[-1]["content"].split(": ", 1)[1])["result"]
            box = min(dets, key=lambda d: abs(d["center"][0] - 800))["box"]
            r = {"update": "two cars", "think": "pick", "action": {"tool": "select_referred_instance", "arguments": {
                "camera": "CAM_FRONT", "description": "car ahead", "box": box}}}
        return json.dumps(r)

    t = run_episode(policy, ctx, REG, item)
    assert t["correct"] and t["counters"]["useful_calls"] == 2
    p1 = stepwise_records(t, 1)
    assert [sum(s["kind"] == "observation" for s in r["segments"]) for r in p1] == [0, 1]


def test_agent_cli_run_and_convert(tmp_path, capsys):
    from jaxdrive.cli import main

    out = tmp_path / "t.jsonl"
    assert main(["agent", "run", "--scenes", "2", "--seed", "3", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary == {"episodes": 10, "accuracy": 1.0, "out": str(out)}
    records = tmp_path / "r.jsonl"
    assert main(["agent", "convert", "--trajectories", str(out), "--phase", "2", "--out", str(records)]) == 0
    assert json.loads(capsys.readouterr().out.strip())["records"] == 20
    assert main(["agent", "run", "--scenes", "0", "--out", str(out)]) == 2
    assert "--scenes" in capsys.readouterr().err
    assert len(read_records(records)) == 20


_OK_STEPS = '"correct": true, "termination": "finish", "steps": [{"action": {"tool": "t"}, "ok": true, "update": "u"}]'
_OBS = '{"role": "user", "content": "Observation (t): {}", "kind": "observation"}'


@pytest.mark.parametrize("messages,msg", [
    ('[1]', "t.jsonl:1: field 'messages[0]': expected an object, got int"),
    ('[{"role": "assistant", "content": "x"}]', "t.jsonl:1: messages[0]: missing field 'kind'"),
    ('[{"role": "user", "content": "x", "kind": "thought"}]', "t.jsonl:1: field 'messages[0].kind': expected one of"),
    (f'[{{"role": "assistant", "content": "no json", "kind": "action"}}, {_OBS}]',
     "t.jsonl:1: field 'messages[0].content': an executed tool turn without a JSON action object"),
    ('[], "steps": "call", "x": 0', "t.jsonl:1: field 'steps': expected a list of step objects"),
])
def test_agent_convert_checks_trajectories_by_name(tmp_path, capsys, messages, msg):
    """Found probing `jaxdrive agent convert` with hand-edited trajectories: a non-object message, a message without
    ``kind``, an executed tool turn whose content holds no action, a non-list ``steps`` ended in a bare TypeError /
    AttributeError traceback; each is now a usage error naming FILE:LINE and the field."""
    from jaxdrive.cli import main

    steps = "" if '"steps"' in messages else ", " + _OK_STEPS
    (tmp_path / "t.jsonl").write_text(f'{{"id": "x", "messages": {messages}{steps}}}\n')
    argv = ["agent", "convert", "--trajectories", str(tmp_path / "t.jsonl"), "--phase", "1", "--out",
            str(tmp_path / "r.jsonl")]
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.parametrize("line,msg", [
    ('{"id": "r0"}', "r.jsonl:1: missing field 'segments'"),
    ('{"segments": ["x"]}', "r.jsonl:1: field 'segments[0]': expected an object, got str"),
    ('{"segments": [{"role": "user", "text": "q"}]}', "r.jsonl:1: segments[0]: missing field 'train'"),
    ('{"segments": [{"role": "user", "text": "q", "train": false}]}', "no segment has train=true"),
])
def test_sft_records_are_checked_by_name(tmp_path, line, msg):
    """Found by a review: the agent SFT dataset read records with a bare JSON loop, so a record without a training
    segment crashed with 'index 0 is out of bounds' and a missing field with a bare KeyError, both without a file."""
    (tmp_path / "r.jsonl").write_text(line + "\n")
    with pytest.raises(ValueError, match=re.escape(msg)):
        read_records(tmp_path / "r.jsonl")


@pytest.mark.parametrize("config,block", [("agent_sft:1", "data"), ("agent_sft:2", "data"), ("agent_grpo:", "grpo"),
                                          ("openread_sft:", "data"), ("openread_grpo:", "grpo")])
def test_qwen_presets_pad_with_the_tokenizers_pad_token(tmp_path, config, block):
    """Found walking docs/agent.md: `jaxdrive train sft --config configs/agent_sft.py:1` on a model smaller than
    Qwen's vocabulary (the tiny OpenREAD policy) logged loss nan at every step: the preset's fixed pad id 151643 lay
    beyond the vocabulary and the embedding lookup of the padding returned NaN (openread_sft / openread_grpo had the
    same id). The presets pad with the tokenizer's pad token."""
    import importlib

    from jaxdrive.models.tokenizer_testing import TEST_VOCAB_SIZE, build_test_tokenizer
    from jaxdrive.train.jobs import token_ids

    module, _, phase = config.partition(":")
    cfg = importlib.import_module(f"jaxdrive.configs.{module}").get_config(*([phase] if phase else []))
    tok = build_test_tokenizer(str(tmp_path / "tok"))
    pad = token_ids(cfg[block], tok).pad_id
    assert pad == tok.pad_token_id < TEST_VOCAB_SIZE


@pytest.mark.parametrize("used,want", [(5, []), (None, []), ("12", []), ({"1": 1}, []), ([1.0, True, 2, 9], ["m2"])])
def test_malformed_memory_used_names_nothing(mcq, used, want):
    """A model's ``memory_used`` that is not a list of entry numbers (a bare number, null) ended the episode with a
    TypeError; it cites nothing instead, and the valid numbers of a list are kept."""
    replies = iter([json.dumps({"action": {"tool": "get_ego_states", "arguments": {}}}),
                    json.dumps({"finish": True, "final_answer": "A) x", "memory_used": used})])
    t = run_episode(lambda m: next(replies), _ctx(mcq[0]), REG, mcq[0], retrieved=["m1", "m2"])
    assert t["termination"] == "finish" and t["memory_used"] == want


def test_a_crashing_tool_is_an_illegal_call(mcq):
    """A tool that raises on valid arguments (an overflow, a bug) came back as an error observation but counted as a
    legal call in the reward (tier 1 / 4 without one working tool call); it is counted as a crash, shown to the policy
    with its exception, and fails the legality check, in the loop's counters and in the reward alike."""
    from jaxdrive.agent.reward import legal_tool_call
    from jaxdrive.agent.tools import CORE_TOOLS, Tool, ToolRegistry

    broken = Tool("broken", "raises", {"type": "object", "properties": {"n": {"type": "number"}}},
                  lambda ctx, n: 1 / (n - n))
    reg = ToolRegistry([broken] + [t for t in CORE_TOOLS if t.name == "get_ego_states"])
    replies = iter([json.dumps({"action": {"tool": "broken", "arguments": {"n": 3}}}),
                    json.dumps({"action": {"tool": "get_ego_states", "arguments": {}}}),
                    json.dumps({"finish": True, "final_answer": "A) x"})])
    t = run_episode(lambda m: next(replies), _ctx(mcq[0]), reg, mcq[0])
    c = t["counters"]
    assert t["termination"] == "finish" and (c["tool_calls"], c["useful_calls"]) == (2, 1)
    assert (c["tool_crashes"], c["tool_errors"], c["invalid_args"], c["unknown_tool"]) == (1, 0, 0, 0)
    crash = t["steps"][0]
    assert not crash["ok"] and "ZeroDivisionError" in crash["error"]
    observation = next(m for m in t["messages"] if m["kind"] == "observation")["content"]
    assert "ZeroDivisionError" in observation
    assert not legal_tool_call(dict(t, steps=t["steps"][:1])) and legal_tool_call(t)
