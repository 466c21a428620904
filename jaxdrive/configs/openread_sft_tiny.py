"""Tiny CPU preset of the OpenREAD cold-start SFT: the tiny Qwen3 policy (``python -m jaxdrive.train.openread_tiny
DIR``) learns the ``<think>/<answer>`` format and trajectories on the synthetic knowledge + planning + counterfactual
set (planning: the rule-determined ``constant_speed`` variant, ``data.planning=logged`` for the human future), then is
exported for the tiny GRPO preset.

    python -m jaxdrive.train.openread_tiny /tmp/openread/policy
    jaxdrive train sft --config configs/openread_sft_tiny.py model.path=/tmp/openread/policy \\
        workdir=/tmp/openread/sft export_dir=/tmp/openread/cold_start
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 300
    c.batch_size = 16
    c.micro_batches = 1
    c.workdir = ""
    c.export_dir = ""
    c.log_every = 25
    c.progress = True
    c.stop_after = ml_collections.FieldReference(None, field_type=int)
    c.model = ml_collections.ConfigDict(dict(kind="pretrained", seed=0, path="", dtype="float32"))
    c.finetune = ml_collections.ConfigDict(dict(mode="full", freeze_vision=False, lora_rank=8, lora_alpha=16.0,
                                                lora_targets=r"language_model\..*_proj", seed=0))
    c.data = ml_collections.ConfigDict(dict(kind="openread_synthetic", num_scenes=120, seed=0, describe_scene=True,
                                            tasks=["knowledge", "planning", "counterfactual"], planning="constant_speed",
                                            system_prompt="",
                                            max_len=256, pad_id=0))
    c.optim = ml_collections.ConfigDict(dict(lr=3e-3, warmup_steps=15, end_lr_ratio=0.1, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=False, every=0, keep=1, best_metric="", best_mode="max",
                                                  async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
