"""Frozen dataclasses registered as JAX pytrees (what ``flax.struct`` offers, on plain JAX).

Scoring needs nothing of Flax but this, so the scoring install stays free of the model and checkpoint stacks.

    @pytree.dataclass
    class Boxes:
        corners: Float[Array, "n 4 2"]
        groups: int = pytree.field(pytree_node=False, default=1)   # static: part of the treedef, not a leaf
"""
from __future__ import annotations

import dataclasses

import jax


def field(*, pytree_node: bool = True, **kwargs):
    """A dataclass field; ``pytree_node=False`` makes it static metadata (hashable, compared by value under jit)."""
    metadata = dict(kwargs.pop("metadata", None) or {}, pytree_node=pytree_node)
    return dataclasses.field(metadata=metadata, **kwargs)


def dataclass(cls):
    """Frozen dataclass + pytree registration (leaves: fields with ``pytree_node=True``) + ``.replace(**changes)``."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if f.metadata.get("pytree_node", True)]
    meta = [f.name for f in fields if not f.metadata.get("pytree_node", True)]
    jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
    cls.replace = lambda self, **changes: dataclasses.replace(self, **changes)
    return cls
