"""Two-phase stepwise SFT of the memory-tool agent (paper Table 7): LoRA r16/alpha32 on the language model's linear
layers, vision tower frozen, AdamW (0.9, 0.95), cosine schedule with 5 % warmup, effective batch 16 (1 x 16
accumulation), seed 42. Records come from ``jaxdrive agent convert --phase 1|2`` (observations only in the context).

    jaxdrive train sft --config configs/agent_sft.py:1 model.path=/ckpt/Qwen2.5-VL-7B-Instruct \
        data.path=phase1.jsonl workdir=/runs/agent_sft1
    jaxdrive train sft --config configs/agent_sft.py:2 ... (continue from the phase-1 adapter)

Not expressible here (noted for fidelity): LoRA dropout 0.05 (the LoRA layers have no dropout), the validation split
and selection by validation loss (select with ``checkpoint.best_metric`` on a held-out run instead).
"""
import ml_collections

from jaxdrive.configs import sft_tiny
from jaxdrive.errors import UserInputError

RECORDS = {1: 13_679, 2: 20_062}  # the paper's record counts (steps below = epochs * records / 16)
EPOCHS = {1: 3, 2: 20}
LR = {1: 5e-5, 2: 2e-5}
SAVE_EVERY = {1: 200, 2: 1000}


def get_config(phase: str = "1") -> ml_collections.ConfigDict:
    p = int(phase)
    if p not in (1, 2):
        raise UserInputError(f"phase: expected 1 or 2, got {phase!r}")
    c = sft_tiny.get_config()
    c.seed = 42
    c.steps = EPOCHS[p] * RECORDS[p] // 16
    c.batch_size = 16
    c.micro_batches = 16  # per-device batch 1, gradient accumulation 16
    c.log_every = 10
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path="", dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="lora", freeze_vision=True, lora_rank=16, lora_alpha=32.0,
                                                lora_targets=r"language_model\..*_proj", seed=42))
    # pad_id None: the tokenizer's pad token (Qwen's <|endoftext|>, 151643); a fixed id beyond a smaller model's
    # vocabulary embeds as NaN and made every loss NaN
    c.data = ml_collections.ConfigDict(dict(kind="agent_sft_records", path="", max_len=12_288,
                                            pad_id=ml_collections.FieldReference(None, field_type=int)))
    c.optim = ml_collections.ConfigDict(dict(lr=LR[p], warmup_steps=int(0.05 * c.steps), end_lr_ratio=0.0, b1=0.9,
                                             b2=0.95, eps=1e-8, weight_decay=0.01, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=SAVE_EVERY[p], keep=2, best_metric="",
                                                  best_mode="min", async_save=True))
    return c
