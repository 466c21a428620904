"""OpenREAD cold-start SFT (Sec. 3.2.2 / 4.1): CoT targets on LingoQA + OmniDrive, LoRA, AdamW lr 1e-4 with 5 % warmup
and cosine decay, total batch 32, one epoch. Text-only: image paths are kept in the examples but not encoded.

    jaxdrive train sft --config configs/openread_sft.py model.path=/ckpt/Qwen3-VL-8B \\
        data.sources.lingoqa.root=/data/LingoQA data.sources.omnidrive.root=/data/nuscenes \\
        steps=1250 optim.warmup_steps=62 workdir=/runs/openread_sft export_dir=/runs/openread_sft/hf

``export_dir`` receives the merged model + tokenizer that the joint GRPO config (configs/openread_grpo.py) starts from.
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 1250  # one epoch of ~40K records at batch 32
    c.batch_size = 32
    c.micro_batches = 4
    c.workdir = ""
    c.export_dir = ""
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path="", dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="lora", freeze_vision=True, lora_rank=16, lora_alpha=32.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    c.data = ml_collections.ConfigDict(dict(
        kind="openread_mix", seed=0, max_len=2048,
        pad_id=ml_collections.FieldReference(None, field_type=int),  # None: the tokenizer's pad token
        sources=dict(lingoqa=dict(kind="openread_lingoqa", root="", split="train", system_prompt="openread"),
                     omnidrive=dict(kind="openread_omnidrive", root="", split="train", system_prompt="openread"))))
    c.optim = ml_collections.ConfigDict(dict(lr=1e-4, warmup_steps=62, end_lr_ratio=0.0, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=250, keep=2, best_metric="", best_mode="max",
                                                  async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=True, data=1, fsdp=4, tensor=2))
    return c
