"""DriveJudge GRPO with the preference reward (paper Eq. 12; Sec. 5: 340 iterations, batch 32 pairs, rollout 8,
lr 1e-6, KL 1e-2), warm-started from the SFT model directory. Rollouts sample gate combinations (2^7 per
trajectory) from the gate probabilities at the rule slots (``grpo.rollout = "gates"``, ``jaxdrive.judge.grpo``;
``grpo.temperature`` and ``grpo.oversample`` are documented there).

    jaxdrive train grpo --config configs/judge_grpo.py model.path=runs/judge_sft/model data.path=runs/jd \
        workdir=runs/judge_grpo export_dir=runs/judge_grpo/model

CPU preset: configs/judge_grpo_tiny.py.
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 340
    c.workdir = ""
    c.export_dir = ""
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.eval_every = 20
    path = ml_collections.FieldReference("", field_type=str)
    data_path = ml_collections.FieldReference("", field_type=str)
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path=path, dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="full", freeze_vision=False, lora_rank=8, lora_alpha=16.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    # The text scene description, training and evaluation alike; None = as model.path was trained (its
    # jaxdrive_judge.json, which the SFT export writes), else off. A value that contradicts the record is refused.
    describe = ml_collections.FieldReference(None, field_type=bool)
    c.data = ml_collections.ConfigDict(dict(kind="judge_pairs", path=data_path, split="train", model_path=path,
                                            describe=describe, limit=0, max_len=2048))
    c.eval_data = ml_collections.ConfigDict(dict(kind="judge_pairs", path=data_path, split="test", model_path=path,
                                                 describe=describe, limit=0, max_len=2048))
    c.rewards = ml_collections.ConfigDict({"judge_preference": dict(weight=1.0)})  # registry.REWARDS
    c.grpo = ml_collections.ConfigDict(dict(
        rollout="gates", seed=0, group_size=8, prompts_per_step=32, advantage="verl",
        scale=ml_collections.FieldReference(None, field_type=str), eps=ml_collections.FieldReference(None, field_type=float),
        eps_low=0.2, eps_high=0.2, beta=0.01, kl="k3", agg="seq-mean-token-mean", policy_epochs=1,
        # Rollout temperature on the slot logits (rollouts, loss and KL reference at sigmoid(margin / T); the
        # judge's own scores stay at T = 1) and dynamic sampling (oversample K: roll out K x prompts_per_step
        # pairs, train on prompts_per_step, groups with reward variance first). 1 / 1 = the paper's plain GRPO.
        temperature=1.0, oversample=1))
    c.optim = ml_collections.ConfigDict(dict(lr=1e-6, warmup_steps=10, end_lr_ratio=1.0, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=50, keep=2, best_metric="tps_accuracy",
                                                  best_mode="max", async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
