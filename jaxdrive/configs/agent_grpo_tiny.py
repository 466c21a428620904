"""Multi-turn GRPO with tool calls on the tiny random Qwen2.5-VL: the synthetic MCQ set in the tiny agent token
language (``jaxdrive.agent.grpo_rollout``), the tiered reward of Table 8, the host running the tools between
generation turns (observation tokens masked out of the loss).

    jaxdrive train grpo --config configs/agent_grpo_tiny.py workdir=/tmp/agent_grpo steps=60
"""
import ml_collections

from jaxdrive.configs import grpo_tiny


def get_config() -> ml_collections.ConfigDict:
    c = grpo_tiny.get_config()
    c.steps = 60
    c.log_every = 5
    c.eval_every = 20
    c.finetune.mode = "full"
    c.data = ml_collections.ConfigDict(dict(kind="agent_tiny_mcq", num_scenes=16, seed=0))
    c.eval_data = ml_collections.ConfigDict(dict(kind="agent_tiny_mcq", num_scenes=4, seed=1000))
    c.rewards = ml_collections.ConfigDict({"agent_tiered": dict(weight=1.0)})
    c.decoder = ml_collections.ConfigDict(dict(kind="agent_tiny"))
    c.grpo.rollouts = "agent_multi_turn"
    c.grpo.max_tool_turns = 3  # Table 9 uses 7; 3 + 1 answer turn keep the tiny buffer short
    c.grpo.prompt_len = 10  # Q, kind, up to 4 x (letter, option)
    c.grpo.completion_len = 16  # 4 turns x (1 action token + up to 3 observation tokens)
    c.grpo.group_size = 8
    c.grpo.prompts_per_step = 4
    c.grpo.beta = 0.0  # full fine-tuning: no adapter-free reference
    c.grpo.policy_epochs = 1
    c.optim.lr = 3e-3
    c.checkpoint.best_metric = "reward_mean"
    return c
