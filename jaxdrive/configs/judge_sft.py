"""DriveJudge SFT on gate labels (paper Sec. 4.3 / 5: 9,800 iterations, batch 32, lr 1e-5), full fine-tuning of a
pretrained Qwen-VL directory (its own tokenizer, chat template and image processor).

    jaxdrive judge data --out runs/jd
    jaxdrive train sft --config configs/judge_sft.py model.path=/ckpt/Qwen3-VL-2B-Instruct data.path=runs/jd \
        workdir=runs/judge_sft export_dir=runs/judge_sft/model

CPU preset: configs/judge_sft_tiny.py.
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 9800
    c.batch_size = 32
    c.micro_batches = 1
    c.workdir = ""
    c.export_dir = ""  # the trained model as a pretrained directory (for `jaxdrive judge --model`)
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    path = ml_collections.FieldReference("", field_type=str)
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path=path, dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="full", freeze_vision=False, lora_rank=8, lora_alpha=16.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    # describe: the text scene description; None = as model.path was trained (its jaxdrive_judge.json), else off
    describe = ml_collections.FieldReference(None, field_type=bool)
    c.data = ml_collections.ConfigDict(dict(kind="judge_gates", path="", split="train", model_path=path,
                                            describe=describe, reason=False, target="answer", balance=False, limit=0,
                                            max_len=2048, pad_id=0))
    c.optim = ml_collections.ConfigDict(dict(lr=1e-5, warmup_steps=100, end_lr_ratio=0.0, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=500, keep=2, best_metric="", best_mode="max",
                                                  async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
