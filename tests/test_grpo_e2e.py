"""GRPO end to end on the tiny VLM and the verifiable "is the image bright?" task (a shortened run of
benchmarks/grpo_sft_vs_zero.py): from a format-SFT warm start the sampled reward rises; the zero-shot start is
reported (a random model never emits a well-formed answer, so its groups have zero reward variance)."""
import ml_collections
import numpy as np
import pytest

from jaxdrive.train import jobs
from jaxdrive.train.grpo_trainer import Rollouts
from jaxdrive.train.metrics import read_jsonl
from jaxdrive.train.rewards import Reward
from jaxdrive.train.tiny_recipes import bright_examples, decode, tiny_vlm, warm_vs_zero_configs


@pytest.mark.slow
def test_grpo_from_sft_warm_start_raises_reward_and_zero_shot_is_reported(tmp_path):
    s, g = warm_vs_zero_configs(grpo_steps=30, sft_steps=40, workdir=str(tmp_path / "grpo"))
    g.eval_every, g.log_stdout = 30, False
    sft_trainer, sft_records = jobs.run_sft(s)
    assert sft_records[-1]["loss"] < 0.45  # format learned: eos is certain, yes/no a coin flip (ln 2 / 2 = 0.35)
    trainer, records = jobs.run_grpo(g, model=sft_trainer.model())
    greedy = {r["step"]: r["eval/greedy/reward_mean"] for r in trainer.history if "eval/greedy/reward_mean" in r}
    sampled = np.array([r["reward_mean"] for r in records])
    print(f"SFT-warm GRPO: greedy eval reward {greedy}, sampled reward first 10 steps {sampled[:10].mean():.3f} "
          f"-> last 10 {sampled[-10:].mean():.3f}")
    assert greedy[0] <= 0.6  # the format-only warm start answers at chance ...
    assert greedy[30] >= 0.9  # ... GRPO makes the greedy answer right
    for key in ("loss", "kl", "clip_frac", "entropy", "zero_std_frac", "reward_std", "tokens_per_s"):
        assert np.isfinite(records[-1][key]), key
    assert max(r["kl"] for r in records) > 0.0  # the reference (adapters off) differs from the policy
    assert max(r["clip_frac"] for r in records) > 0.0  # the second policy epoch moves ratios off 1
    recs = read_jsonl(str(tmp_path / "grpo" / "metrics.jsonl"))
    assert {"train/reward_mean", "train/zero_std_frac", "eval/greedy/reward_mean"} <= set().union(*recs)

    zero_cfg = g.copy_and_resolve_references()
    zero_cfg.steps, zero_cfg.workdir = 10, ""
    _, zero = jobs.run_grpo(zero_cfg, model=tiny_vlm(g.model.seed))
    zero_std = np.mean([r["zero_std_frac"] for r in zero])
    print(f"zero-shot GRPO: sampled reward {np.mean([r['reward_mean'] for r in zero]):.3f}, zero-std groups {zero_std:.2f}")
    assert zero_std > 0.8  # a random model almost never answers well-formed: no reward variance, no signal


def test_nan_reward_in_the_loop_is_an_error():
    _, g = warm_vs_zero_configs(grpo_steps=1)
    g.grpo.beta = 0.0
    model = tiny_vlm()
    from jaxdrive.train import optim
    from jaxdrive.train.grpo_trainer import grpo_loss_fn
    from jaxdrive.train.trainer import Trainer

    flaky = Reward("flaky", lambda comps, exs: [float("nan")] + [1.0] * (len(comps) - 1))
    rollouts = Rollouts(bright_examples(8), [flaky], decode, g.grpo)
    tr = Trainer(model, loss_fn=grpo_loss_fn(g.grpo),
                 tx=optim.make_optimizer(g.optim, 10), progress=False)
    with pytest.raises(ValueError, match="reward 'flaky': NaN/missing value at row 0"):
        tr.run(1, rollouts)


def test_a_completion_ends_at_any_of_the_stop_ids():
    """Qwen's generation_config lists two stop tokens (<|im_end|>, <|endoftext|>): the rollout used only ``eos_id``,
    so a completion that emitted the other one ran on to ``completion_len`` with every token in the loss mask."""
    from jaxdrive.train import optim
    from jaxdrive.train.grpo_trainer import grpo_loss_fn
    from jaxdrive.train.trainer import Trainer

    _, g = warm_vs_zero_configs(grpo_steps=1)
    g.grpo.completion_len, g.grpo.prompts_per_step = 4, 2

    def block(**kw):
        return ml_collections.ConfigDict(dict(g.grpo.to_dict(), **kw))

    examples = [{"prompt": np.asarray([7, 8, 5], np.int32)}, {"prompt": np.asarray([7, 6], np.int32)}]
    tr = Trainer(tiny_vlm(), loss_fn=grpo_loss_fn(g.grpo), tx=optim.make_optimizer(g.optim, 10), progress=False)
    free = Rollouts(examples, [], decode, block(eos_id=47))
    tokens, mask = free.generate(tr, examples, None)  # greedy, no stop among the first tokens
    assert mask[:, 0].all() and not (tokens[:, 0] == 47).any()
    cfg = jobs.token_ids(block(eos_id=None, stop_ids=[47, int(tokens[0, 0])]))
    assert cfg.eos_id == 47 and list(cfg.stop_ids) == [47, int(tokens[0, 0])]
    stopped, smask = Rollouts(examples, [], decode, cfg).generate(tr, examples, None)
    assert smask[0].tolist() == [1, 0, 0, 0] and stopped[0, 0] == tokens[0, 0]
    assert (stopped[0, 1:] == g.grpo.pad_id).all()
