"""Tiny CPU preset of the OpenREAD LLM critic: a tiny Qwen3 (``python -m jaxdrive.train.openread_tiny DIR --seed 1``:
its own BPE, trained on the scenes of seed 1) taught by SFT to answer the critic prompt of ``jaxdrive.eval.critic`` with "yes" / "no" on
synthetic (question, reference, prediction) pairs of the knowledge questions (``data.kind = "openread_critic_pairs"``:
each record's own answer vs an answer to the same kind of question from another scene). The critic reads the last
``critic_max_len`` = 96 tokens of its prompt (from the reference answer on: the long instruction and scene
description of the full prompt left a random tiny model at chance after 300 steps); the GRPO preset's
``critic.max_len`` is the same 96. Exported, it is the
``critic.kind = "pretrained"`` critic of the tiny GRPO preset, standing in for the paper's Qwen3-8B: its yes
probability separates matching from non-matching answers (benchmarks/openread_critic_check.py measures it on held-out
pairs), so R_know carries signal. Measured: docs/openread.md.

    python -m jaxdrive.train.openread_tiny /tmp/openread/critic_base --seed 1
    jaxdrive train sft --config configs/openread_critic_tiny.py model.path=/tmp/openread/critic_base \\
        workdir=/tmp/openread/critic_sft export_dir=/tmp/openread/critic
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
    c.data = ml_collections.ConfigDict(dict(kind="openread_critic_pairs", num_scenes=300, seed=0, negatives=1,
                                            describe_scene=True, critic_max_len=96, max_len=104,
                                            pad_id=0))
    c.optim = ml_collections.ConfigDict(dict(lr=3e-3, warmup_steps=15, end_lr_ratio=0.1, b1=0.9, b2=0.999, eps=1e-8,
                                             weight_decay=0.0, clip_norm=1.0))
    c.checkpoint = ml_collections.ConfigDict(dict(enabled=False, every=0, keep=1, best_metric="", best_mode="max",
                                                  async_save=True))
    c.mesh = ml_collections.ConfigDict(dict(enabled=False, data=1, fsdp=1, tensor=1))
    return c
