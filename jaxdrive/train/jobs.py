"""SFT and GRPO jobs assembled from an ml_collections config (``configs/sft_tiny.py``, ``configs/grpo_tiny.py``):
model (tiny random preset or a pretrained directory with its tokenizer), fine-tuning mode (full / LoRA, frozen vision tower), dataset,
optimizer, checkpointing, metrics, and the trainer run. Datasets, rewards and decoders are looked up by name in
``jaxdrive.train.registry``."""
from __future__ import annotations

import os
from collections.abc import Sequence

import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.train import data, optim, sft
from jaxdrive.train.checkpoint import Checkpointer
from jaxdrive.train.grpo_trainer import check_config, grpo_loss_fn, grpo_summary
from jaxdrive.train.metrics import MetricsLogger
from jaxdrive.train.registry import DATASETS, DECODERS, EXPORTS, REWARDS, ROLLOUTS
from jaxdrive.train.trainer import Trainer


def build_model(cfg: ml_collections.ConfigDict):
    """``model.kind``: "tiny" (random tiny Qwen2.5-VL, ``model.seed``) or "pretrained" (``model.path``)."""
    if cfg.kind == "tiny":
        from jaxdrive.train.tiny_recipes import tiny_vlm

        return tiny_vlm(cfg.seed)
    if cfg.kind == "pretrained":
        from jaxdrive.models.weights import from_pretrained

        return from_pretrained(cfg.path, dtype=getattr(jnp, cfg.get("dtype", "bfloat16")))
    raise UserInputError(f"model.kind: expected 'tiny' or 'pretrained', got {cfg.kind!r}")


def prepare_finetuning(model, cfg: ml_collections.ConfigDict):
    """Applies LoRA when ``finetune.mode == "lora"``; returns the trainable-variable filter."""
    if cfg.mode == "lora":
        from jaxdrive.models.lora import apply_lora

        apply_lora(model, cfg.lora_targets, rank=cfg.lora_rank, alpha=cfg.lora_alpha, rngs=nnx.Rngs(cfg.get("seed", 0)))
    return optim.trainable_filter(cfg.mode, cfg.get("freeze_vision", False))


def load_tokenizer(cfg: ml_collections.ConfigDict):
    """The pretrained model directory's own tokenizer (``model.kind == "pretrained"``), else None (tiny recipes)."""
    if cfg.kind != "pretrained":
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(cfg.path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserInputError(f"model.path {cfg.path!r}: cannot load its tokenizer ({e})") from None


def token_ids(block: ml_collections.ConfigDict, tokenizer=None,
              model_path: str | None = None) -> ml_collections.ConfigDict:
    """``block`` with ``pad_id`` / ``eos_id`` that are None (or absent) filled, and ``stop_ids`` (the tokens that end
    a completion) resolved:

    * pad: the tokenizer's pad token, or 0 without one (the tiny token-id recipes);
    * stop: ``stop_ids`` when set (a list of ids); else ``[eos_id]`` when ``eos_id`` is set (a config that names one
      id stops on that id only); else the pretrained directory's stop ids (``model_path``: its
      ``generation_config.json``, where Qwen chat models list ``<|im_end|>`` and ``<|endoftext|>``), else the
      tokenizer's eos token, else 1. ``eos_id`` left None becomes the first stop id.
    """
    out = ml_collections.ConfigDict(block.to_dict())
    if out.get("pad_id") is None:
        value = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else 0
        if value is None:
            raise UserInputError("pad_id: not set and the tokenizer has no pad_token_id")
        out["pad_id"] = int(value)
    out["stop_ids"] = list(_stop_ids(out, tokenizer, model_path))
    if out.get("eos_id") is None:
        out["eos_id"] = out["stop_ids"][0]
    return out


def model_vocab_size(cfg: ml_collections.ConfigDict, model=None) -> int:
    """The vocabulary size of ``model`` when given, else of the model ``cfg`` (the ``model`` block) names, read from
    its ``config.json`` (or the tiny recipe's config), not its weights: the token-id checks run before they load."""
    if model is not None:
        return model.cfg.text.vocab_size
    if cfg.kind == "tiny":
        from jaxdrive.train.tiny_recipes import TINY_CONFIG

        return TINY_CONFIG["vocab_size"]
    if cfg.kind == "pretrained":
        from jaxdrive.models.config import load_config

        return load_config(cfg.path).text.vocab_size
    raise UserInputError(f"model.kind: expected 'tiny' or 'pretrained', got {cfg.kind!r}")


_TOKEN_HINTS = {"pad_id": "the tokenizer's pad token id", "eos_id": "the tokenizer's eos token id",
                "stop_ids": "the ids that end a reply, e.g. <|im_end|>'s"}


def check_token_ids(vocab: int, fields: dict[str, Sequence[int]], examples: Sequence[dict] = (),
                    data_field: str = "data") -> None:
    """Before the weights load: every id of ``fields`` (config field -> ids, e.g. ``{"data.pad_id": [pad]}``) and of
    the ``examples``' prompt / answer tokens must be a token id of a model whose vocabulary has ``vocab`` ids. An id
    past the embedding table embeds as NaN (every loss NaN); a stop id past it is never sampled (every completion
    runs to its maximum length); a data token past it means the tokenizer is not the model's. ``ValueError`` naming
    the field (or ``data_field`` and the example) otherwise."""
    for field, ids in fields.items():
        for i in ids:
            if not 0 <= int(i) < vocab:
                hint = _TOKEN_HINTS.get(field.rsplit(".", 1)[-1])
                raise UserInputError(f"{field}: {int(i)} is not a token id of the model (its vocabulary has ids "
                                 f"0..{vocab - 1})" + (f"; set an id below {vocab} ({hint})" if hint else
                                                       ": the tokenizer is not the model's"))
    for n, e in enumerate(examples):
        for key in ("prompt", "answer"):
            ids = np.asarray(e.get(key, ()))
            if ids.size and not (0 <= ids.min() and ids.max() < vocab):
                bad = int(ids.max()) if ids.max() >= vocab else int(ids.min())
                raise UserInputError(f"{data_field}: example {n}'s {key} holds token {bad}, not a token id of the model "
                                 f"(its vocabulary has ids 0..{vocab - 1}): the data was tokenized for another model")


def _stop_ids(block: ml_collections.ConfigDict, tokenizer, model_path: str | None) -> tuple[int, ...]:
    """The stop set of :func:`token_ids` (validated: a non-empty tuple of ids)."""
    from jaxdrive.models.config import stop_token_ids, token_id_tuple

    if block.get("stop_ids") is not None:
        ids = token_id_tuple(block.stop_ids, "stop_ids")
        if not ids:
            raise UserInputError("stop_ids: expected at least one token id (or None to use eos_id / the model's)")
        return ids
    if block.get("eos_id") is not None:
        return token_id_tuple(block.eos_id, "eos_id")
    if model_path and stop_token_ids(model_path):
        return stop_token_ids(model_path)
    if tokenizer is None:
        return (1,)
    if getattr(tokenizer, "eos_token_id", None) is None:
        raise UserInputError("eos_id: not set, the model directory names no eos_token_id and the tokenizer has none")
    return (int(tokenizer.eos_token_id),)


def build_examples(cfg: ml_collections.ConfigDict, tokenizer=None) -> list[dict]:
    """The examples of the dataset ``cfg.kind`` names in ``registry.DATASETS``."""
    return DATASETS.get(cfg.kind)(cfg, tokenizer)


def build_rewards(cfg: ml_collections.ConfigDict) -> list:
    """One ``Reward`` per entry of the ``rewards`` block (entry name = ``registry.REWARDS`` name, or its ``kind``)."""
    if not cfg:
        raise UserInputError("rewards: expected at least one entry, e.g. rewards.exact_match.weight=1.0")
    return [REWARDS.get(block.get("kind", name))(block) for name, block in cfg.items()]


def build_decoder(cfg: ml_collections.ConfigDict, tokenizer=None):
    """The completion decoder ``cfg.kind`` names in ``registry.DECODERS``."""
    return DECODERS.get(cfg.kind)(cfg, tokenizer)


def check_multiprocess_mesh(cfg: ml_collections.ConfigDict) -> None:
    """Under a multi-process launcher, a ValueError unless ``cfg.mesh`` is enabled and spans every device of the job:
    without a mesh each process would train its own copy (then fail to write a checkpoint of host-local arrays), and
    a mesh over fewer devices leaves the later processes with none of its devices. A no-op for one process."""
    import jax

    from jaxdrive import distributed
    from jaxdrive.parallel import mesh_shape

    if distributed.process_count() == 1:
        return
    mesh, n = cfg.get("mesh"), jax.device_count()
    enabled = bool(mesh and mesh.get("enabled", False))
    size = int(np.prod(mesh_shape(mesh.data, mesh.fsdp, mesh.tensor, n))) if enabled else 0
    if size != n:
        got = f"mesh.data * mesh.fsdp * mesh.tensor = {size}" if enabled else "mesh.enabled=False"
        raise UserInputError(f"mesh: a {distributed.process_count()}-process job trains one model over all {n} devices; "
                         f"set mesh.enabled=True with mesh.data * mesh.fsdp * mesh.tensor = {n}, or one of them -1 "
                         f"(got {got})")


def check_run_config(cfg: ml_collections.ConfigDict) -> None:
    """Host validation of a job's run fields before anything is built; each error names the field.

    ``steps`` >= 1, ``seed`` >= 0, ``log_every`` >= 1, ``checkpoint.every`` >= 0 or None (0 / None: a checkpoint at
    the end only), ``stop_after`` None or >= 0, ``finetune.mode`` "full" or "lora". (``eval_every`` <= 0 disables
    evaluation, as documented, and needs no check.)"""
    fields = {  # dotted name: (value, allowed None, holds, expectation)
        "steps": (cfg.get("steps"), False, lambda v: v >= 1, ">= 1"),
        "seed": (cfg.get("seed", 0), False, lambda v: v >= 0, ">= 0"),
        "log_every": (cfg.get("log_every", 1), False, lambda v: v >= 1, ">= 1 (log every N steps)"),
        "checkpoint.every": ((cfg.get("checkpoint") or {}).get("every"), True, lambda v: v >= 0,
                             ">= 0 or None (0 / None: a checkpoint at the end only)"),
        "stop_after": (cfg.get("stop_after"), True, lambda v: v >= 0, ">= 0 or None"),
    }
    for name, (value, none_ok, holds, expected) in fields.items():
        if value is None and none_ok:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not holds(value):
            raise UserInputError(f"{name}: expected an integer {expected}, got {value!r}")
    mode = (cfg.get("finetune") or {}).get("mode", "full")
    if mode not in ("full", "lora"):
        raise UserInputError(f"finetune.mode: expected 'full' or 'lora', got {mode!r}")


def check_best_metric(cfg: ml_collections.ConfigDict, evaluation: str | None) -> None:
    """Before anything is built: ``checkpoint.best_metric`` (keep the best checkpoint by an evaluation metric) needs
    an evaluation that scores checkpoints. ``evaluation`` is the config field that sets the job's evaluation (None:
    the job has none); ``eval_every`` <= 0 turns it off. Nothing to check when no checkpoint is written (no
    ``workdir`` or checkpoints disabled)."""
    ckpt = cfg.get("checkpoint") or {}
    best = ckpt.get("best_metric")
    if not (best and cfg.get("workdir") and ckpt.get("enabled", True)):
        return
    if evaluation is None:
        raise UserInputError(f"checkpoint.best_metric: {best!r} keeps the best checkpoint by an evaluation metric, but "
                         "this job runs no evaluation; set checkpoint.best_metric=''")
    if not cfg.get(evaluation):
        raise UserInputError(f"checkpoint.best_metric: {best!r} keeps the best checkpoint by an evaluation metric, but "
                         f"{evaluation} is not set (no evaluation scores checkpoints); set {evaluation} or "
                         "checkpoint.best_metric=''")
    if cfg.get("eval_every", 1) <= 0:
        raise UserInputError(f"checkpoint.best_metric: {best!r} keeps the best checkpoint by an evaluation metric, but "
                         f"eval_every={cfg.eval_every} turns evaluation off; set eval_every >= 1 or "
                         "checkpoint.best_metric=''")


def _infra(cfg: ml_collections.ConfigDict):
    from jaxdrive import distributed

    workdir = cfg.get("workdir")
    # metrics from process 0 only (they are global values); checkpoints from every process (orbax multi-host)
    logger = MetricsLogger(workdir, stdout=cfg.get("log_stdout", True)) if workdir and distributed.is_main() else None
    ckpt = None
    if workdir and cfg.checkpoint.get("enabled", True):
        ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=cfg.checkpoint.keep,
                            best_metric=cfg.checkpoint.get("best_metric"), best_mode=cfg.checkpoint.get("best_mode", "max"),
                            async_save=cfg.checkpoint.get("async_save", True))
    mesh = None
    if cfg.get("mesh") and cfg.mesh.get("enabled", False):
        from jaxdrive.parallel import make_mesh

        mesh = make_mesh(cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor)
    return logger, ckpt, mesh


def run_sft(cfg: ml_collections.ConfigDict, model=None):
    """Runs (or resumes) an SFT job; returns (trainer, records)."""
    k = cfg.get("micro_batches", 1)
    if not 1 <= k <= cfg.batch_size:
        raise UserInputError(f"micro_batches: expected 1 <= micro_batches <= batch_size ({cfg.batch_size}), got {k}")
    check_run_config(cfg)
    check_multiprocess_mesh(cfg)
    check_best_metric(cfg, None)
    tokenizer = load_tokenizer(cfg.model)
    examples = build_examples(cfg.data, tokenizer)  # the data's errors before the weights load (minutes for a VLM)
    pad_id = token_ids(cfg.data, tokenizer).pad_id
    check_token_ids(model_vocab_size(cfg.model, model), {"data.pad_id": [pad_id]}, examples)
    model = build_model(cfg.model) if model is None else model
    trainable = prepare_finetuning(model, cfg.finetune)
    arrays = data.stack_examples([
        sft.sft_example(e["prompt"], e["answer"], cfg.data.max_len, pad_id, targets=e.get("targets"),
                        answer_mask=e.get("answer_mask"),
                        **{k: e[k] for k in ("pixel_values", "image_grid_thw") if k in e}) for e in examples])
    sampler = data.EpochSampler(len(examples), cfg.batch_size, seed=cfg.seed)
    logger, ckpt, mesh = _infra(cfg)
    trainer = Trainer(model, loss_fn=sft.sft_loss_fn, tx=optim.make_optimizer(cfg.optim, cfg.steps), trainable=trainable,
                      mesh=mesh, checkpointer=ckpt, save_every=cfg.checkpoint.get("every", 0), logger=logger,
                      log_every=cfg.get("log_every", 1), seed=cfg.seed, resume_config={"batch_size": cfg.batch_size},
                      progress=cfg.get("progress", True))  # the shuffle seed is the run's seed, checked on resume
    trainer.restore()

    def batch_fn(tr, step, key):
        rows = data.take(arrays, sampler.indices(step - 1))
        if k == 1:
            return sft.sft_batch(tr.model(), rows), {}
        return [sft.sft_batch(tr.model(), data.take(rows, idx)) for idx in np.array_split(np.arange(cfg.batch_size), k)], {}

    records = trainer.run(cfg.steps, batch_fn, position_fn=sampler.position, stop_after=cfg.get("stop_after"))
    if logger:
        logger.close()
    if trainer.step >= cfg.steps:  # not after a stop_after (an interrupted job exports when it completes)
        export_pretrained(trainer.model(), cfg)
    return trainer, records


def export_pretrained(model, cfg: ml_collections.ConfigDict) -> None:
    """``export_dir`` (optional): writes the trained model (LoRA merged) as a pretrained directory, with the tokenizer,
    chat template and preprocessor files of ``model.path`` beside it, so it loads like the model it came from, and
    the files the registry's EXPORTS entry for ``data.kind`` makes (how the model must be used, e.g. the judge's
    ``jaxdrive_judge.json``), written after the copied ones (a file of ``model.path`` by the same name is replaced)."""
    if not cfg.get("export_dir"):
        return
    import shutil

    from jaxdrive.models.lora import lora_modules, merge_lora
    from jaxdrive.models.weights import save_pretrained

    from jaxdrive import distributed

    if distributed.process_count() > 1:  # parameters sharded over processes: gather them, write from process 0
        from jax.experimental import multihost_utils

        nnx.update(model, multihost_utils.process_allgather(nnx.state(model), tiled=True))
        if not distributed.is_main():
            return
    if lora_modules(model):
        merge_lora(model)
    save_pretrained(model, cfg.export_dir)
    if cfg.model.kind == "pretrained":
        for name in os.listdir(cfg.model.path):
            if not (name.endswith(".safetensors") or name.endswith(".safetensors.index.json") or name == "config.json"):
                src = os.path.join(cfg.model.path, name)
                if os.path.isfile(src):
                    shutil.copy(src, os.path.join(cfg.export_dir, name))
    if cfg.data.kind in EXPORTS:
        for name, text in EXPORTS.get(cfg.data.kind)(cfg.data).items():
            atomic.write_text(os.path.join(cfg.export_dir, name), text)


def run_grpo(cfg: ml_collections.ConfigDict, model=None):
    """Runs (or resumes) a GRPO job; returns (trainer, records). ``model`` overrides ``cfg.model`` (a warm start).
    ``grpo.rollout = "gates"`` samples gate combinations of the DriveJudge policy (``jaxdrive.judge.grpo``) instead
    of text completions."""
    check_run_config(cfg)
    check_multiprocess_mesh(cfg)
    check_best_metric(cfg, "eval_data")
    if cfg.grpo.get("rollout", "text") == "gates":
        from jaxdrive.judge.grpo import run_gate_grpo

        return run_gate_grpo(cfg, model)
    check_config(cfg.grpo)
    if cfg.grpo.beta != 0.0 and cfg.finetune.mode != "lora":
        raise UserInputError("grpo.beta: the KL reference is the base model with LoRA disabled; set finetune.mode='lora' "
                         "or beta=0")
    tokenizer = load_tokenizer(cfg.model)
    examples = build_examples(cfg.data, tokenizer)  # the data's errors before the weights load (minutes for a VLM)
    g = token_ids(cfg.grpo, tokenizer, cfg.model.path if cfg.model.kind == "pretrained" else None)
    check_token_ids(model_vocab_size(cfg.model, model),
                    {"grpo.pad_id": [g.pad_id], "grpo.eos_id": [g.eos_id], "grpo.stop_ids": g.stop_ids}, examples)
    model = build_model(cfg.model) if model is None else model
    trainable = prepare_finetuning(model, cfg.finetune)
    kind = g.get("rollouts", "single_turn")
    extra = {} if kind == "single_turn" else {"tokenizer": tokenizer}
    rollouts = ROLLOUTS.get(kind)(examples, build_rewards(cfg.rewards), build_decoder(cfg.decoder, tokenizer), g, **extra)
    logger, ckpt, mesh = _infra(cfg)
    trainer = Trainer(model, loss_fn=grpo_loss_fn(g),
                      tx=optim.make_optimizer(cfg.optim, cfg.steps * g.policy_epochs), trainable=trainable,
                      summary=grpo_summary, mesh=mesh, checkpointer=ckpt, save_every=cfg.checkpoint.get("every", 0),
                      logger=logger, log_every=cfg.get("log_every", 1), seed=cfg.seed,
                      resume_config=rollouts.resume_config(), progress=cfg.get("progress", True))
    trainer.restore()
    eval_examples = build_examples(cfg.eval_data, tokenizer) if cfg.get("eval_data") else None
    eval_fns = {"greedy": (cfg.eval_every, lambda tr, step: rollouts.evaluate(tr, eval_examples))} if eval_examples else {}
    records = trainer.run(cfg.steps, rollouts, updates_per_batch=g.policy_epochs, eval_fns=eval_fns,
                          position_fn=rollouts.sampler.position, best_metric_source="greedy" if eval_fns else None,
                          stop_after=cfg.get("stop_after"))
    if logger:
        logger.close()
    if trainer.step >= cfg.steps:  # not after a stop_after (an interrupted job exports when it completes)
        export_pretrained(trainer.model(), cfg)
    return trainer, records
