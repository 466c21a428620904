"""Tiny CPU preset of the OpenREAD joint GRPO: the cold-started tiny Qwen3 policy (configs/openread_sft_tiny.py
``export_dir``) on a synthetic knowledge + planning set (about half planning, as the paper balances 6K planning with
5K mixed samples; planning is the rule-determined ``constant_speed`` variant) with the composite reward
R = R_know (0.9 trained tiny critic + 0.1 MiniLM) + R_traj (Eq. 7 as printed) + R_format; group 4, 16 completions
per step. The critic is the export of configs/openread_critic_tiny.py (``rewards.openread_knowledge.critic.path``;
``critic.kind=tiny`` gives a random one, for plumbing tests only). ``eval_data`` is a fixed set of 8 planning + 8
knowledge prompts answered greedily every ``eval_every`` steps (``eval/greedy/reward_mean``). Measured curve against
an lr = 0 control (full fine-tuning, lr 1e-4, beta 0): docs/openread.md and benchmarks/openread_grpo_curve.sh.

    jaxdrive train grpo --config configs/openread_grpo_tiny.py model.path=/tmp/openread/cold_start \\
        rewards.openread_knowledge.critic.path=/tmp/openread/critic workdir=/tmp/openread/grpo
"""
import ml_collections


def _mix(seed: int, planning_scenes: int, knowledge_scenes: int, per_source: int = 0) -> ml_collections.ConfigDict:
    src = dict(describe_scene=True, system_prompt="", max_examples=per_source)
    return ml_collections.ConfigDict(dict(kind="openread_mix", seed=seed, sources=dict(
        planning=dict(kind="openread_synthetic", num_scenes=planning_scenes, seed=seed, tasks=["planning"],
                      planning="constant_speed", **src),
        knowledge=dict(kind="openread_synthetic", num_scenes=knowledge_scenes, seed=seed + 1, tasks=["knowledge"],
                       **src))))


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 60
    c.workdir = ""
    c.export_dir = ""  # optional: the trained policy as a pretrained directory (benchmarks/openread_grpo_parts.py reads it)
    c.log_every = 5
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.eval_every = 10
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path="", dtype="float32"))
    c.finetune = ml_collections.ConfigDict(dict(mode="lora", freeze_vision=False, lora_rank=8, lora_alpha=16.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    c.data = _mix(seed=0, planning_scenes=120, knowledge_scenes=40)
    c.eval_data = _mix(seed=1000, planning_scenes=8, knowledge_scenes=4, per_source=8)
    c.rewards = ml_collections.ConfigDict({
        "openread_knowledge": dict(weight=1.0, w_critic=0.9, w_semantic=0.1, threshold=0.5, semantic_model="",
                                   critic=dict(kind="pretrained", path="", dtype="float32", seed=0, batch_size=16,
                                               length_bucket=32, max_len=96)),
        "openread_trajectory": dict(weight=1.0, bases=[5.0, 2.718281828459045, 2.718281828459045],
                                    temperatures=[0.7, 0.7, 0.3], averaging="second"),
        "openread_format": dict(weight=1.0),
    })
    c.decoder = ml_collections.ConfigDict(dict(kind="tokenizer", skip_special_tokens=True))
    c.grpo = ml_collections.ConfigDict(dict(
        seed=0, group_size=4, prompts_per_step=4, prompt_len=144, completion_len=120, temperature=1.0,
        advantage="trl", scale=ml_collections.FieldReference(None, field_type=str),
        eps=ml_collections.FieldReference(None, field_type=float), eps_low=0.2, eps_high=0.2,
        dual_clip=ml_collections.FieldReference(None, field_type=float), beta=0.04, kl="k3",
        agg="seq-mean-token-mean", max_len=ml_collections.FieldReference(None, field_type=int), policy_epochs=1,
        allow_missing_rewards=False, eos_id=2, pad_id=0))
    c.optim = ml_collections.ConfigDict(dict(lr=1e-3, warmup_steps=0, end_lr_ratio=1.0, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=False, every=0, keep=1, best_metric="reward_mean",
                                                  best_mode="max", async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
