"""Deterministic data order for training: a fixed-shape in-memory dataset of stacked arrays and an epoch sampler whose
batch at step s depends only on (seed, s), so a resumed run sees exactly the batches an uninterrupted run would."""
from __future__ import annotations

import numpy as np

from jaxdrive.errors import UserInputError


def stack_examples(examples: list[dict]) -> dict[str, np.ndarray]:
    """Stacks a list of per-example dicts of equally shaped arrays into {key: [N, ...]}; names a mismatching field."""
    if not examples:
        raise UserInputError("examples: expected at least one example, got none")
    keys = sorted(examples[0])
    out = {}
    for k in keys:
        shapes = {np.shape(e[k]) for e in examples}
        if len(shapes) != 1:
            raise UserInputError(f"examples[*][{k!r}]: expected one shape (pad to a fixed length), got {sorted(shapes)}")
        out[k] = np.stack([np.asarray(e[k]) for e in examples])
    return out


class EpochSampler:
    """Batches of ``batch_size`` indices into N examples: a fresh permutation per epoch (seeded by (seed, epoch)),
    last incomplete batch dropped. ``indices(step)`` is a pure function of ``step``. ``name`` is the config field
    that set ``batch_size``, for the error when it is out of range."""

    def __init__(self, num_examples: int, batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 name: str = "batch_size"):
        if not 1 <= batch_size <= num_examples:
            raise UserInputError(f"{name}: expected 1 <= {name} <= {num_examples} (examples), got {batch_size}")
        self.n, self.batch_size, self.seed, self.shuffle = num_examples, batch_size, seed, shuffle
        self.steps_per_epoch = num_examples // batch_size

    def indices(self, step: int) -> np.ndarray:
        epoch, k = divmod(step, self.steps_per_epoch)
        order = (np.random.default_rng([self.seed, epoch]).permutation(self.n) if self.shuffle
                 else np.arange(self.n))
        return order[k * self.batch_size : (k + 1) * self.batch_size]

    def position(self, step: int) -> dict:
        """JSON-able data position after ``step`` batches (stored in checkpoints)."""
        epoch, k = divmod(step, self.steps_per_epoch)
        return {"epoch": int(epoch), "batch_in_epoch": int(k), "examples_seen": int(step * self.batch_size)}


def take(arrays: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    """Rows ``idx`` of every stacked array."""
    return {k: v[idx] for k, v in arrays.items()}
