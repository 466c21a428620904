"""OpenREAD joint GRPO (Sec. 3.3 / 4.1): knowledge + planning with R = R_know + R_traj + R_format, group 4, LoRA,
AdamW lr 1e-4, total batch 16 completions (4 prompts x 4 samples; ms-swift counts completions), Qwen3-8B critic.

    jaxdrive train grpo --config configs/openread_grpo.py model.path=/runs/openread_sft/hf \\
        rewards.openread_knowledge.critic.path=/ckpt/Qwen3-8B \\
        data.sources.lingoqa.root=/data/LingoQA data.sources.omnidrive.root=/data/nuscenes workdir=/runs/openread_grpo
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 2750  # ~11K prompts / 4 per step
    c.workdir = ""
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.eval_every = 250
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path="", dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="lora", freeze_vision=True, lora_rank=16, lora_alpha=32.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    c.data = ml_collections.ConfigDict(dict(
        kind="openread_mix", seed=0,
        sources=dict(lingoqa=dict(kind="openread_lingoqa", root="", split="train", system_prompt="openread"),
                     omnidrive=dict(kind="openread_omnidrive", root="", split="train", system_prompt="openread"))))
    c.rewards = ml_collections.ConfigDict({
        "openread_knowledge": dict(weight=1.0, w_critic=0.9, w_semantic=0.1, threshold=0.5, semantic_model="",
                                   critic=dict(kind="pretrained", path="", dtype="bfloat16", batch_size=16,
                                               length_bucket=64, max_len=1024)),
        "openread_trajectory": dict(weight=1.0, bases=[5.0, 2.718281828459045, 2.718281828459045],
                                    temperatures=[0.7, 0.7, 0.3], averaging="second"),
        "openread_format": dict(weight=1.0),
    })
    # special tokens skipped: the sampled stop token <|im_end|> is part of the completion, and kept it fails the
    # format reward's "nothing after </answer>"; Qwen3(-VL) tokenizers keep <think>/<answer> (not special tokens)
    c.decoder = ml_collections.ConfigDict(dict(kind="tokenizer", skip_special_tokens=True))
    c.grpo = ml_collections.ConfigDict(dict(
        seed=0, group_size=4, prompts_per_step=4, prompt_len=1024, completion_len=256, temperature=1.0,
        advantage="trl", scale=ml_collections.FieldReference(None, field_type=str),
        eps=ml_collections.FieldReference(None, field_type=float), eps_low=0.2, eps_high=0.2,
        dual_clip=ml_collections.FieldReference(None, field_type=float), beta=0.04, kl="k3",
        agg="seq-mean-token-mean", max_len=ml_collections.FieldReference(None, field_type=int), policy_epochs=1,
        allow_missing_rewards=False,
        # None: the model's generation_config.json eos ids (<|im_end|>, <|endoftext|>), else the tokenizer's eos
        eos_id=ml_collections.FieldReference(None, field_type=int),  # None: the first stop id
        stop_ids=ml_collections.FieldReference(None, field_type=list),
        pad_id=ml_collections.FieldReference(None, field_type=int)))  # None: the tokenizer's pad token
    c.optim = ml_collections.ConfigDict(dict(lr=1e-4, warmup_steps=0, end_lr_ratio=1.0, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    # no held-out evaluation in this job: keep the latest checkpoints (set eval_data and best_metric to keep the best)
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=250, keep=2, best_metric="",
                                                  best_mode="max", async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=True, data=1, fsdp=4, tensor=2))
    return c
