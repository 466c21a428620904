"""Trajectory-level multi-turn GRPO of the memory-tool agent (paper Table 9, phase v0 of Table 10): tiered reward
(Table 8), G = 8, 2 prompts per generation batch, temperature 1.0, clip 0.2 (symmetric), k3 KL in the loss with
beta = 0.001 against the adapter-free reference, one policy epoch (on-policy), per-group standardised advantages,
lr 1e-6 with 25 % warmup (cosine), AdamW (0.9, 0.95) wd 0.01, clip 1.0, at most 7 tool turns + 1 answer turn, the host
running the tools between generation turns (``grpo.rollouts = "agent_multi_turn"``, text codec).

    jaxdrive train grpo --config configs/agent_grpo.py model.path=/ckpt/phase2-merged workdir=/runs/agent_grpo

Differences (noted): top-p 0.95 / top-k 50 are not applied (the GRPO sampler uses temperature only); the completion
budget of 1,536 tokens covers generated and observation tokens together; the prompt carries the tool specs, so
``prompt_len`` is larger than the paper's 512.
"""
import ml_collections

from jaxdrive.configs import grpo_tiny


def get_config() -> ml_collections.ConfigDict:
    c = grpo_tiny.get_config()
    c.seed = 42
    c.steps = 800
    c.log_every = 1
    c.eval_every = 50
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path="", dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="lora", freeze_vision=True, lora_rank=16, lora_alpha=32.0,
                                                lora_targets=r"language_model\..*_proj", seed=42))
    c.data = ml_collections.ConfigDict(dict(kind="agent_mcq", num_scenes=400, seed=0))
    c.eval_data = ml_collections.ConfigDict(dict(kind="agent_mcq", num_scenes=20, seed=100_000))
    c.rewards = ml_collections.ConfigDict({"agent_tiered": dict(weight=1.0)})
    c.decoder = ml_collections.ConfigDict(dict(kind="tokenizer"))
    c.grpo.update(dict(rollouts="agent_multi_turn", max_tool_turns=7, turn_tokens=192, group_size=8,
                       prompts_per_step=2, prompt_len=4096, completion_len=1536, temperature=1.0, advantage="trl",
                       eps_low=0.2, eps_high=0.2, beta=0.001, kl="k3", policy_epochs=1,
                       # None: the model's generation_config.json eos ids (<|im_end|>, <|endoftext|>), else the
                       # tokenizer's eos; eos_id None: the first stop id
                       eos_id=ml_collections.FieldReference(None, field_type=int),
                       stop_ids=ml_collections.FieldReference(None, field_type=list),
                       pad_id=ml_collections.FieldReference(None, field_type=int),  # None: the tokenizer's pad
                       seed=42))
    c.optim = ml_collections.ConfigDict(dict(lr=1e-6, warmup_steps=200, end_lr_ratio=0.0, b1=0.9, b2=0.95, eps=1e-8,
                                             weight_decay=0.01, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=50, keep=3, best_metric="reward_mean",
                                                  best_mode="max", async_save=True))
    return c
