"""GRPO end to end on the tiny VLM and the verifiable "is the image bright?" task (a shortened run of
benchmarks/grpo_sft_vs_zero.py): from a format-SFT warm start the sampled reward rises; the zero-shot start is
reported (a random model never emits a well-formed answer, so its groups have zero reward variance)."""
import numpy as np
import pytest

from jaxdrive.train import jobs
from jaxdrive.train.grpo_trainer import Rollouts
from jaxdrive.train.rewards import Reward
from jaxdrive.train.testing import bright_examples, decode, tiny_vlm, warm_vs_zero_configs


@pytest.mark.slow
def test_grpo_from_sft_warm_start_raises_reward_and_zero_shot_is_reported(tmp_path):
    s, g = warm_vs_zero_configs(grpo_steps=40, sft_steps=40, workdir=str(tmp_path / "grpo"))
    g.optim.lr, g.eval_every, g.log_stdout = 1e-2, 20, False
    sft_trainer, sft_records = jobs.run_sft(s)
    assert sft_records[-1]["loss"] < 0.45  # format learned: eos is certain, yes/no a coin flip (ln 2 / 2 = 0.35)
    trainer, records = jobs.run_grpo(g, model=sft_trainer.model())
    reward = np.array([r["reward_mean"] for r in records])
    first, last = reward[:10].mean(), reward[-10:].mean()
    print(f"SFT-warm GRPO: sampled reward {first:.3f} -> {last:.3f}")
    assert last > first + 0.1
    for key in ("loss", "kl", "clip_frac", "entropy", "zero_std_frac", "reward_std", "tokens_per_s"):
        assert np.isfinite(records[-1][key]), key
    assert max(r["kl"] for r in records) > 0.0  # the reference (adapters off) differs from the policy
    zs_cfg = g.copy_and_resolve_references()
    zs_cfg.steps, zs_cfg.workdir = 10, ""
    _, zero = jobs.run_grpo(zs_cfg, model=tiny_vlm(g.model.seed))
    zr = np.array([r["reward_mean"] for r in zero])
    print(f"zero-shot GRPO: sampled reward {zr.mean():.3f}, zero-std groups {np.mean([r['zero_std_frac'] for r in zero]):.2f}")


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
                 tx=optim.make_optimizer(g.optim, 1), progress=False)
    with pytest.raises(ValueError, match="reward 'flaky': NaN/missing value at row 0"):
        tr.run(1, rollouts)
