"""OpenREAD rewards: Eq. 7 known answers, format, semantic (MiniLM), LLM critic (tiny Qwen3 vs transformers),
knowledge mix, task routing, registry factories, and malformed completions scoring 0 without raising."""
import math

import ml_collections
import numpy as np
import pytest

from jaxdrive.eval.cot_format import format_cot, is_well_formed
from jaxdrive.eval.trajectory_text import format_trajectory
from jaxdrive.train import openread_rewards as R
from jaxdrive.train.registry import REWARDS
from jaxdrive.train.rewards import combine_rewards

GT = np.stack([np.arange(1, 7) * 2.0, np.zeros(6)], -1)  # 2 m per step straight ahead (text frame)


def planning_example(gt=GT):
    return {"task": "planning", "trajectory": gt, "question": "plan", "reference": format_trajectory(gt)}


def answer(points, think="go straight"):
    return format_cot(think, format_trajectory(points))


MALFORMED = [
    "", "go straight", "<think>x</think>",  # no answer
    "<think>x</think><answer>(1, 2), (3, 4)</answer>",  # 2 points
    "<answer>(a, b)</answer>", None, "<answer></answer>", "<think><answer>1</answer></think>",
]


def test_trajectory_reward_eq7_known_answers():
    ex = [planning_example()]
    traj = R.trajectory_reward()
    assert traj.fn([answer(GT)], ex) == pytest.approx([3.0])
    shifted = GT + [0.0, 1.0]  # 1 m lateral offset everywhere: d = (1, 1, 1)
    expect = 5 ** -0.7 + math.e ** -0.7 + math.e ** -0.3
    assert traj.fn([answer(shifted)], ex) == pytest.approx([expect], rel=1e-5)
    # offsets 1..6 m: per-second means (1.5, 3.5, 5.5) or cumulative (1.5, 2.5, 3.5)
    grow = GT + np.stack([np.zeros(6), np.arange(1, 7)], -1)
    sec = 5 ** (-1.5 * 0.7) + math.exp(-3.5 * 0.7) + math.exp(-5.5 * 0.3)
    cum = 5 ** (-1.5 * 0.7) + math.exp(-2.5 * 0.7) + math.exp(-3.5 * 0.3)
    assert traj.fn([answer(grow)], ex) == pytest.approx([sec], rel=1e-5)
    assert R.trajectory_reward(averaging="cumulative").fn([answer(grow)], ex) == pytest.approx([cum], rel=1e-5)
    e_bases = R.trajectory_reward(bases=(math.e,) * 3).fn([answer(shifted)], ex)
    assert e_bases == pytest.approx([math.exp(-0.7) * 2 + math.exp(-0.3)], rel=1e-5)
    # integer and exponent answers parse (the public parser would drop signs)
    text = "<think>a</think><answer>(2, 0), (4, 0), (6, 0), (8, 0), (1e1, 0), (12, -0)</answer>"
    assert traj.fn([text], ex) == pytest.approx([3.0])


def test_trajectory_reward_with_the_released_code_cutoffs_and_scale():
    """OpenREAD's released reward (OmniReward): a second's term is 0 when its mean L2 exceeds 3 / 5 / 7 m, and the sum
    is divided by 3. Neither is in the printed Eq. 7; both are options (they were not expressible)."""
    ex = [planning_example()]
    traj = R.trajectory_reward(cutoffs=R.OFFICIAL_CUTOFFS, scale=R.OFFICIAL_SCALE)
    assert traj.fn([answer(GT)], ex) == pytest.approx([1.0])
    one = (5 ** -0.7 + math.e ** -0.7 + math.e ** -0.3) / 3
    assert traj.fn([answer(GT + [0.0, 1.0])], ex) == pytest.approx([one], rel=1e-5)
    four = (math.exp(-4 * 0.7) + math.exp(-4 * 0.3)) / 3  # d = (4, 4, 4): the 1 s term is cut (4 > 3)
    assert traj.fn([answer(GT + [0.0, 4.0])], ex) == pytest.approx([four], rel=1e-5)
    assert traj.fn([answer(GT + [0.0, 8.0])], ex) == [0.0]  # every term cut
    cfg = ml_collections.ConfigDict(dict(cutoffs=[3.0, 5.0, 7.0], scale=1 / 3))
    assert REWARDS.get("openread_trajectory")(cfg).fn([answer(GT + [0.0, 4.0])], ex) == pytest.approx([four], rel=1e-5)
    for bad in (dict(cutoffs=(3.0, 5.0)), dict(cutoffs=(3.0, -1.0, 7.0)), dict(temperatures=(0.7, -0.7, 0.3))):
        with pytest.raises(ValueError, match="cutoffs|temperatures"):
            R.trajectory_reward(**bad)


@pytest.mark.parametrize("bad", MALFORMED)
def test_trajectory_reward_malformed_is_zero(bad):
    assert R.trajectory_reward().fn([bad], [planning_example()]) == [0.0]


def test_format_reward():
    fmt = R.format_reward()
    good = ["<think>a</think><answer>b</answer>", "  <think>\nx\n</think>\n <answer> y </answer>\n", answer(GT)]
    bad = ["<answer>b</answer>", "<think>a</think>", "<think>a</think><answer>b</answer> trailing",
           "<think>a</think><answer>b</answer><answer>c</answer>", "<think><think>a</think><answer>b</answer>",
           "<answer>b</answer><think>a</think>", ""]
    assert fmt.fn(good + bad, [{}] * (len(good) + len(bad))) == [1.0] * len(good) + [0.0] * len(bad)
    assert not is_well_formed(None)


def test_task_routing_sums_to_eq8():
    fmt, traj = R.format_reward(), R.trajectory_reward()
    completions = [answer(GT), "<think>a</think><answer>slow down</answer>"]
    examples = [planning_example(), {"task": "knowledge", "question": "q", "reference": "slow down"}]
    total, valid, parts = combine_rewards([traj, fmt], completions, examples)
    np.testing.assert_allclose(parts["traj"], [3.0, 0.0])  # knowledge row gets no trajectory reward
    np.testing.assert_allclose(total, [4.0, 1.0])
    assert valid.all()


class FixedCritic:
    """A stand-in scorer with the critic interface: p = 0.9 when the answer contains the reference, else 0.2."""

    def probabilities(self, questions, references, predictions):
        return np.asarray([0.9 if r in p else 0.2 for r, p in zip(references, predictions)])


class WordSimilarity:
    """Jaccard word overlap with the SentenceSimilarity interface (used where MiniLM's values are not the point)."""

    def cosine(self, a, b):
        return np.asarray([len(set(x.split()) & set(y.split())) / len(set(x.split()) | set(y.split())) for x, y in zip(a, b)])


def test_knowledge_reward_mixes_0_9_critic_and_0_1_semantic():
    know = R.knowledge_reward(FixedCritic(), WordSimilarity())
    ex = {"task": "knowledge", "question": "what now?", "reference": "slow down"}
    completions = ["<think>t</think><answer>slow down</answer>", "<think>t</think><answer>speed up now</answer>",
                   "slow down", "<think>t</think><answer> </answer>"]
    out = know.fn(completions, [ex] * 4)
    np.testing.assert_allclose(out, [0.9 + 0.1, 0.0, 0.0, 0.0])  # p 0.2 -> 0; no answer -> 0
    # counterfactual rows get it too, planning rows do not
    out = know.fn([completions[0]] * 2, [dict(ex, task="counterfactual"), dict(ex, task="planning")])
    assert out == pytest.approx([1.0, 0.0])
    total = R.total_reward(know, R.trajectory_reward(), R.format_reward())
    assert total.fn([completions[0], answer(GT)], [ex, planning_example()]) == pytest.approx([2.0, 4.0])


@pytest.fixture(scope="module")
def minilm():
    from jaxdrive.eval.semantic import SentenceSimilarity

    return SentenceSimilarity()


@pytest.mark.slow  # loading sentence-transformers + MiniLM takes ~30 s on a shared CPU
def test_semantic_reward_with_minilm_matches_sentence_transformers(minilm):
    """Cosine of answer span and reference against sentence-transformers' own ``util.cos_sim``; clipped at 0."""
    from sentence_transformers import util

    sem = R.semantic_reward(minilm)
    refs = ["I should decelerate", "The traffic light is red."]
    completions = ["<think>x</think><answer>I should accelerate</answer>", "<think>x</think><answer>The light is red</answer>"]
    out = sem.fn(completions, [{"task": "knowledge", "reference": r} for r in refs])
    enc = minilm.encoder.encode
    expect = [float(util.cos_sim(enc(p), enc(r))) for p, r in zip(["I should accelerate", "The light is red"], refs)]
    np.testing.assert_allclose(out, expect, atol=1e-5)
    assert 0.5 < out[0] < 0.75 < out[1]  # the paper's "decelerate vs accelerate ~ 0.6"
    assert sem.fn(MALFORMED[:3], [{"reference": "x"}] * 3) == [0.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def critic_pair(tmp_path_factory):
    """A tiny random Qwen3 saved with save_pretrained + the test tokenizer, loaded by our critic and by transformers."""
    pytest.importorskip("torch")
    from jaxdrive.eval.critic import QwenCritic
    from jaxdrive.models import testing as T
    from jaxdrive.models.tokenizer_testing import build_test_tokenizer

    path = tmp_path_factory.mktemp("critic")
    hf = T.save_tiny_model("qwen3", path, seed=5)
    build_test_tokenizer(str(path))
    return QwenCritic.from_pretrained(str(path), dtype=np.float32, batch_size=4, length_bucket=32), hf


def test_critic_probability_matches_transformers_and_is_batch_invariant(critic_pair):
    import torch

    critic, hf = critic_pair
    qs = ["Is it safe to turn?", "What is ahead?", "Why stop?", "Speed?", "Lane?"]
    refs = ["No, a cyclist is crossing.", "A red light.", "Pedestrians.", "30 km/h", "left"]
    preds = ["Yes.", "A red traffic light ahead.", "There are people crossing the road.", "fast", "the left lane"]
    p = critic.probabilities(qs, refs, preds)  # 5 rows: two batches of 4 (the second padded)
    assert p.shape == (5,) and ((p > 0) & (p < 1)).all()
    ids = critic.ids.tolist()
    yes = np.asarray(critic.is_yes) > 0
    for i in range(5):
        prompt = critic.render(qs[i], refs[i], preds[i])
        with torch.no_grad():
            logits = hf(torch.tensor([prompt])).logits[0, -1].numpy()[ids]
        q = np.exp(logits - logits.max())
        assert p[i] == pytest.approx((q[yes].sum() / q.sum()), abs=1e-4)
    alone = critic.probabilities(qs[3:4], refs[3:4], preds[3:4])
    assert alone[0] == pytest.approx(p[3], abs=1e-5)
    reward = R.critic_reward(critic)
    out = reward.fn([format_cot("t", x) for x in preds] + ["no tags"], [{"question": q, "reference": r} for q, r in
                                                                      zip(qs + ["q"], refs + ["r"])])
    np.testing.assert_array_equal(out, list((p > 0.5).astype(float)) + [0.0])


def test_registry_factories_build_the_rewards():
    cfg = ml_collections.ConfigDict(dict(weight=2.0, bases=[math.e] * 3, temperatures=[1.0, 1.0, 1.0]))
    traj = REWARDS.get("openread_trajectory")(cfg)
    assert traj.weight == 2.0
    assert traj.fn([answer(GT + [0.0, 1.0])], [planning_example()]) == pytest.approx([3 * math.exp(-1)], rel=1e-5)
    fmt = REWARDS.get("openread_format")(ml_collections.ConfigDict())
    assert fmt.fn(["<think>a</think><answer>b</answer>"], [{}]) == [1.0]
    with pytest.raises(ValueError, match="critic.path"):
        REWARDS.get("openread_critic")(ml_collections.ConfigDict(dict(critic=dict(kind="pretrained", path=""))))
    with pytest.raises(ValueError, match="bases"):
        REWARDS.get("openread_trajectory")(ml_collections.ConfigDict(dict(bases=[5.0, 0.0, 1.0])))


def test_full_config_decoder_gives_a_terminated_completion_its_format_reward():
    """The sampler keeps the stop token in the completion (mask True); configs/openread_grpo.py decoded it with
    skip_special_tokens=False, so every well-formed completion ended in '<|im_end|>' and R_format was 0 for all.
    The tiny tokenizer's tags are plain added tokens, as <think>/<answer> are in the Qwen3(-VL) tokenizers."""
    from jaxdrive.configs.openread_grpo import get_config
    from jaxdrive.train.openread_tiny import EOS_ID, train_tokenizer
    from jaxdrive.train.tiny_recipes import tokenizer_decoder

    target = format_cot("Go straight.", format_trajectory(np.arange(12.0).reshape(6, 2)))
    tok = train_tokenizer([target] * 4, vocab_size=300)
    ids = tok.encode(target + "<|im_end|>", add_special_tokens=False)
    assert ids[-1] == EOS_ID
    text = tokenizer_decoder(get_config().decoder, tok)(np.asarray(ids), np.ones(len(ids)))
    assert R.format_reward().fn([text], [{"task": "planning"}]) == [1.0]
    assert R.trajectory_reward().fn([text], [planning_example(np.arange(12.0).reshape(6, 2))]) == [3.0]
