"""GRPO on the shared trainer: rollouts -> rewards -> on-device group advantages -> clipped policy updates.

Per step: B prompts from the deterministic sampler, each repeated G times (groups contiguous); completions sampled by
the current policy; host/jnp rewards validated by ``rewards.combine_rewards`` (NaN is an error unless allowed);
advantages by ``grpo.group_advantages``; then ``policy_epochs`` updates on the same rollout batch. With more than one
epoch the sampling policy's log-probs are stored as ``old_logp`` before the first update; with one epoch
``old_logp = stop_gradient(logp)`` (ratio 1, as TRL). With ``beta > 0`` the reference log-probs come from the same
weights with the LoRA adapters disabled (``models.lora.lora_disabled``; no second copy of the weights).

Completions come from the KV-cache generator (``models.generate.generate_from_inputs``), whose log-prob definition
is the trainer's. The teacher-forced buffer is [prompt left-padded to P | completion T] with the image slots given
explicitly (``image_mask``), so a sampled image-pad token id in a completion is plain text.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxdrive.errors import UserInputError
from jaxdrive.train import grpo
from jaxdrive.train.data import EpochSampler
from jaxdrive.train.forward import target_logprobs
from jaxdrive.train.rewards import Reward, combine_rewards
from jaxdrive.models.generate import SamplingConfig, generate_from_inputs
from jaxdrive.models.lora import lora_disabled


def completion_logprobs(model, inputs, prompt_len: int, completion_len: int, temperature: float):
    """[N, T] log-probs of the completion slots [P, P + T) of the rollout buffer."""
    return target_logprobs(model, inputs, temperature=temperature)[:, prompt_len - 1 : prompt_len - 1 + completion_len]


@dataclasses.dataclass(frozen=True)
class GRPOLoss:
    """Trainer loss function over a rollout batch {inputs, completion_mask, advantages[, old_logp, ref_logp]}.

    A frozen (hashable) dataclass so that trainers with equal settings share the compiled update step."""

    prompt_len: int
    completion_len: int
    temperature: float = 1.0
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = None
    beta: float = 0.0
    kl: str = "k3"
    agg: str = "seq-mean-token-mean"
    max_len: int | None = None

    def __call__(self, model, batch, key):
        del key
        logp = completion_logprobs(model, batch["inputs"], self.prompt_len, self.completion_len, self.temperature)
        old = batch.get("old_logp")
        return grpo.policy_loss_terms(
            logp, jax.lax.stop_gradient(logp) if old is None else old, batch["advantages"], batch["completion_mask"],
            ref_logp=batch.get("ref_logp"), eps_low=self.eps_low, eps_high=self.eps_high, dual_clip=self.dual_clip,
            beta=self.beta, kl=self.kl, agg=self.agg, max_len=self.max_len,
        )


def check_config(cfg: ml_collections.ConfigDict) -> None:
    """Host validation of a ``grpo`` config block before anything is built; each error names the field."""
    bounds = {  # field: (holds, expectation)
        "group_size": (lambda v: v >= 2, ">= 2 (a group of one has no baseline: every advantage would be 0)"),
        "prompts_per_step": (lambda v: v >= 1, ">= 1"),
        "prompt_len": (lambda v: v >= 1, ">= 1"),
        "completion_len": (lambda v: v >= 1, ">= 1"),
        "policy_epochs": (lambda v: v >= 1, ">= 1"),
        "temperature": (lambda v: v > 0, "> 0"),
        "eps_low": (lambda v: 0 <= v < 1, "in [0, 1) (the ratio is clipped below at 1 - eps_low)"),
        "eps_high": (lambda v: v >= 0, ">= 0"),
        "beta": (lambda v: v >= 0, ">= 0"),
        "eps": (lambda v: v >= 0, ">= 0 (it is added to the reward std: a negative one flips advantages' signs)"),
        "dual_clip": (lambda v: v > 1, "> 1 or None (the bound -A c of negative-advantage tokens)"),
        "max_len": (lambda v: v >= 1, ">= 1 or None (the Dr.GRPO normaliser; None: completion_len)"),
    }
    for name, (holds, expected) in bounds.items():
        value = cfg.get(name)
        if value is not None and not holds(value):
            raise UserInputError(f"grpo.{name}: expected {expected}, got {value!r}")
    if cfg.get("advantage") and cfg.advantage not in grpo.ADVANTAGE_CONVENTIONS:
        raise UserInputError(f"grpo.advantage: expected one of {sorted(grpo.ADVANTAGE_CONVENTIONS)}, got {cfg.advantage!r}")
    if cfg.get("scale") is not None and cfg.scale not in ("group", "batch", "none"):
        raise UserInputError(f"grpo.scale: expected 'group', 'batch', 'none' or None, got {cfg.scale!r}")
    if cfg.get("agg") is not None and cfg.agg not in grpo.AGG_MODES:
        raise UserInputError(f"grpo.agg: expected one of {grpo.AGG_MODES}, got {cfg.agg!r}")
    if cfg.get("kl") is not None and cfg.kl not in grpo.KL_NAMES:
        raise UserInputError(f"grpo.kl: expected one of {grpo.KL_NAMES}, got {cfg.kl!r}")


def grpo_loss_fn(cfg: ml_collections.ConfigDict) -> GRPOLoss:
    """The ``GRPOLoss`` of a ``grpo`` config block."""
    return GRPOLoss(cfg.prompt_len, cfg.completion_len, cfg.temperature, cfg.eps_low, cfg.eps_high,
                    cfg.get("dual_clip"), cfg.beta, cfg.kl, cfg.agg, cfg.get("max_len"))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _generate(graphdef, sampling: SamplingConfig, params, rest, inputs, key):
    return generate_from_inputs(nnx.merge(graphdef, params, rest), inputs, key, sampling)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _completion_logp(graphdef, prompt_len, completion_len, temperature, reference, params, rest, inputs):
    """Completion log-probs of the policy, or of the reference (the same weights with LoRA adapters disabled)."""
    model = nnx.merge(graphdef, params, rest)
    if reference:
        with lora_disabled(model):
            return completion_logprobs(model, inputs, prompt_len, completion_len, temperature)
    return completion_logprobs(model, inputs, prompt_len, completion_len, temperature)


def grpo_summary(sums: dict) -> dict:
    return dict(grpo.token_metrics(sums), tokens=sums["tokens"])


def completion_stop_ids(cfg: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The token ids that end a sampled completion: ``cfg.stop_ids`` when set (``jobs.token_ids`` resolves it from
    the model's ``generation_config.json``), else the one ``cfg.eos_id``."""
    stop = cfg.get("stop_ids")
    return tuple(int(i) for i in stop) if stop is not None else (int(cfg.eos_id),)


def left_pad(prompts: Sequence[np.ndarray], length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """[N, length] ids and mask of prompts left-padded to ``length``."""
    ids = np.full((len(prompts), length), pad_id, np.int32)
    mask = np.zeros((len(prompts), length), np.int32)
    for i, p in enumerate(prompts):
        if len(p) > length:
            raise UserInputError(f"prompt_len: prompt {i} has {len(p)} tokens, more than prompt_len={length}")
        ids[i, length - len(p):] = p
        mask[i, length - len(p):] = 1
    return ids, mask


def reward_metrics(total: np.ndarray, valid: np.ndarray, group_size: int) -> dict:
    """A rollout batch's reward metrics over its valid rows (``valid`` [n]: some reward scored the row): mean and
    population std of the whole batch (``reward_std``; NaN when no row is valid), the mean of the groups' sample stds
    (``group_reward_std``: what TRL logs as ``reward_std``, ``grpo.mean_group_std``) and the fraction of groups
    without learning signal."""
    r = total[valid]
    return {"reward_mean": float(r.mean()) if r.size else float("nan"),
            "reward_std": float(r.std()) if r.size else float("nan"),
            "group_reward_std": float(grpo.mean_group_std(jnp.asarray(total), group_size, valid=jnp.asarray(valid))),
            "zero_std_frac": float(grpo.zero_std_fraction(jnp.asarray(total), group_size, valid=jnp.asarray(valid)))}


class Rollouts:
    """The GRPO ``batch_fn``: samples, scores and packs one step's rollout batch.

    Args:
      examples: dataset rows with ``prompt`` ids, optional ``pixel_values`` [P, D] / ``image_grid_thw`` [I, 3], and
        whatever the rewards read (e.g. ``answer_text``).
      rewards: reward functions (``rewards.Reward``).
      decode: completion ids [T] (+ mask) -> text for host rewards.
      cfg: the ``grpo`` config block (group_size, prompts_per_step, prompt_len, completion_len, temperature,
        advantage convention / scale / eps, eps_low/high, dual_clip, beta, kl, agg, policy_epochs, allow_missing_rewards,
        eos_id / stop_ids (the tokens that end a completion: ``stop_ids`` when set, else ``eos_id``; see
        ``jobs.token_ids``), pad_id, seed).
    """

    def __init__(self, examples: list[dict], rewards: Sequence[Reward], decode, cfg: ml_collections.ConfigDict):
        check_config(cfg)
        self.examples, self.rewards, self.decode, self.cfg = examples, list(rewards), decode, cfg
        self.sampler = EpochSampler(len(examples), cfg.prompts_per_step, seed=cfg.seed,
                                    name="grpo.prompts_per_step")
        adv = grpo.resolve_advantage_convention(cfg.advantage) if cfg.get("advantage") else {}
        self.adv_kwargs = dict(adv, **{k: cfg[k] for k in ("scale", "eps") if cfg.get(k) is not None})

    def resume_config(self) -> dict:
        """The ``grpo`` config values that set which prompts each step samples (the prompt sampler's seed and batch
        size), for ``Trainer(resume_config=...)``: a resume under other values would continue another stream."""
        return {"grpo.seed": self.sampler.seed, "grpo.prompts_per_step": self.sampler.batch_size}

    def _sampling(self, greedy: bool) -> SamplingConfig:
        cfg = self.cfg
        return SamplingConfig(max_new_tokens=cfg.completion_len, temperature=cfg.temperature, greedy=greedy,
                              stop_token_ids=completion_stop_ids(cfg), pad_token_id=cfg.pad_id)

    def rollout_inputs(self, model, rows: list[dict], completions: np.ndarray | None = None, completion_mask=None):
        """Host-prepared model inputs for N rows (images repeated per row): the left-padded prompts alone
        (``completions`` None, for generation) or the buffer [prompt | completion] (teacher forcing)."""
        cfg = self.cfg
        ids, mask = left_pad([r["prompt"] for r in rows], cfg.prompt_len, cfg.pad_id)
        pv = grid = None
        if "pixel_values" in rows[0]:
            pv = np.concatenate([r["pixel_values"] for r in rows])
            grid = np.concatenate([r["image_grid_thw"] for r in rows])
        img = (ids == model.cfg.image_token_id) & (mask > 0)
        if completions is not None:
            comp = np.asarray(completions, np.int32)
            ids = np.concatenate([ids, comp], 1)
            mask = np.concatenate([mask, np.asarray(completion_mask, np.int32)], 1)
            img = np.concatenate([img, np.zeros(comp.shape, bool)], 1)
        return model.prepare_inputs(ids, mask, pv, grid, image_mask=img if pv is not None else None,
                                    bucket=max(1, 0 if pv is None else pv.shape[0]))

    def generate(self, trainer, rows: list[dict], key: jax.Array | None):
        """(tokens [N, T], mask [N, T] float) for ``rows`` under the trainer's current policy (greedy if no key)."""
        inputs = trainer.shard_batch(self.rollout_inputs(trainer.model(), rows))
        out = _generate(trainer.graphdef, self._sampling(key is None), trainer.params, trainer.rest, inputs, key)
        out = jax.device_get(out)
        return np.asarray(out.tokens), np.asarray(out.mask, np.float32)

    def _completion_logp(self, trainer, inputs, reference: bool = False):
        cfg = self.cfg
        return _completion_logp(trainer.graphdef, cfg.prompt_len, cfg.completion_len, cfg.temperature, reference,
                                trainer.params, trainer.rest, inputs)

    def __call__(self, trainer, step: int, key: jax.Array):
        cfg, G = self.cfg, self.cfg.group_size
        prompts = [self.examples[i] for i in self.sampler.indices(step - 1)]
        rows = [p for p in prompts for _ in range(G)]
        tokens, cmask = self.generate(trainer, rows, key)
        texts = [self.decode(t, m) for t, m in zip(tokens, cmask)]
        total, valid, parts = combine_rewards(self.rewards, texts, rows, tokens=tokens, mask=cmask,
                                              allow_missing=cfg.get("allow_missing_rewards", False))
        adv = grpo.group_advantages(jnp.asarray(total), G, valid=jnp.asarray(valid), **self.adv_kwargs)
        inputs = trainer.shard_batch(self.rollout_inputs(trainer.model(), rows, tokens, cmask))
        batch = {"inputs": inputs, "completion_mask": cmask.astype(np.float32), "advantages": adv}
        if cfg.policy_epochs > 1:
            batch["old_logp"] = self._completion_logp(trainer, inputs)
        if cfg.beta != 0.0:
            batch["ref_logp"] = self._completion_logp(trainer, inputs, reference=True)
        metrics = {**reward_metrics(total, valid, G), "completion_len": float(cmask.sum(1).mean())}
        metrics.update({f"reward/{k}": float(np.nanmean(v)) for k, v in parts.items()})
        return batch, metrics

    def evaluate(self, trainer, examples: list[dict]) -> dict:
        """Mean reward of greedy answers on ``examples`` (an evaluation hook; one answer per example). Missing values
        follow ``allow_missing_rewards`` as in training: the mean is over the rows some reward scored (NaN if none)."""
        tokens, cmask = self.generate(trainer, examples, None)
        texts = [self.decode(t, m) for t, m in zip(tokens, cmask)]
        total, valid, _ = combine_rewards(self.rewards, texts, examples, tokens=tokens, mask=cmask,
                                          allow_missing=self.cfg.get("allow_missing_rewards", False))
        return {"reward_mean": reward_metrics(total, valid, 1)["reward_mean"]}
