"""GRPO on the tiny random Qwen2.5-VL and a verifiable yes/no task ("is the image bright?"), LoRA adapters on the
language model, KL (k3) to the base model with adapters disabled.

    jaxdrive train grpo --config configs/grpo_tiny.py workdir=/tmp/grpo steps=100 grpo.beta=0.0
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 100
    c.workdir = ""
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.eval_every = 25
    c.model = ml_collections.ConfigDict(dict(kind="tiny", seed=0, path="", dtype="float32"))
    c.finetune = ml_collections.ConfigDict(dict(mode="lora", freeze_vision=True, lora_rank=8, lora_alpha=16.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    c.data = ml_collections.ConfigDict(dict(kind="tiny_bright", num_examples=64, seed=0, shuffle_labels=False))
    c.eval_data = ml_collections.ConfigDict(dict(kind="tiny_bright", num_examples=32, seed=1, shuffle_labels=False))
    c.rewards = ml_collections.ConfigDict({"exact_match": dict(weight=1.0, key="answer_text")})  # registry.REWARDS
    c.decoder = ml_collections.ConfigDict(dict(kind="tiny_words"))  # registry.DECODERS
    c.grpo = ml_collections.ConfigDict(dict(
        seed=0, group_size=8, prompts_per_step=4, prompt_len=6, completion_len=3, temperature=1.0,
        advantage="verl",  # trl | verl | tunix | drgrpo (scale/eps below override it when set)
        scale=ml_collections.FieldReference(None, field_type=str), eps=ml_collections.FieldReference(None, field_type=float),
        eps_low=0.2, eps_high=0.2, dual_clip=ml_collections.FieldReference(None, field_type=float),
        beta=0.01, kl="k3", agg="seq-mean-token-mean", max_len=ml_collections.FieldReference(None, field_type=int),
        policy_epochs=2, allow_missing_rewards=False, eos_id=1, pad_id=0))
    c.optim = ml_collections.ConfigDict(dict(lr=1e-2, warmup_steps=5, end_lr_ratio=0.1, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=25, keep=2, best_metric="reward_mean",
                                                  best_mode="max", async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
