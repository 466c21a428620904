"""Multi-turn GRPO with tool calls: lockstep episodes on the tiny model (the host runs the tools between turns),
observation tokens in the attention mask but out of the loss mask, rewards = the tiered reward of each episode; a
short `jaxdrive train grpo` job with configs/agent_grpo_tiny.py; the text codec on a byte-level Qwen tokenizer."""
import json

import jax
import numpy as np
import pytest

from jaxdrive.configs import agent_grpo_tiny
from jaxdrive.agent.grpo_rollout import MultiTurnRollouts, TextAgentCodec, TinyAgentCodec
from jaxdrive.agent.reward import TIER_REWARD, tier
from jaxdrive.agent.tools import default_registry
from jaxdrive.train import optim
from jaxdrive.train.grpo_trainer import grpo_loss_fn
from jaxdrive.train.jobs import build_decoder, build_examples, build_model, build_rewards, prepare_finetuning
from jaxdrive.train.trainer import Trainer


def _cfg(steps=2):
    cfg = agent_grpo_tiny.get_config()
    cfg.steps, cfg.progress, cfg.workdir = steps, False, ""
    cfg.checkpoint.enabled = False
    cfg.data.num_scenes, cfg.eval_data.num_scenes = 2, 1
    cfg.optim.warmup_steps = 0
    cfg.grpo.prompts_per_step = 2
    return cfg


@pytest.mark.slow
def test_multi_turn_rollout_masks_and_rewards():
    cfg = _cfg()
    model = build_model(cfg.model)
    trainable = prepare_finetuning(model, cfg.finetune)
    examples = build_examples(cfg.data)
    ro = MultiTurnRollouts(examples, build_rewards(cfg.rewards), build_decoder(cfg.decoder), cfg.grpo)
    trainer = Trainer(model, loss_fn=grpo_loss_fn(cfg.grpo), tx=optim.make_optimizer(cfg.optim, 2),
                      trainable=trainable, progress=False)
    rows = [examples[i] for i in ro.sampler.indices(0) for _ in range(cfg.grpo.group_size)]
    tokens, loss_mask, attn, trajs = ro.episodes(trainer, rows, jax.random.key(3))
    codec = TinyAgentCodec()
    context_only = {codec.OBS, codec.ERROR} | set(codec.VALUE.values())
    n_obs = 0
    for i, t in enumerate(trajs):
        real = attn[i].astype(bool)
        gen = loss_mask[i].astype(bool)
        assert np.all(real[: real.sum()]) and not np.any(gen & ~real)  # contiguous, loss only on real tokens
        assert gen.sum() == t["counters"]["turns"]  # one generated token per turn
        obs_tokens = tokens[i][real & ~gen]
        assert set(obs_tokens.tolist()) <= context_only  # everything the host appended is out of the loss
        n_obs += len(obs_tokens)
        g = [int(x) for x in tokens[i][gen]]
        if t["counters"]["turns"] == cfg.grpo.max_tool_turns + 1:
            g = g[:-1]  # a tool token in the answer turn is not executed
        assert sum(x in codec.TOOL for x in g) == len(t["steps"]) + t["counters"]["repeated"]
    assert n_obs > 0  # the random policy called tools, observations were appended
    total, valid, _ = ro._score(rows, tokens, loss_mask, trajs)
    np.testing.assert_allclose(total, [TIER_REWARD[tier(t)] for t in trajs])
    batch, metrics = ro(trainer, 1, jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(batch["completion_mask"]).sum(1) > 0, True)
    assert 0.0 <= metrics["reward_mean"] <= 0.7 and 0.0 <= metrics["tool_calls"] <= cfg.grpo.max_tool_turns


def test_tiny_codec_and_tool_observations():
    from agent_scenes import known_scene

    from jaxdrive.agent.tools import ToolContext

    c = TinyAgentCodec()
    item = {"kind": "leading", "options": {"A": "No", "B": "Yes"}}
    assert c.prompt(item) == [c.QUESTION, c.KIND["leading"], c.LETTER["A"], c.VALUE["No"], c.LETTER["B"],
                              c.VALUE["Yes"]]
    assert c.parse([32]) == ("tool", "get_leading_object_detection", {})
    assert c.parse([c.LETTER["B"]]) == ("finish", {"final_answer": "B"}) and c.parse([5]) == ("malformed",)
    ctx, reg = ToolContext.from_scene(known_scene()), default_registry()
    assert c.observation(reg.call(ctx, "get_leading_object_detection", {})) == [c.OBS, c.VALUE["Yes"]]
    assert c.observation(reg.call(ctx, "get_front_object_detections", {})) == [c.OBS, c.VALUE["2"]]
    assert c.observation(reg.call(ctx, "get_ego_states", {})) == [c.OBS, c.VALUE["FORWARD"], c.VALUE["2 to 8 m/s"]]
    assert c.observation(reg.call(ctx, "teleport", {})) == [c.ERROR]


def test_text_codec_on_a_qwen_tokenizer(tmp_path):
    from jaxdrive.models.tokenizer_testing import build_test_tokenizer

    tok = build_test_tokenizer(str(tmp_path / "tok"))
    c = TextAgentCodec(tok)
    item = {"question": "Is there a leading object? A) Yes B) No", "stm": "ego: v=5.0m/s"}
    text = tok.decode(c.prompt(item))
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "get_leading_object_detection" in text and "ego: v=5.0m/s" in text
    call = json.dumps({"think": "x", "action": {"tool": "get_ego_states", "arguments": {}}}) + "<|im_end|>"
    assert c.parse(tok.encode(call, add_special_tokens=False)) == ("tool", "get_ego_states", {})
    fin = json.dumps({"finish": True, "final_answer": "B) No", "reasoning": "r"})
    kind, obj = c.parse(tok.encode(fin, add_special_tokens=False))
    assert (kind, obj["final_answer"], obj["reasoning"]) == ("finish", "B) No", "r")
    no_letter = json.dumps({"finish": True, "final_answer": "No"})  # a finish still: scored malformed output
    assert c.parse(tok.encode(no_letter, add_special_tokens=False))[0] == "finish"
    assert c.parse(tok.encode("no json", add_special_tokens=False)) == ("malformed",)
    from jaxdrive.agent.tools import Observation

    obs = tok.decode(c.observation(Observation("get_ego_states", True, {"speed": 5.0})))
    assert obs == '\n<|im_start|>user\nObservation (get_ego_states): {"result":{"speed":5.0}}<|im_end|>\n' \
                  "<|im_start|>assistant\n"


@pytest.mark.slow
def test_agent_grpo_job_runs(tmp_path):
    from jaxdrive.train.jobs import run_grpo

    cfg = _cfg(steps=2)
    cfg.workdir = str(tmp_path)
    cfg.eval_every = 2
    _, records = run_grpo(cfg)
    train = [r for r in records if "reward_mean" in r and "accuracy" in r and "tool_calls" in r]
    assert len(train) == 2 and all(np.isfinite(r["loss"]) for r in train)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/greedy/reward_mean" in x for x in lines)


@pytest.mark.slow
def test_text_codec_episode_on_a_byte_level_tiny_model(tmp_path):
    """The pretrained-model path: the loop's JSON protocol through a Qwen tokenizer, a tiny random model (vocab 263)
    generating turns; whatever it emits, the loss mask covers only generated tokens and the rejected-reply feedback
    the host appends is context."""
    from flax import nnx

    from jaxdrive.agent.mcq import make_mcq_set
    from jaxdrive.models.config import parse_config
    from jaxdrive.models.tokenizer_testing import TEST_TOKEN_IDS, build_test_tokenizer
    from jaxdrive.models.vlm import QwenModel
    from jaxdrive.train.tiny_recipes import TINY_CONFIG

    tok = build_test_tokenizer(str(tmp_path / "tok"))
    raw = dict(TINY_CONFIG, vocab_size=263, image_token_id=TEST_TOKEN_IDS["<|image_pad|>"],
               vision_start_token_id=TEST_TOKEN_IDS["<|vision_start|>"], eos_token_id=TEST_TOKEN_IDS["<|im_end|>"])
    model = QwenModel(parse_config(raw), rngs=nnx.Rngs(0))
    cfg = _cfg()
    from jaxdrive.agent.tools import CORE_TOOLS, ToolRegistry

    registry = ToolRegistry([t for t in CORE_TOOLS if t.name == "get_ego_states"])  # a short system prompt
    codec = TextAgentCodec(tok, turn_tokens=6, registry=registry)
    item = make_mcq_set(1, seed=7, kinds=("speed",))[0]
    rows = [{"prompt": np.asarray(codec.prompt(item), np.int32), "item": item, "gold": item["gold"]}] * 2
    cfg.grpo.update(dict(prompt_len=len(rows[0]["prompt"]), completion_len=160, max_tool_turns=1,
                         eos_id=TEST_TOKEN_IDS["<|im_end|>"], pad_id=TEST_TOKEN_IDS["<|endoftext|>"], group_size=2))
    ro = MultiTurnRollouts(rows, build_rewards(cfg.rewards), codec.words, cfg.grpo, codec=codec)
    trainer = Trainer(model, loss_fn=grpo_loss_fn(cfg.grpo), tx=optim.make_optimizer(cfg.optim, 2),
                      trainable=nnx.Param, progress=False)
    tokens, loss_mask, attn, trajs = ro.episodes(trainer, rows, jax.random.key(0))
    for i, t in enumerate(trajs):
        gen = loss_mask[i].astype(bool)
        assert 1 <= gen.sum() <= 2 * codec.turn_tokens and t["counters"]["turns"] == 2
        context = tok.decode(tokens[i][attn[i].astype(bool) & ~gen])
        assert t["termination"] == "max_turns"  # every non-final turn appends one user turn (observation/feedback)
        assert context.count("<|im_start|>user") == t["counters"]["turns"] - 1
    total, _, _ = ro._score(rows, tokens, loss_mask, trajs)
    assert np.all(total == 0.0)  # a random byte model answers nothing parseable: tier 6


def test_missing_rewards_are_left_out_of_the_agent_metrics_and_evaluation():
    """With allow_missing_rewards, a row no reward scored is invalid: the agent rollout's evaluation averaged it as 0
    and zero_std_frac counted that 0 as spread (a group of valid 1s and a missing row looked informative)."""
    cfg = _cfg()
    cfg.grpo.group_size, cfg.grpo.prompts_per_step = 4, 1
    examples = build_examples(cfg.data)
    ro = MultiTurnRollouts(examples, build_rewards(cfg.rewards), build_decoder(cfg.decoder), cfg.grpo)
    traj = {"final_answer": "A", "gold": "A", "counters": {"tool_calls": 0}, "termination": "finish"}
    ro.episodes = lambda trainer, rows, key: (np.zeros((len(rows), 2), np.int32), np.ones((len(rows), 2)),
                                              np.ones((len(rows), 2)), [traj] * len(rows))
    ro._score = lambda rows, tokens, mask, trajs: (np.array([1.0, 0.0, 1.0, 1.0][:len(rows)]),
                                                   np.array([True, False, True, True][:len(rows)]), {})
    ro.buffer_inputs = lambda *args: None
    _, metrics = ro(None, 1, jax.random.key(0))
    assert metrics["reward_mean"] == 1.0 and metrics["zero_std_frac"] == 1.0
    assert ro.evaluate(None, examples[:4])["reward_mean"] == 1.0


def _speed_item(memory: str = "") -> tuple:
    """A synthetic speed question with its short-term memory, two retrieved entries ``m7`` / ``m9`` described by
    ``memory``, and its scene's tool context."""
    from jaxdrive.agent import stm
    from jaxdrive.agent.mcq import make_mcq_set
    from jaxdrive.agent.tools import ToolContext
    from jaxdrive.data.synthetic import generate_scene

    item = make_mcq_set(1, seed=7, kinds=("speed",))[0]
    ctx = ToolContext.from_scene(generate_scene(item["scene_seed"], num_proposals=1))
    return dict(item, stm=stm.build(ctx).serialise(), retrieved=["m7", "m9"], memory=memory), ctx


def _loop_and_rollout(tmp_path, monkeypatch, item, ctx, replies):
    """The loop's trajectory and the text-codec rollout's trajectories (two rows) and rewards when the policy emits
    ``replies`` in turn, the loop reading one per turn and the rollout generating one per turn."""
    from types import SimpleNamespace

    from jaxdrive.agent import grpo_rollout
    from jaxdrive.agent.loop import run_episode
    from jaxdrive.models.tokenizer_testing import TEST_TOKEN_IDS, build_test_tokenizer

    loop_traj = run_episode(lambda msgs: replies[len(msgs) // 2 - 1], ctx, default_registry(), item, stm=item["stm"],
                            memory=item["memory"], retrieved=item["retrieved"])
    tok = build_test_tokenizer(str(tmp_path / "tok"))
    codec = TextAgentCodec(tok)
    im_end = TEST_TOKEN_IDS["<|im_end|>"]
    turns = iter([tok.encode(r, add_special_tokens=False) + [im_end] for r in replies])

    def scripted_generate(*args):  # the policy's turns: the loop's replies, one per call, for both rows
        ids = np.asarray([next(turns)] * 2, np.int32)
        return SimpleNamespace(tokens=ids, mask=np.ones_like(ids, bool))

    monkeypatch.setattr(grpo_rollout, "_generate", scripted_generate)
    trainer = SimpleNamespace(graphdef=None, params=None, rest=None, shard_batch=lambda x: x,
                              model=lambda: SimpleNamespace(prepare_inputs=lambda ids, mask, bucket: None))
    cfg = _cfg()
    rows = [{"prompt": np.asarray(codec.prompt(item), np.int32), "item": item, "gold": item["gold"]}] * 2
    cfg.grpo.update(dict(prompt_len=len(rows[0]["prompt"]), completion_len=4096, group_size=2, eos_id=im_end,
                         pad_id=TEST_TOKEN_IDS["<|endoftext|>"]))
    ro = MultiTurnRollouts(rows, build_rewards(cfg.rewards), codec.words, cfg.grpo, codec=codec)
    tokens, loss_mask, _, trajs = ro.episodes(trainer, rows, jax.random.key(0))
    total, _, _ = ro._score(rows, tokens, loss_mask, trajs)
    return loop_traj, trajs, total


def test_rollout_reward_equals_the_loop_reward_with_memory(tmp_path, monkeypatch):
    """The rollouts recorded ``memory_used = []`` whatever the answer cited, so with retrieved long-term memory in the
    prompt the training reward (tier 2, 0.5) differed from the loop's (tier 1, 0.7) for the same replies; both now map
    the answer's entry numbers to the retrieved ids the same way (out-of-range numbers name nothing)."""
    from jaxdrive.agent.reward import tiered_reward

    item, ctx = _speed_item("[1] conditions: dense traffic ahead; risks: sudden braking\n"
                            "[2] tool strategy: read ego speed")
    gold = item["gold"]
    replies = [json.dumps({"think": "speed?", "action": {"tool": "get_ego_states", "arguments": {}}}),
               json.dumps({"finish": True, "memory_used": [1, 2, 5],
                           "reasoning": "Dense traffic ahead, so read ego speed: the ego speed answers it.",
                           "final_answer": f"{gold}) {item['options'][gold]}"})]
    loop_traj, trajs, total = _loop_and_rollout(tmp_path, monkeypatch, item, ctx, replies)
    assert loop_traj["correct"] and loop_traj["memory_used"] == ["m7", "m9"]
    assert [t["termination"] for t in trajs] == ["finish"] * 2
    assert [t["memory_used"] for t in trajs] == [loop_traj["memory_used"]] * 2
    assert tiered_reward([""], [{"trajectory": loop_traj}]) == [TIER_REWARD[1]]
    np.testing.assert_allclose(total, [TIER_REWARD[1]] * 2)  # float32


@pytest.mark.parametrize("answer_reply", [
    {"finish": True, "reasoning": "It is slow.", "final_answer": "the ego is slow"},  # no option letter
    {"finish": True, "reasoning": "r", "final_answer": "Answer: B", "action": {"tool": "get_ego_states"}},  # both
])
def test_rollout_ends_where_the_loop_ends_on_the_same_replies(tmp_path, monkeypatch, answer_reply):
    """A finish whose answer has no option letter ended the loop's episode (malformed output, tier 6) but was a
    malformed reply to the rollout's text codec, which gave the policy another turn (a later correct answer: tier 1
    or 2); a reply with both a finish and an action was a finish to the loop and a (repeated) tool call to the
    codec. Both read a reply by one rule (``loop.read_reply``): the same turns, steps, answer and reward."""
    from jaxdrive.agent.reward import tiered_reward

    item, ctx = _speed_item()
    gold = item["gold"]
    replies = [json.dumps({"think": "speed?", "action": {"tool": "get_ego_states", "arguments": {}}}),
               json.dumps(answer_reply),
               json.dumps({"finish": True, "reasoning": "r", "final_answer": f"{gold}) {item['options'][gold]}"})]
    loop_traj, trajs, total = _loop_and_rollout(tmp_path, monkeypatch, item, ctx, replies)
    assert loop_traj["termination"] == "finish" and loop_traj["counters"]["turns"] == 2
    assert tiered_reward([""], [{"trajectory": loop_traj}]) == [TIER_REWARD[6]]
    for t in trajs:
        assert (t["termination"], t["counters"]["turns"], t["final_answer"]) == \
            ("finish", 2, loop_traj["final_answer"])
        assert [s["action"] for s in t["steps"]] == [s["action"] for s in loop_traj["steps"]]
    np.testing.assert_allclose(total, [TIER_REWARD[6]] * 2)


@pytest.mark.parametrize("reasoning", [["Step 1: read the speed.", "Step 2: answer."], None, {"why": "slow"}],
                         ids=["list", "null", "object"])
def test_rollout_records_the_reasoning_as_the_loop_does(tmp_path, monkeypatch, reasoning):
    """A model's non-string reasoning: the loop records it as text (``loop.reasoning_text``), the rollouts stored its
    Python ``str()`` ("['Step 1: ...']", "None")."""
    item, ctx = _speed_item()
    gold = item["gold"]
    replies = [json.dumps({"think": "speed?", "action": {"tool": "get_ego_states", "arguments": {}}}),
               json.dumps({"finish": True, "reasoning": reasoning,
                           "final_answer": f"{gold}) {item['options'][gold]}"})]
    loop_traj, trajs, _ = _loop_and_rollout(tmp_path, monkeypatch, item, ctx, replies)
    assert isinstance(loop_traj["reasoning"], str)
    assert [t["reasoning"] for t in trajs] == [loop_traj["reasoning"]] * 2
