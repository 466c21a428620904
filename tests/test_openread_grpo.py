"""The OpenREAD recipe end to end through ``jaxdrive train``: tiny policy directory -> cold-start SFT with export ->
joint GRPO with the composite reward (critic + trajectory + format) for a few steps."""
import json
from pathlib import Path

import numpy as np
import pytest

from jaxdrive.cli import main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.slow  # three jitted programs (SFT step, generation, GRPO step) on a 1-layer model
def test_cold_start_then_joint_grpo_through_the_cli(tmp_path):
    from jaxdrive.train.openread_tiny import build_tiny_policy

    policy, cold, work = tmp_path / "policy", tmp_path / "cold", tmp_path / "grpo"
    build_tiny_policy(str(policy), vocab_size=600, num_scenes=6, hidden=32, layers=1)
    assert main(["train", "sft", "--config", str(CONFIGS / "openread_sft_tiny.py"), f"model.path={policy}", "steps=2",
                 "batch_size=4", "optim.warmup_steps=0", "data.num_scenes=3", "data.max_len=384", f"export_dir={cold}", "progress=False"]) == 0
    assert (cold / "model.safetensors").exists() and (cold / "tokenizer.json").exists()
    overrides = [f"model.path={cold}", f"workdir={work}", "steps=2", "progress=False", "log_every=1", "eval_every=2",
                 "grpo.prompts_per_step=2", "grpo.completion_len=12", "grpo.prompt_len=256",
                 "data.sources.planning.num_scenes=3", "data.sources.knowledge.num_scenes=2",
                 "eval_data.sources.planning.num_scenes=2", "eval_data.sources.knowledge.num_scenes=1",
                 "eval_data.sources.planning.max_examples=2", "eval_data.sources.knowledge.max_examples=2",
                 "rewards.openread_knowledge.w_semantic=0.0", "rewards.openread_knowledge.critic.batch_size=4",
                 "rewards.openread_knowledge.critic.kind=tiny"]
    assert main(["train", "grpo", "--config", str(CONFIGS / "openread_grpo_tiny.py"), *overrides]) == 0
    rows = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward_mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        for part in ("train/reward/know", "train/reward/traj", "train/reward/format"):
            assert np.isfinite(r[part])
        assert 0 <= r["train/reward/traj"] <= 3 and 0 <= r["train/reward/format"] <= 1
    assert any("eval/greedy/reward_mean" in r or "greedy/reward_mean" in r for r in rows)
