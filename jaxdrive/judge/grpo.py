"""GRPO over gate combinations for the DriveJudge policy (paper Sec. 4.3, Eq. 12), on the shared trainer.

Each step takes B preference pairs; one teacher-forced pass over the 2B conversations (all-yes answer blocks, as
``judge.policy``) gives the gate probabilities p [B, 2, 7]. G rollouts per pair sample both trajectories' gates from
these Bernoullis (the action space is 128 combinations per trajectory); the rewards (``rewards`` block of the config,
e.g. ``judge_preference`` = Eq. 12) score the sampled gates; ``train.grpo.group_advantages`` normalises them per pair.
The loss is ``train.grpo.policy_loss_terms`` with the 14 slot log-probs of each rollout as its "tokens"
(log p or log(1 - p) of the sampled gate), so the clipped ratio, KL estimator and aggregation are GRPO's own. The KL
reference is the policy at the start of the run (the SFT checkpoint), kept as a frozen copy of the trained
parameters (``beta = 0`` skips it).
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxdrive.errors import UserInputError
from jaxdrive.train import grpo
from jaxdrive.train.data import EpochSampler
from jaxdrive.train.grpo_trainer import reward_metrics
from jaxdrive.train.rewards import combine_rewards

NUM_SLOTS = 14  # 7 rules x (A, B)


def _slot_probs(model, inputs, positions, yes_no, temperature=1.0):
    """[R, 7] gate probabilities of R conversations (positions [R, 7] predict the answer tokens):
    sigmoid((logit_yes - logit_no) / temperature), i.e. the two-way softmax of the slot's yes/no logits divided by
    ``temperature`` (1 = the judge's own probabilities)."""
    hidden = model.forward_hidden(inputs)[0]
    h = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    w = model.lm_head_weight()[:, yes_no].astype(jnp.float32)
    logits = jnp.einsum("brh,hc->brc", h.astype(jnp.float32), w)
    return jax.nn.sigmoid((logits[..., 0] - logits[..., 1]) / temperature)


def rollout_logp(probs, samples, group_size: int):
    """[N, 14] log-probs of sampled gates ``samples`` [N, 14] under ``probs`` [2B, 7] (pairs' rows A, B)."""
    p = jnp.repeat(probs.reshape(-1, NUM_SLOTS), group_size, axis=0)
    p = jnp.clip(p, 1e-6, 1.0 - 1e-6)
    return jnp.where(samples > 0.5, jnp.log(p), jnp.log1p(-p))


@functools.partial(jax.jit, static_argnums=(0,))
def _probs_jit(graphdef, params, rest, inputs, positions, yes_no, temperature=1.0):
    return _slot_probs(nnx.merge(graphdef, params, rest), inputs, positions, yes_no, temperature)


def select_groups(rewards, group_size: int, num_groups: int, atol: float = 1e-6) -> np.ndarray:
    """Dynamic sampling (DAPO) over candidate groups: indices of ``num_groups`` of the groups of ``rewards``
    [C * group_size] (C >= num_groups candidates, each group's rows contiguous), those whose rewards are not all
    equal first (candidate order kept), then zero-variance groups to fill the batch when too few have variance
    (their advantages are 0: they add only the KL term)."""
    rg = np.asarray(rewards, np.float32).reshape(-1, group_size)
    if rg.shape[0] < num_groups:
        raise UserInputError(f"select_groups: {rg.shape[0]} candidate groups < {num_groups}")
    varied = (rg.max(-1) - rg.min(-1)) > atol
    order = np.concatenate([np.flatnonzero(varied), np.flatnonzero(~varied)])
    return order[:num_groups]


@dataclasses.dataclass(frozen=True)
class GateGRPOLoss:
    """Trainer loss over a gate-rollout batch {inputs, positions, samples, advantages, old_logp[, ref_logp]}."""

    group_size: int
    yes_id: int
    no_id: int
    eps_low: float = 0.2
    eps_high: float = 0.2
    beta: float = 0.0
    kl: str = "k3"
    agg: str = "seq-mean-token-mean"
    temperature: float = 1.0

    def __call__(self, model, batch, key):
        del key
        probs = _slot_probs(model, batch["inputs"], batch["positions"], jnp.asarray([self.yes_id, self.no_id]),
                            self.temperature)
        logp = rollout_logp(probs, batch["samples"], self.group_size)
        total, denom, sums = grpo.policy_loss_terms(
            logp, batch["old_logp"], batch["advantages"], jnp.ones_like(logp), ref_logp=batch.get("ref_logp"),
            eps_low=self.eps_low, eps_high=self.eps_high, beta=self.beta, kl=self.kl, agg=self.agg)
        return total, denom, sums


def gate_loss_fn(cfg: ml_collections.ConfigDict, yes_no: tuple[int, int]) -> GateGRPOLoss:
    return GateGRPOLoss(cfg.group_size, int(yes_no[0]), int(yes_no[1]), cfg.eps_low, cfg.eps_high, cfg.beta, cfg.kl,
                        cfg.agg, float(cfg.get("temperature", 1.0)))


def resume_config(g) -> dict:
    """The ``grpo`` values that set which pairs each step draws (``GateRollouts.sampler``: seed, batch of
    prompts_per_step x oversample), for ``Trainer(resume_config=...)``: a resume under others is refused."""
    return {"grpo.seed": g.seed, "grpo.prompts_per_step": g.prompts_per_step,
            "grpo.oversample": int(g.get("oversample", 1))}


class GateRollouts:
    """The GRPO ``batch_fn`` for pair examples (``judge.recipes.pair_examples``).

    Args:
      examples: pair examples; rewards: ``Reward``s (kind "jnp": ``fn(gates [N, 14], None, batch)`` with batch
        ``subscores`` [N, 2, 9] and ``preferred`` [N]); yes_no: the (yes, no) token ids; cfg: the ``grpo`` block
        (group_size, prompts_per_step, advantage, beta, seed, temperature, oversample, ...); reference:
        (graphdef, params, rest) of the KL reference policy (None when beta = 0).

    ``cfg.temperature`` (default 1): rollouts sample gates from sigmoid((logit_yes - logit_no) / T), and the loss's
    log-probs, old log-probs and KL reference are taken at the same T (the tempered policy is the one optimised, as
    verl / TRL divide the logits by the rollout temperature); T > 1 flattens confident slots so that a group of
    rollouts of a pair the judge already orders right still varies. Evaluation (``evaluate``, ``jaxdrive judge
    run``) always reads the untempered probabilities.
    ``cfg.oversample`` K (default 1): dynamic sampling (DAPO): each step draws K x prompts_per_step candidate pairs,
    rolls all of them out (one forward pass) and trains on prompts_per_step of them, the groups whose rewards vary
    first (``select_groups``); K = 1 trains on every drawn pair.
    A step's metrics: ``grpo_trainer.reward_metrics`` of the pool (every drawn pair's group: reward_mean, reward_std,
    group_reward_std, TRL's ``reward_std``, and zero_std_frac), batch_zero_std_frac of the trained groups,
    gate_p_mean and each reward's mean (``reward/<name>``).
    """

    def __init__(self, examples, rewards, yes_no, cfg, reference=None):
        self.examples, self.rewards, self.cfg, self.reference = examples, list(rewards), cfg, reference
        self.yes_no = jnp.asarray(yes_no, jnp.int32)
        self.temperature = float(cfg.get("temperature", 1.0))
        if not self.temperature > 0.0:
            raise UserInputError(f"grpo.temperature: expected > 0, got {self.temperature}")
        self.oversample = int(cfg.get("oversample", 1))
        if self.oversample < 1:
            raise UserInputError(f"grpo.oversample: expected >= 1, got {self.oversample}")
        self.sampler = EpochSampler(len(examples), cfg.prompts_per_step * self.oversample, seed=cfg.seed,
                                    name="grpo.prompts_per_step x grpo.oversample")
        adv = grpo.resolve_advantage_convention(cfg.advantage) if cfg.get("advantage") else {}
        self.adv_kwargs = dict(adv, **{k: cfg[k] for k in ("scale", "eps") if cfg.get(k) is not None})

    def inputs(self, model, rows: list[dict]):
        """Model inputs and slot positions of the 2R conversations of R pairs (A then B per pair)."""
        return pair_inputs(model, rows)

    def probs(self, trainer, rows: list[dict], params=None, temperature: float = 1.0) -> jnp.ndarray:
        """[2R, 7] gate probabilities under the trainer's policy (or ``params``: (graphdef, params, rest))."""
        inputs, positions = self.inputs(trainer.model(), rows)
        graphdef, p, rest = params if params is not None else (trainer.graphdef, trainer.params, trainer.rest)
        return _probs_jit(graphdef, p, rest, trainer.shard_batch(inputs), positions, self.yes_no, temperature)

    def rollout(self, probs, rows: list[dict], key: jax.Array):
        """G gate samples per pair from ``probs`` [2R, 7] -> (samples [R G, 14], rewards [R G], valid, parts)."""
        G = self.cfg.group_size
        p = jnp.repeat(probs.reshape(-1, NUM_SLOTS), G, axis=0)  # [N, 14]
        samples = jax.random.bernoulli(key, p).astype(jnp.float32)
        n = samples.shape[0]
        batch_rows = {"subscores": np.repeat(np.stack([r["subscores"] for r in rows]), G, axis=0),
                      "preferred": np.repeat(np.array([r["preferred"] for r in rows]), G)}
        total, valid, parts = combine_rewards(self.rewards, [""] * n, [{}] * n, tokens=samples, mask=None,
                                              batch=batch_rows)
        return samples, np.asarray(total), np.asarray(valid), parts

    def __call__(self, trainer, step: int, key: jax.Array):
        cfg, G, B, T = self.cfg, self.cfg.group_size, self.cfg.prompts_per_step, self.temperature
        rows = [self.examples[i] for i in self.sampler.indices(step - 1)]
        probs = self.probs(trainer, rows, temperature=T)
        samples, total, valid, parts = self.rollout(probs, rows, key)
        pool = reward_metrics(total, valid, G)  # every candidate pair's group, before dynamic sampling keeps B
        if len(rows) > B:  # dynamic sampling: keep B groups, those with reward variance first
            keep = select_groups(total, G, B)
            rows_k = [rows[i] for i in keep]
            probs = probs.reshape(-1, 2, 7)[keep].reshape(-1, 7)
            sel = (keep[:, None] * G + np.arange(G)).reshape(-1)
            samples, total, valid = samples[sel], total[sel], valid[sel]
            rows = rows_k
        inputs, positions = self.inputs(trainer.model(), rows)
        inputs = trainer.shard_batch(inputs)
        adv = grpo.group_advantages(jnp.asarray(total), G, valid=jnp.asarray(valid), **self.adv_kwargs)
        batch = {"inputs": inputs, "positions": positions, "samples": samples,
                 "advantages": adv, "old_logp": rollout_logp(probs, samples, G)}
        if cfg.beta != 0.0:
            if self.reference is None:
                raise UserInputError("grpo.beta != 0 needs the reference policy (GateRollouts(reference=...))")
            ref = _probs_jit(*self.reference, inputs, positions, self.yes_no, T)
            batch["ref_logp"] = rollout_logp(ref, samples, G)
        metrics = {**pool,
                   "batch_zero_std_frac": float(grpo.zero_std_fraction(jnp.asarray(total), G)),
                   "gate_p_mean": float(jnp.mean(probs))}
        metrics.update({f"reward/{k}": float(np.nanmean(v)) for k, v in parts.items()})
        return batch, metrics

    def evaluate(self, trainer, examples: list[dict]) -> dict:
        """TPS accuracy (%) of the expected scores under the current policy on pair ``examples``."""
        correct = []
        for i in range(0, len(examples), self.cfg.prompts_per_step):
            rows = examples[i:i + self.cfg.prompts_per_step]
            s = expected_pair_scores(self.probs(trainer, rows), rows)
            pref = np.array([r["preferred"] for r in rows])
            correct += list(np.where(pref == 0, s[:, 0] > s[:, 1], s[:, 1] > s[:, 0]))
        return {"tps_accuracy": 100.0 * float(np.mean(correct))}


def pair_inputs(model, rows: list[dict]):
    """Model inputs and slot positions [2R, 7] of the 2R conversations of R pair examples (A then B per pair)."""
    pv = np.concatenate([r["pixel_values"] for r in rows])
    inputs = model.prepare_inputs(np.concatenate([r["input_ids"] for r in rows]),
                                  np.concatenate([r["attention_mask"] for r in rows]), pv,
                                  np.concatenate([r["image_grid_thw"] for r in rows]), bucket=pv.shape[0])
    return inputs, jnp.asarray(np.concatenate([r["positions"] for r in rows]))


def expected_pair_scores(probs, rows: list[dict]) -> np.ndarray:
    """[R, 2] expected gated scores (Eq. 14) of the A and B trajectories of R pair examples from their gate
    probabilities ``probs`` [2R, 7]."""
    from jaxdrive.judge.gates import expected_score
    from jaxdrive.judge.recipes import _subscores_from_array

    sub = _subscores_from_array(jnp.asarray(np.stack([r["subscores"] for r in rows]), jnp.float32))
    return np.asarray(expected_score(sub, np.asarray(probs).reshape(len(rows), 2, 7)))


def pair_scores(model, examples: list[dict], yes_no, batch_size: int = 16) -> np.ndarray:
    """[R, 2] expected gated scores (Eq. 14 over the judge's untempered gate probabilities, as ``evaluate`` and
    ``jaxdrive judge run``) of the A and B trajectories of R pair examples (``judge.recipes.pair_examples``)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    yes_no = jnp.asarray(yes_no, jnp.int32)
    out = []
    for i in range(0, len(examples), batch_size):
        rows = examples[i:i + batch_size]
        rows = rows + rows[:1] * (batch_size - len(rows))  # one shape, one compile
        inputs, positions = pair_inputs(model, rows)
        out.append(expected_pair_scores(_probs_jit(graphdef, params, rest, inputs, positions, yes_no), rows))
    return np.concatenate(out)[:len(examples)]


def run_gate_grpo(cfg: ml_collections.ConfigDict, model=None):
    """``jaxdrive train grpo`` with ``grpo.rollout = "gates"``: runs (or resumes) GRPO over gate combinations;
    returns (trainer, records). ``eval_data`` (pair examples) is evaluated as TPS accuracy every ``eval_every``."""
    from jaxdrive.judge.policy import answer_slots
    from jaxdrive.judge.recipes import encoder_for
    from jaxdrive.train import jobs, optim
    from jaxdrive.train.grpo_trainer import grpo_summary
    from jaxdrive.train.trainer import Trainer

    tokenizer = jobs.load_tokenizer(cfg.model)
    examples = jobs.build_examples(cfg.data, tokenizer)  # the data's errors before the weights load
    eval_examples = jobs.build_examples(cfg.eval_data, tokenizer) if cfg.get("eval_data") else None
    slots = answer_slots(encoder_for(cfg.data, tokenizer))
    yes_no = (slots.yes_id, slots.no_id)
    vocab = jobs.model_vocab_size(cfg.model, model)
    jobs.check_token_ids(vocab, {"data (the judge's yes / no tokens)": yes_no}, examples)
    jobs.check_token_ids(vocab, {}, eval_examples or (), data_field="eval_data")
    model = jobs.build_model(cfg.model) if model is None else model
    trainable = jobs.prepare_finetuning(model, cfg.finetune)
    g = cfg.grpo
    logger, ckpt, mesh = jobs._infra(cfg)
    trainer = Trainer(model, loss_fn=gate_loss_fn(g, yes_no), tx=optim.make_optimizer(cfg.optim, cfg.steps * g.policy_epochs),
                      trainable=trainable, summary=grpo_summary, mesh=mesh, checkpointer=ckpt,
                      save_every=cfg.checkpoint.get("every", 0), logger=logger, log_every=cfg.get("log_every", 1),
                      seed=cfg.seed, resume_config=resume_config(g), progress=cfg.get("progress", True))
    reference = (trainer.graphdef, jax.tree.map(jnp.copy, trainer.params), trainer.rest) if g.beta != 0.0 else None
    trainer.restore()
    rollouts = GateRollouts(examples, jobs.build_rewards(cfg.rewards), yes_no, g, reference)
    eval_fns = ({"tps": (cfg.eval_every, lambda tr, step: rollouts.evaluate(tr, eval_examples))}
                if eval_examples else {})
    records = trainer.run(cfg.steps, rollouts, updates_per_batch=g.policy_epochs, eval_fns=eval_fns,
                          position_fn=rollouts.sampler.position, best_metric_source="tps" if eval_fns else None,
                          stop_after=cfg.get("stop_after"))
    if logger:
        logger.close()
    if trainer.step >= cfg.steps:  # not after a stop_after (an interrupted job exports when it completes)
        jobs.export_pretrained(trainer.model(), cfg)
    return trainer, records
