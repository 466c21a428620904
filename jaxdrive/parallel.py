"""Device mesh, logical-axis rules and helpers to shard NNX model state and activations.

Parameters and activations carry *logical* axis names (``"embed"``, ``"mlp"``, ``"heads"``...), stored as the
``out_sharding`` metadata of each ``nnx.Param``. One rules table, :data:`LOGICAL_AXIS_RULES`, maps them to the
mesh axes ``("data", "fsdp", "tensor")``; configs reference it (``configs/models.py``) and may pass their own.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdrive.errors import UserInputError

if TYPE_CHECKING:  # flax only where NNX state is sharded: the scoring install (no flax) uses make_mesh
    from flax import nnx

MESH_AXES = ("data", "fsdp", "tensor")

Rules = Sequence[tuple[str, str | tuple[str, ...] | None]]

#: logical name -> mesh axis (or axes, or None = replicated). A mesh axis used by an earlier dimension of the same
#: array is not reused (that dimension is replicated instead).
LOGICAL_AXIS_RULES: Rules = (
    ("batch", ("data", "fsdp")),  # activations' batch dimension
    ("seq", None),
    ("cache_seq", None),
    ("act_embed", None),  # activations' hidden dimension
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
    ("embed", "fsdp"),  # parameters' hidden dimension (FSDP / ZeRO-3 style)
    ("heads", "tensor"),  # flattened num_heads * head_dim of q / o projections
    ("kv_heads", "tensor"),  # flattened num_kv_heads * head_dim of k / v projections
    ("head_dim", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("norm", None),
    ("vision_embed", None),
    ("vision_mlp", "tensor"),
    ("vision_heads", "tensor"),
    ("vision_patch", None),
)


def mesh_shape(data: int, fsdp: int, tensor: int, num_devices: int) -> tuple[int, int, int]:
    """The ``(data, fsdp, tensor)`` mesh shape with at most one axis given as -1 filled by the devices left
    (MaxText's convention: ``fsdp=-1`` shards over every device of any slice); ``ValueError`` naming the axes when
    the sizes are not >= 1 or -1 or do not fit ``num_devices``."""
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    free = [k for k, v in sizes.items() if v == -1]
    fixed = int(np.prod([v for v in sizes.values() if v != -1]))
    if len(free) > 1 or any(v < 1 and v != -1 for v in sizes.values()):
        raise UserInputError(f"mesh: expected sizes >= 1 with at most one -1 (the devices left), got {sizes}")
    if free:
        if num_devices % fixed:
            raise UserInputError(f"mesh: {free[0]}=-1 takes the devices left, but {num_devices} devices do not divide "
                             f"by the other axes' {fixed} ({sizes})")
        sizes[free[0]] = num_devices // fixed
    return sizes["data"], sizes["fsdp"], sizes["tensor"]


def make_mesh(data: int = 1, fsdp: int = 1, tensor: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``Mesh`` of shape ``(data, fsdp, tensor)`` over the first ``data*fsdp*tensor`` devices; one axis may be -1,
    the devices left (``mesh_shape``)."""
    devices = list(jax.devices() if devices is None else devices)
    data, fsdp, tensor = mesh_shape(data, fsdp, tensor, len(devices))
    n = data * fsdp * tensor
    if n > len(devices):
        raise UserInputError(
            f"make_mesh: data*fsdp*tensor must be in [1, {len(devices)}] (available devices), "
            f"got data={data}, fsdp={fsdp}, tensor={tensor}"
        )
    return Mesh(np.asarray(devices[:n], dtype=object).reshape(data, fsdp, tensor), MESH_AXES)


def logical_to_spec(names: Sequence[str | None] | None, rules: Rules = LOGICAL_AXIS_RULES) -> PartitionSpec:
    """Map logical axis names to a ``PartitionSpec``; ``None`` is replicated, a name the rules do not list is an error
    (a typo would otherwise replicate silently)."""
    if not names:
        return PartitionSpec()
    table = dict(rules)
    unknown = [n for n in names if n is not None and n not in table]
    if unknown:
        raise UserInputError(f"logical axis {unknown[0]!r} is not in the logical axis rules (known: {', '.join(table)})")
    used: set[str] = set()
    out = []
    for name in names:
        axes = table.get(name) if name is not None else None
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        axes = tuple(a for a in axes if a not in used)
        used.update(axes)
        out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*out)


def _fit_spec(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
    """Drop mesh axes that do not divide their dimension (tiny test models, odd vocabularies), with a warning naming
    the dimension and the axis (that dimension is then replicated over it)."""
    out = []
    for i, (dim, axes) in enumerate(zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)))):
        axes_t = (axes,) if isinstance(axes, str) else tuple(axes or ())
        kept, size = [], 1
        for a in axes_t:
            if dim % (size * mesh.shape[a]) == 0:
                kept.append(a)
                size *= mesh.shape[a]
            else:
                warnings.warn(f"sharding: dimension {i} of shape {tuple(shape)} ({dim}) is not divisible by mesh axis "
                              f"{a!r} (x{size * mesh.shape[a]}); it is replicated over {a!r}", stacklevel=3)
        out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    return PartitionSpec(*out)


def named_sharding(
    names: Sequence[str | None] | None, shape: tuple[int, ...], mesh: Mesh, rules: Rules = LOGICAL_AXIS_RULES
) -> NamedSharding:
    """``NamedSharding`` for an array of ``shape`` whose dimensions carry logical ``names``."""
    return NamedSharding(mesh, _fit_spec(logical_to_spec(names, rules), tuple(shape), mesh))


def variable_axes(var: nnx.Variable) -> tuple[str | None, ...] | None:
    """The logical axis names stored on an NNX variable (``out_sharding`` metadata), or ``None``."""
    return var.get_metadata().get("out_sharding")


def state_shardings(state: nnx.State, mesh: Mesh, rules: Rules = LOGICAL_AXIS_RULES) -> nnx.State:
    """A state of ``NamedSharding`` mirroring ``state`` (concrete or abstract) from each variable's logical axes."""

    from flax import nnx

    def one(var: nnx.Variable) -> nnx.Variable:
        return var.replace(named_sharding(variable_axes(var), var.shape, mesh, rules))

    return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard_model(model: nnx.Module, mesh: Mesh, rules: Rules = LOGICAL_AXIS_RULES) -> nnx.Module:
    """Place every variable of ``model`` on ``mesh`` by its logical axes (in place); returns ``model``."""
    from flax import nnx

    state = nnx.state(model)
    shardings = state_shardings(state, mesh, rules)
    nnx.update(model, jax.tree.map(lambda x, s: jax.device_put(x, s), state, shardings))
    return model


class _Active(threading.local):
    mesh: Mesh | None = None
    rules: Rules = LOGICAL_AXIS_RULES


_ACTIVE = _Active()


@contextlib.contextmanager
def activation_sharding(mesh: Mesh, rules: Rules = LOGICAL_AXIS_RULES) -> Iterator[None]:
    """Within this context, :func:`constrain` pins activations to ``mesh`` by their logical names.

    Enter it around the *tracing* of a jitted function (the first call), as with any sharding constraint.
    """
    prev = (_ACTIVE.mesh, _ACTIVE.rules)
    _ACTIVE.mesh, _ACTIVE.rules = mesh, rules
    try:
        yield
    finally:
        _ACTIVE.mesh, _ACTIVE.rules = prev


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
    """``with_sharding_constraint`` by logical names when :func:`activation_sharding` is active, else ``x``."""
    if _ACTIVE.mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, named_sharding(names, x.shape, _ACTIVE.mesh, _ACTIVE.rules))
