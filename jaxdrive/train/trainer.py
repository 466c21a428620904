"""The training loop shared by SFT and GRPO.

One ``Trainer`` owns the split NNX model (trainable variables vs the rest), the optax state, the jitted update step,
checkpointing, metrics and the progress bar. Algorithms plug in two things:

  * ``loss_fn(model, batch, key) -> (loss_sum, denominator, metric_sums)``: sums over one (micro-)batch. The update
    divides the summed gradients by the summed denominators, so micro-batches give the true mean.
  * ``batch_fn(trainer, step, key) -> (batch or [micro-batches], host_metrics)``: the arrays of one step (SFT: a
    slice of the dataset; GRPO: rollouts, rewards and advantages), a pure function of (step, key, current params).
    A list is a batch split into micro-batches (gradient accumulation: one update from all of them).

Determinism and resume: the data order is a function of (seed, step) (``data.EpochSampler``) and the step key is
``fold_in(key(seed), step)``; a checkpoint stores the trainable parameters, the optimizer state, the step and the data
position, so a run killed after step N and resumed reproduces steps N+1.. of an uninterrupted run. A resume under
another seed or other values of the config that sets the data order (``resume_config``) is refused.

Sharding: with a ``mesh`` (axes data, fsdp, tensor) the parameters are placed by their logical axis names
(``jaxdrive.parallel``) and every batch array is split over ("data", "fsdp") along its leading axis; the same jitted
step runs on one device or many.
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxdrive import distributed, interrupts, parallel
from jaxdrive.errors import UserInputError
from jaxdrive.train.checkpoint import Checkpointer
from jaxdrive.train.forward import shard_batch
from jaxdrive.train.metrics import MetricsLogger

LossFn = Callable[[nnx.Module, dict, jax.Array], tuple[jax.Array, jax.Array, dict]]
BatchFn = Callable[["Trainer", int, jax.Array], tuple[dict, dict]]
EvalFn = Callable[["Trainer", int], dict]


class NonFiniteLoss(FloatingPointError):
    """A step's loss or gradient norm is NaN or infinite: the run stopped before saving that step."""


def default_summary(sums: dict) -> dict:
    """Token means of metric sums (every key divided by ``sums["tokens"]``), plus the token count."""
    tokens = sums.get("tokens")
    out = {}
    for k, v in sums.items():
        out[k] = v if k == "tokens" or tokens is None else jnp.where(tokens > 0, v / jnp.maximum(tokens, 1.0), 0.0)
    return out


@functools.partial(jax.jit, static_argnums=(0, 1))
def grad_step(graphdef, loss_fn, params, rest, batch, key):
    """(grads of the loss sum, loss sum, denominator, metric sums) of one micro-batch. Module-level and keyed by the
    (hashable) graphdef and loss function, so trainers of the same model structure share one compilation."""

    def f(p):
        total, denom, sums = loss_fn(nnx.merge(graphdef, p, rest), batch, key)
        return total, (denom, sums)

    (total, (denom, sums)), g = jax.value_and_grad(f, has_aux=True)(params)
    return g, total, denom, sums


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2, 3))
def _apply_step(tx, summary, params, opt_state, grads, total, denom, sums):
    """Divides the summed gradients by the summed denominators and applies the optimizer."""
    scale = jnp.where(denom > 0, 1.0 / jnp.maximum(denom, 1e-8), 0.0)
    grads = jax.tree.map(lambda x: x * scale.astype(x.dtype), grads)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    metrics = dict(summary(sums), loss=total * scale, grad_norm=optax.global_norm(grads))
    return params, opt_state, metrics


class Trainer:
    """Args:
      model: the NNX model (LoRA already applied when training adapters).
      loss_fn: see module docstring.
      tx: optax transformation (``optim.make_optimizer``).
      trainable: NNX filter of the trained variables (``optim.trainable_filter``).
      summary: maps the step's summed metrics to logged values (default: token means).
      mesh / rules: optional device mesh and logical axis rules (see ``jaxdrive.parallel``).
      checkpointer / save_every: orbax checkpoints every ``save_every`` steps and at the end.
      logger / log_every: metrics sink and cadence.
      seed: base of the per-step RNG keys.
      resume_config: the other config values the run's data order and rollouts depend on ({dotted config key: JSON
        value}, e.g. the prompt sampler's ``grpo.seed``); saved in every checkpoint's meta, and ``restore`` refuses a
        checkpoint saved under other values (as it refuses another ``seed``).
      progress: show a tqdm progress bar.
    """

    def __init__(self, model: nnx.Module, *, loss_fn: LossFn, tx: optax.GradientTransformation,
                 trainable: Any = nnx.Param, summary: Callable[[dict], dict] = default_summary,
                 mesh: jax.sharding.Mesh | None = None, rules=parallel.LOGICAL_AXIS_RULES,
                 checkpointer: Checkpointer | None = None, save_every: int = 0, logger: MetricsLogger | None = None,
                 log_every: int = 1, seed: int = 0, resume_config: dict[str, Any] | None = None,
                 progress: bool = True):
        self.mesh, self.rules = mesh, rules
        if mesh is not None:
            parallel.shard_model(model, mesh, rules)
        self.graphdef, self.params, self.rest = nnx.split(model, trainable, ...)
        if not jax.tree.leaves(self.params):
            raise UserInputError("trainable: the filter selects no variables of the model (LoRA not applied?)")
        self.tx, self.loss_fn, self.summary = tx, loss_fn, summary
        self.opt_state = jax.jit(tx.init, out_shardings=self._opt_shardings())(self.params)
        self.checkpointer, self.save_every = checkpointer, save_every
        self.logger, self.log_every, self.progress = logger, log_every, progress
        self.seed, self.step = seed, 0
        self.resume_config = dict(resume_config or {})
        self.base_key = jax.random.key(seed)
        self.history: list[dict] = []

    def _opt_shardings(self):
        """With a mesh: the optimizer state laid out like the parameters it mirrors (moments sharded as their
        parameter, counters replicated), so it lives on the mesh and restores onto it; without one: None (jit's
        choice)."""
        if self.mesh is None:
            return None
        replicated = NamedSharding(self.mesh, PartitionSpec())
        return optax.tree_map_params(self.tx, lambda _, p: p.sharding, jax.eval_shape(self.tx.init, self.params),
                                     self.params, transform_non_params=lambda _: replicated)

    # ------------------------------------------------------------------ model access
    def model(self) -> nnx.Module:
        """The current model (a fresh merge of the trainable and frozen state; use it read-only)."""
        return nnx.merge(self.graphdef, self.params, self.rest)

    def step_key(self, step: int) -> jax.Array:
        return jax.random.fold_in(self.base_key, step)

    def shard_batch(self, batch):
        """Device-puts a (micro-)batch; with a mesh its example axis is split over ("data", "fsdp")."""
        return shard_batch(batch, self.mesh)

    # ------------------------------------------------------------------ one update
    def update(self, micro_batches: list, key: jax.Array) -> dict:
        """One optimizer update from the summed gradients of ``micro_batches`` (on device); returns device metrics.

        Each micro-batch contributes its loss *sum*; the sum of gradients is divided by the sum of denominators, so
        any split of a batch gives the same update as the whole batch (gradient accumulation)."""
        ctx = parallel.activation_sharding(self.mesh, self.rules) if self.mesh is not None else contextlib.nullcontext()
        acc = None
        with ctx:
            for i, mb in enumerate(micro_batches):
                out = grad_step(self.graphdef, self.loss_fn, self.params, self.rest, mb, jax.random.fold_in(key, i))
                acc = out if acc is None else jax.tree.map(jnp.add, acc, out)
            self.params, self.opt_state, metrics = _apply_step(self.tx, self.summary, self.params, self.opt_state, *acc)
        return metrics

    # ------------------------------------------------------------------ checkpointing
    def _ckpt_state(self) -> dict:
        return {"params": self.params, "opt_state": self.opt_state}

    def save(self, meta: dict | None = None, metrics: dict | None = None) -> None:
        if self.checkpointer is None:
            return
        base = {"step": self.step, "seed": self.seed, "resume_config": self.resume_config,
                "rng_key": np.asarray(jax.random.key_data(self.base_key)).tolist()}
        self.checkpointer.save(self.step, self._ckpt_state(), {**base, **(meta or {})}, metrics)

    def restore(self, step: int | None = None) -> dict | None:
        """Restores the latest (or given) checkpoint if there is one; returns its meta (None if nothing to restore).

        A checkpoint written under another ``seed`` or other ``resume_config`` values is refused: its RNG keys would
        continue with this run's data order and rollouts, a run neither configuration gives."""
        if self.checkpointer is None or (step is None and self.checkpointer.latest_step() is None):
            return None
        state, meta = self.checkpointer.restore(self._ckpt_state(), step)
        self._check_resumable(meta)
        self.params, self.opt_state = state["params"], state["opt_state"]
        self.step, self.seed = int(meta["step"]), int(meta["seed"])
        self.base_key = jax.random.wrap_key_data(jnp.asarray(meta["rng_key"], jnp.uint32))
        return meta

    def _check_resumable(self, meta: dict) -> None:
        """A ValueError naming the first of ``seed`` and the ``resume_config`` keys whose value in the checkpoint's
        ``meta`` differs from this run's. A key the checkpoint does not record (written before it was recorded) is
        not compared."""
        saved = {"seed": int(meta["seed"]), **meta.get("resume_config", {})}
        where = f"the checkpoint at step {meta['step']} in {self.checkpointer.manager.directory}"
        for key, new in {"seed": self.seed, **self.resume_config}.items():
            if key in saved and saved[key] != new:
                raise UserInputError(f"{key}: {where} was trained with {key}={saved[key]!r}, this run has {key}={new!r}; "
                                 f"resume with the same {key} or use another workdir")

    # ------------------------------------------------------------------ the loop
    def run(self, total_steps: int, batch_fn: BatchFn, *, updates_per_batch: int = 1,
            eval_fns: dict[str, tuple[int, EvalFn]] | None = None, position_fn: Callable[[int], dict] | None = None,
            best_metric_source: str | None = None, stop_after: int | None = None) -> list[dict]:
        """Trains from ``self.step`` up to ``total_steps`` (resume first with ``restore``).

        Args:
          batch_fn: produces each step's batch (see module docstring).
          updates_per_batch: optimizer updates per batch (GRPO policy epochs over one rollout batch).
          eval_fns: {name: (every, fn(trainer, step) -> metrics)} run at the start, after steps divisible by ``every``
            and at the end; logged under "eval/<name>". An ``every`` <= 0 turns that evaluation off (none at the
            start or the end either). The one named
            ``best_metric_source`` scores checkpoints: when the checkpointer keeps the best by a metric, every step
            it evaluates is saved too (so the best checkpoint is the best evaluated step, whatever ``save_every``),
            and its step-0 evaluation must return that metric.
          position_fn: data position of a step for the checkpoint meta.
          stop_after: stop (as if killed) after this step, after its checkpoint; for tests and preemption. A run
            that is already at or past it trains nothing (a step past it would be trained and never saved).
        Returns: the logged records of the steps run (none, after a one-line note on stderr, when the run is already
        at ``total_steps``).

        A step whose loss or gradient norm is not finite raises ``NonFiniteLoss`` before it is logged, evaluated or
        saved (the earlier checkpoints stay; the trainer keeps the parameters of the failed update).
        """
        from tqdm.auto import tqdm

        eval_fns = {name: (every, fn) for name, (every, fn) in (eval_fns or {}).items() if every > 0}
        self._check_best_metric_source(eval_fns, best_metric_source)
        if self.step >= total_steps:
            self._note_complete(total_steps)
            return []
        records = []
        if self.logger is not None:  # a resumed run logs the steps after its checkpoint again: no record twice
            self.logger.resume_at(self.step)
        if self.step == 0 and eval_fns:  # the starting point of every evaluation curve
            start = {"step": 0}
            for name, (_, fn) in eval_fns.items():
                values = fn(self, 0)
                if name == best_metric_source:
                    self._check_best_metric(values)
                if self.logger is not None:
                    self.logger.log(0, values, prefix=f"eval/{name}")
                start.update({f"eval/{name}/{k}": float(v) for k, v in values.items()})
            self.history.append(start)
        bar = tqdm(total=total_steps, initial=self.step, disable=not self.progress or jax.process_index() != 0,
                   desc="train", leave=False)
        end = total_steps if stop_after is None else min(total_steps, stop_after)
        try:
            while self.step < end:
                step = self.step + 1
                record, evals = self._train_step(step, total_steps, batch_fn, updates_per_batch, eval_fns)
                records.append(record)
                self.history.append(record)
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.4g}")
                ckpt_metrics = evals.get(best_metric_source) if best_metric_source else None
                scored = ckpt_metrics is not None and bool(self.checkpointer and self.checkpointer.best_metric)
                if self.checkpointer is not None and (scored or (self.save_every and step % self.save_every == 0)
                                                      or step == total_steps or step == stop_after):
                    self.save({"data_position": position_fn(step) if position_fn else {}}, ckpt_metrics)
        except KeyboardInterrupt:
            self._save_interrupted(position_fn)
            raise
        finally:  # also when a step raises (a crash, Ctrl-C): the checkpoint being written in the background and
            bar.close()  # the logged records are kept
            if self.checkpointer is not None:
                self.checkpointer.wait()
            if self.logger is not None:
                self.logger.flush()
        return records

    def _save_interrupted(self, position_fn: Callable[[int], dict] | None) -> None:
        """On Ctrl-C: saves the last completed step unless it is saved already, so a rerun continues from it (a
        step's update is never cut in half: ``held_until_done``). One process only: a multi-process save needs every
        process at the same step, which an interrupt does not ensure (they resume from the last regular save)."""
        if self.checkpointer is None or distributed.process_count() > 1:
            return
        if self.step <= (self.checkpointer.latest_step() or 0):
            return
        distributed.log(f"interrupted: saving step {self.step}; rerun the same command to continue from it",
                        file=sys.stderr)
        self.save({"data_position": position_fn(self.step) if position_fn else {}})

    def _check_best_metric_source(self, eval_fns: dict, best_metric_source: str | None) -> None:
        """Before any training: a checkpointer that keeps the best checkpoint by a metric needs the evaluation that
        scores checkpoints (``best_metric_source``, one of ``eval_fns``); without it no save has metrics and the
        best checkpoint is never chosen."""
        best = self.checkpointer.best_metric if self.checkpointer is not None else None
        if best and best_metric_source not in eval_fns:
            raise UserInputError(f"checkpoint.best_metric: {best!r} keeps the best checkpoint by an evaluation metric, but "
                             f"no evaluation scores checkpoints (best_metric_source={best_metric_source!r}, "
                             f"evaluations: {sorted(eval_fns)}); configure that evaluation or unset "
                             "checkpoint.best_metric")

    def _note_complete(self, total_steps: int) -> None:
        """The one line of a run that has nothing to train: it is already at (or past) ``total_steps``."""
        where = f" in {self.checkpointer.manager.directory}" if self.checkpointer is not None else ""
        distributed.log(f"nothing to train: the run{where} is already complete at step {self.step} of {total_steps}; "
                        f"to train further from it set steps above {self.step}, or start a new run in another workdir",
                        file=sys.stderr)

    def _check_finite(self, step: int, metrics: dict[str, float]) -> None:
        """``NonFiniteLoss`` naming ``step`` and the value when its loss or gradient norm (host floats, already
        fetched for the log) is NaN or infinite."""
        bad = {k: metrics[k] for k in ("loss", "grad_norm") if not math.isfinite(metrics[k])}
        if not bad:
            return
        values = ", ".join(f"{k} {v}" for k, v in bad.items())
        last = self.checkpointer.latest_step() if self.checkpointer is not None else None
        kept = f"the last checkpoint, step {last}, is kept" if last is not None else "no checkpoint was written"
        raise NonFiniteLoss(f"step {step}: {values} (not finite); training stopped before saving this step ({kept}). "
                            "Check the data's token ids and targets, or lower the learning rate")

    def _check_best_metric(self, values: dict) -> None:
        """Before any training: the checkpointer's best metric must be one the best-metric evaluation returns."""
        best = self.checkpointer.best_metric if self.checkpointer is not None else None
        if best and best not in values:
            raise UserInputError(f"checkpoint.best_metric: {best!r} is not a metric of the evaluation that scores "
                             f"checkpoints (it returns {sorted(values)})")

    def _train_step(self, step: int, total_steps: int, batch_fn: BatchFn, updates_per_batch: int,
                    eval_fns: dict[str, tuple[int, EvalFn]]) -> tuple[dict, dict]:
        """Runs step ``step`` (batch, updates, evaluations due, logging); returns (record, {name: eval metrics})."""
        key = self.step_key(step)
        t0 = time.perf_counter()
        host_batch, host_metrics = batch_fn(self, step, jax.random.fold_in(key, 0))
        micro = [self.shard_batch(mb) for mb in (host_batch if isinstance(host_batch, list) else [host_batch])]
        with interrupts.held_until_done(f"interrupted: finishing step {step}'s update to keep it (Ctrl-C again: stop "
                                        "now, losing it)"):  # its donated params are no step's until it ends
            for epoch in range(updates_per_batch):
                metrics = self.update(micro, jax.random.fold_in(key, epoch + 1))
            metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
            self._check_finite(step, metrics)
            self.step = step
        dt = time.perf_counter() - t0
        metrics.update(host_metrics)
        if "tokens" in metrics:
            metrics["tokens_per_s"] = metrics["tokens"] * updates_per_batch / max(dt, 1e-9)
        metrics["step_time_s"] = dt
        record = {"step": step, **metrics}
        evals = {}
        for name, (every, fn) in eval_fns.items():
            if (every > 0 and step % every == 0) or step == total_steps:
                evals[name] = fn(self, step)
                if self.logger is not None:
                    self.logger.log(step, evals[name], prefix=f"eval/{name}")
                record.update({f"eval/{name}/{k}": float(v) for k, v in evals[name].items()})
        if self.logger is not None and (step % self.log_every == 0 or step == total_steps):
            self.logger.log(step, metrics)
        return record, evals

