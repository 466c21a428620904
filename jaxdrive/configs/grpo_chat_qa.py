"""GRPO of a pretrained Qwen2.5-VL / Qwen3-VL directory on image question answering ("chat_qa"), exact-match reward on
the answer decoded with the model's own tokenizer; LoRA on the language model, KL to the adapter-free base.

    jaxdrive train grpo --config configs/grpo_chat_qa.py model.path=/ckpt/Qwen3-VL-2B-Instruct data.path=qa.jsonl \
        workdir=/tmp/grpo_qa
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 300
    c.workdir = ""
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.eval_every = 50
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", path="", dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="lora", freeze_vision=True, lora_rank=16, lora_alpha=32.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    c.data = ml_collections.ConfigDict(dict(kind="chat_qa", path="", num_examples=256, seed=0, image_size=448))
    c.rewards = ml_collections.ConfigDict({"exact_match": dict(weight=1.0, key="answer_text")})  # registry.REWARDS
    c.decoder = ml_collections.ConfigDict(dict(kind="tokenizer", skip_special_tokens=True))  # registry.DECODERS
    c.grpo = ml_collections.ConfigDict(dict(
        seed=0, group_size=8, prompts_per_step=8, prompt_len=320, completion_len=8, temperature=1.0,
        advantage="verl",
        scale=ml_collections.FieldReference(None, field_type=str), eps=ml_collections.FieldReference(None, field_type=float),
        eps_low=0.2, eps_high=0.2, dual_clip=ml_collections.FieldReference(None, field_type=float),
        beta=0.01, kl="k3", agg="seq-mean-token-mean", max_len=ml_collections.FieldReference(None, field_type=int),
        policy_epochs=1, allow_missing_rewards=False,
        # None: the model's generation_config.json eos ids (<|im_end|>, <|endoftext|>), else the tokenizer's eos
        eos_id=ml_collections.FieldReference(None, field_type=int),  # None: the first stop id
        stop_ids=ml_collections.FieldReference(None, field_type=list),
        pad_id=ml_collections.FieldReference(None, field_type=int)))  # None: the tokenizer's pad token
    c.optim = ml_collections.ConfigDict(dict(lr=1e-6, warmup_steps=10, end_lr_ratio=0.1, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    # no held-out evaluation in this job: keep the latest checkpoints (set eval_data and best_metric to keep the best)
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=50, keep=2, best_metric="",
                                                  best_mode="max", async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
