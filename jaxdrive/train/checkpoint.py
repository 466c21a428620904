"""Training checkpoints with orbax ``CheckpointManager``: async save, keep the latest N plus the best by a metric,
exact resume.

A checkpoint at step s holds two items:
  * ``state``: the array pytree (trainable params, optimizer state, ...), restored into the caller's abstract
    target so shardings carry over (sharded restore);
  * ``meta``: JSON (step, data position, RNG seed/key data, the config values the data order and rollouts depend
    on: ``Trainer(resume_config=...)``), everything a resume needs besides arrays. The frozen base weights are
    not saved: they are rebuilt from the config (pretrained path or seed).
and, when the run streams data with a grain iterator (``jaxdrive.datasets.loader``), a third item ``data``: the
iterator's state, one file per process (grain's orbax handler), so every process resumes its own shard.
"""
from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as cm

from jaxdrive.errors import UserInputError


class Checkpointer:
    """Thin wrapper over ``ocp.CheckpointManager``.

    Args:
      directory: where step folders are written (created).
      keep: how many of the most recent checkpoints to keep.
      best_metric: metric name (a key of the ``metrics`` passed to ``save``) whose best checkpoint is kept too.
      best_mode: "max" or "min" for ``best_metric``.
      async_save: write in a background thread (``wait`` / ``close`` flush it).
    """

    def __init__(self, directory: str, *, keep: int = 3, best_metric: str | None = None, best_mode: str = "max",
                 async_save: bool = True):
        if keep < 1:
            raise UserInputError(f"checkpoint.keep: expected >= 1, got {keep}")
        if best_mode not in ("max", "min"):
            raise UserInputError(f"checkpoint.best_mode: expected 'max' or 'min', got {best_mode!r}")
        self.best_metric, self.best_mode = best_metric, best_mode
        policies = [cm.LatestN(n=keep)]
        if best_metric:
            policies.append(cm.BestN(get_metric_fn=lambda m: m[best_metric], reverse=best_mode == "min", n=1,
                                     keep_checkpoints_without_metrics=False))
        options = ocp.CheckpointManagerOptions(
            create=True,
            enable_async_checkpointing=async_save,
            preservation_policy=cm.AnyPreservationPolicy(policies) if len(policies) > 1 else policies[0],
            best_fn=(lambda m: m[best_metric]) if best_metric else None,
            best_mode=best_mode,
        )
        self.manager = ocp.CheckpointManager(os.path.abspath(directory), options=options,
                                             item_names=("state", "meta", "data"))

    def save(self, step: int, state: Any, meta: dict, metrics: dict | None = None, data_iterator: Any = None) -> None:
        """Starts saving ``state`` (array pytree) and ``meta`` (JSON-able dict) as step ``step``, and the state of
        ``data_iterator`` (a grain ``DataLoader`` iterator) when given."""
        if self.best_metric and metrics is not None and self.best_metric not in metrics:
            raise UserInputError(f"checkpoint: best_metric {self.best_metric!r} missing from metrics {sorted(metrics)}")
        metrics = None if metrics is None else {k: float(v) for k, v in metrics.items()}
        items = dict(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        if data_iterator is not None:
            import grain.python as gp

            items["data"] = gp.PyGrainCheckpointSave(data_iterator)
        self.manager.save(step, args=ocp.args.Composite(**items), metrics=metrics, force=True)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def best_step(self) -> int | None:
        return self.manager.best_step() if self.best_metric else None

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def restore(self, target: Any, step: int | None = None, data_iterator: Any = None) -> tuple[Any, dict]:
        """(state, meta) of ``step`` (default: latest). ``target`` is a pytree like the saved state (concrete or
        ``jax.ShapeDtypeStruct`` leaves with shardings); the restored arrays take its shardings. ``data_iterator``
        (a fresh iterator of the same grain loader) is set in place to the saved iterator state."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"checkpoint: no checkpoint in {self.manager.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        items = dict(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore())
        if data_iterator is not None:
            import grain.python as gp

            if "data" not in self.manager.item_metadata(step):
                raise UserInputError(f"checkpoint: step {step} in {self.manager.directory} holds no data iterator state "
                                 "(saved without data_iterator=)")
            items["data"] = gp.PyGrainCheckpointRestore(data_iterator)
        out = self.manager.restore(step, args=ocp.args.Composite(**items))
        return out["state"], dict(out["meta"])

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()
