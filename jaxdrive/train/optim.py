"""Optimizer: optax AdamW with linear warmup + cosine decay and global-norm gradient clipping, and the choice of which
model variables are trained (full fine-tuning, LoRA adapters only, optionally with the vision tower frozen)."""
from __future__ import annotations

import functools
from typing import Literal

import jax
import ml_collections
import optax
from flax import nnx

from jaxdrive.errors import UserInputError
from jaxdrive.json_values import is_finite_number


def make_schedule(lr: float, total_steps: int, warmup_steps: int = 0, end_lr_ratio: float = 0.0) -> optax.Schedule:
    """Learning rate per step: linear 0 -> lr over ``warmup_steps``, then cosine lr -> lr * end_lr_ratio by
    ``total_steps`` (constant afterwards)."""
    if total_steps < 1 or not 0 <= warmup_steps <= total_steps:
        raise UserInputError(f"schedule: expected 0 <= warmup_steps ({warmup_steps}) <= total_steps ({total_steps}), "
                         "total_steps >= 1")
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup_steps else lr,
        peak_value=lr,
        warmup_steps=warmup_steps,
        decay_steps=max(total_steps, warmup_steps + 1),
        end_value=lr * end_lr_ratio,
    )


def make_optimizer(cfg: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
    """AdamW from an ``optim`` config block: lr, warmup_steps, end_lr_ratio, b1, b2, eps, weight_decay (on matrices
    and embeddings only: ``decay_mask``), clip_norm (global-norm clipping before the update; 0 or None disables it). ``total_steps`` counts optimizer updates.

    Every value is checked first; a bad one is a ``ValueError`` naming ``optim.<field>``. Equal settings return the
    same (cached) transformation object, so trainers built from equal configs share the compiled update step (the
    transformation is a static argument of it)."""
    hp = optimizer_settings(cfg, total_steps)
    return _adamw(hp["lr"], int(total_steps), hp["warmup_steps"], hp["end_lr_ratio"], hp["b1"], hp["b2"], hp["eps"],
                  hp["weight_decay"], hp["clip_norm"])


def optimizer_settings(cfg: ml_collections.ConfigDict, total_steps: int) -> dict:
    """The ``optim`` block's values with defaults, checked: lr >= 0, 0 <= warmup_steps <= total_steps,
    0 <= end_lr_ratio, 0 <= b1, b2 < 1, eps > 0, weight_decay >= 0, clip_norm >= 0 (all finite)."""
    hp = {"lr": cfg.get("lr"), "warmup_steps": cfg.get("warmup_steps", 0), "end_lr_ratio": cfg.get("end_lr_ratio", 0.0),
          "b1": cfg.get("b1", 0.9), "b2": cfg.get("b2", 0.999), "eps": cfg.get("eps", 1e-8),
          "weight_decay": cfg.get("weight_decay", 0.0), "clip_norm": cfg.get("clip_norm", 1.0) or 0.0}
    for name, value in hp.items():
        if not is_finite_number(value):
            raise UserInputError(f"optim.{name}: expected a finite number, got {value!r}")
    hp = {k: (int(v) if k == "warmup_steps" else float(v)) for k, v in hp.items()}
    checks = {"lr": hp["lr"] >= 0, "warmup_steps": 0 <= hp["warmup_steps"] <= total_steps,
              "end_lr_ratio": hp["end_lr_ratio"] >= 0, "b1": 0 <= hp["b1"] < 1, "b2": 0 <= hp["b2"] < 1,
              "eps": hp["eps"] > 0, "weight_decay": hp["weight_decay"] >= 0, "clip_norm": hp["clip_norm"] >= 0}
    expected = {"lr": ">= 0 (0 is a control run that keeps the weights)",
                "warmup_steps": f"between 0 and the {total_steps} optimizer updates of the run",
                "end_lr_ratio": ">= 0", "b1": "in [0, 1)", "b2": "in [0, 1)", "eps": "> 0", "weight_decay": ">= 0",
                "clip_norm": ">= 0 (0 or None disables clipping)"}
    for name, ok in checks.items():
        if not ok:
            raise UserInputError(f"optim.{name}: expected {expected[name]}, got {hp[name]}")
    return hp


@functools.lru_cache(maxsize=64)
def _adamw(lr, total_steps, warmup_steps, end_lr_ratio, b1, b2, eps, weight_decay, clip_norm):
    adamw = optax.adamw(make_schedule(lr, total_steps, warmup_steps, end_lr_ratio), b1=b1, b2=b2, eps=eps,
                        weight_decay=weight_decay, mask=decay_mask)
    return optax.chain(optax.clip_by_global_norm(clip_norm), adamw) if clip_norm else adamw


def decay_mask(params):
    """Weight decay applies to matrices and embeddings only (ndim >= 2), not to norm scales and biases, as in the
    Hugging Face Trainer that TRL / verl runs build on."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def trainable_filter(mode: Literal["full", "lora"] = "full", freeze_vision: bool = False,
                     vision_path: str = "visual") -> nnx.filterlib.Filter:
    """NNX filter of the trained variables.

    ``mode="full"``: every ``nnx.Param``; ``mode="lora"``: only ``LoRAParam`` adapters (the base stays frozen, which
    is also what lets the GRPO reference be the same weights with adapters off). ``freeze_vision`` additionally
    excludes variables whose path contains ``vision_path`` (the vision tower module name, "visual" in Qwen-VL).
    """
    if mode == "full":
        base = nnx.Param
    elif mode == "lora":
        from jaxdrive.models.lora import LoRAParam

        base = LoRAParam
    else:
        raise UserInputError(f"optim.mode: expected 'full' or 'lora', got {mode!r}")
    return nnx.All(base, nnx.Not(nnx.PathContains(vision_path))) if freeze_vision else base
