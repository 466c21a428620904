"""SFT on the tiny random Qwen2.5-VL: memorise a small multimodal set (smoke test of the training machinery).

    jaxdrive train sft --config configs/sft_tiny.py workdir=/tmp/sft steps=50
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 120
    c.batch_size = 8
    c.micro_batches = 1  # gradient accumulation: the batch is split into this many micro-batches
    c.workdir = ""  # metrics.jsonl, tb/, checkpoints/ (empty: stdout only, no checkpoints)
    c.export_dir = ""  # the trained model as a pretrained directory (empty: not exported)
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)  # stop (as if killed) after this step
    c.model = ml_collections.ConfigDict(dict(kind="tiny", seed=0, path="", dtype="float32"))
    c.finetune = ml_collections.ConfigDict(dict(mode="full", freeze_vision=False, lora_rank=8, lora_alpha=16.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    c.data = ml_collections.ConfigDict(dict(kind="tiny_memorise", num_examples=8, answer_len=3, seed=0, max_len=10,
                                            pad_id=0, shuffle_labels=False))
    c.optim = ml_collections.ConfigDict(dict(lr=1e-2, warmup_steps=10, end_lr_ratio=0.0, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=50, keep=2, best_metric="", best_mode="max",
                                                  async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
