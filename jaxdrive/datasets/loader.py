"""grain loaders over built datasets: one shard per JAX process, a deterministic shuffle from a seed, and an iterator
state that goes into the training checkpoint.

    loader = grain_loader(DIR, "train", seed=0, batch_size=8)    # shard = (jax.process_index(), jax.process_count())
    it = iter(loader)
    batch = next(it)                                              # a list of 8 decoded records
    ckpt.save(step, state, meta, data_iterator=it)                # jaxdrive.train.checkpoint.Checkpointer
    ...
    it = iter(grain_loader(DIR, "train", seed=0, batch_size=8))   # same arguments after a restart
    ckpt.restore(target, data_iterator=it)                        # continues where the saved iterator stopped

The record order depends only on (seed, epoch, shard), never on timing or worker count, so a resumed iterator yields
exactly the elements an uninterrupted one would.
"""
from __future__ import annotations

import os
from typing import Sequence

from jaxdrive.errors import UserInputError


def process_shard(shard_index: int | None = None, shard_count: int | None = None) -> tuple[int, int]:
    """``(index, count)``: the given values, else this process's ``jax.process_index()`` / ``jax.process_count()``."""
    if shard_index is None or shard_count is None:
        import jax

        shard_index = jax.process_index() if shard_index is None else shard_index
        shard_count = jax.process_count() if shard_count is None else shard_count
    if not 0 <= shard_index < shard_count:
        raise UserInputError(f"shard_index: expected 0 <= shard_index < shard_count={shard_count}, got {shard_index}")
    return shard_index, shard_count


class ShardView:
    """Records ``index, index + count, ...`` of a random-access source (its process shard), re-indexed from 0.

    Sharding happens here rather than in grain's ``IndexSampler(shard_options=...)``, which in grain 0.2.18 yields
    ``N // count`` records per shard even with ``drop_remainder=False`` and so loses records of an uneven split."""

    def __init__(self, source, index: int, count: int, drop_remainder: bool = False):
        self.source, self.index, self.count = source, index, count
        n = len(source)
        self.length = n // count if drop_remainder else len(range(index, n, count))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        if not 0 <= i < self.length:
            raise IndexError(f"shard record {i} out of range ({self.length})")
        return self.source[self.index + i * self.count]

    def __repr__(self) -> str:  # grain keeps it in iterator states
        return f"ShardView({self.source!r}, index={self.index}, count={self.count}, length={self.length})"


def grain_loader(path: str | os.PathLike, split: str = "train", *, seed: int = 0, shuffle: bool = True,
                 num_epochs: int | None = None, batch_size: int | None = None, drop_remainder: bool = False,
                 shard_index: int | None = None, shard_count: int | None = None, operations: Sequence = (),
                 worker_count: int = 0):
    """A ``grain.python.DataLoader`` over one split of a dataset built by ``jaxdrive data build``.

    Args:
      path, split: the built dataset directory and split.
      seed: shuffle seed (each epoch is a fresh permutation of the shard, a function of (seed, epoch)).
      shuffle: False keeps the stored order.
      num_epochs: passes over the shard; None repeats forever.
      batch_size: when set, elements are lists of ``batch_size`` decoded records (``drop_remainder`` drops a short
        last batch); otherwise single records.
      shard_index, shard_count: this loader's shard; default this JAX process of all of them. Shards are disjoint
        and cover the split (``drop_remainder=True`` makes them equally long by dropping the remainder).
      operations: further grain transformations (e.g. tokenisation), applied after decoding and before batching.
      worker_count: grain worker processes (0 = in this process).
    """
    import grain.python as gp

    from jaxdrive.datasets.base import DecodedSource

    index, count = process_shard(shard_index, shard_count)
    full = DecodedSource(path, split)
    if len(full) < count:
        raise UserInputError(f"{path} split {split!r}: {len(full)} records cannot be sharded over {count} processes")
    source = ShardView(full, index, count, drop_remainder)
    sampler = gp.IndexSampler(num_records=len(source), shuffle=shuffle, seed=seed if shuffle else None,
                              num_epochs=num_epochs)
    ops = list(operations)
    if batch_size is not None:
        if batch_size < 1:
            raise UserInputError(f"batch_size: expected >= 1, got {batch_size}")
        ops.append(gp.Batch(batch_size, drop_remainder=drop_remainder, batch_fn=list))
    if worker_count > 0:
        from absl import flags

        if not flags.FLAGS.is_parsed():  # grain's worker processes read absl flags; outside an absl app: defaults
            flags.FLAGS.mark_as_parsed()
    return gp.DataLoader(data_source=source, sampler=sampler, operations=ops, worker_count=worker_count)
