"""SFT of a pretrained Qwen2.5-VL / Qwen3-VL directory on image question answering ("chat_qa"), prompts rendered with
the model's own tokenizer and chat template. The same command trains a tiny random model on CPU (tests) and
Qwen3-VL-2B on a pod:

    jaxdrive train sft --config configs/sft_chat_qa.py model.path=/ckpt/Qwen3-VL-2B-Instruct data.path=qa.jsonl \
        workdir=/tmp/sft_qa mesh.enabled=True mesh.fsdp=-1
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 1000
    c.batch_size = 32
    c.micro_batches = 1
    c.workdir = ""
    c.log_every = 10
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", path="", dtype="bfloat16"))
    c.finetune = ml_collections.ConfigDict(dict(mode="full", freeze_vision=True, lora_rank=16, lora_alpha=32.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    # path: JSONL records (question, answer, image, system); "" = the synthetic colour set of num_examples images.
    c.data = ml_collections.ConfigDict(dict(kind="chat_qa", path="", num_examples=256, seed=0, image_size=448,
                                            max_len=320))
    c.data.pad_id = ml_collections.FieldReference(None, field_type=int)  # None: the tokenizer's pad token
    c.optim = ml_collections.ConfigDict(dict(lr=1e-5, warmup_steps=50, end_lr_ratio=0.0, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=True, every=200, keep=2, best_metric="", best_mode="max",
                                                  async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
