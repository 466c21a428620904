"""LoRA adapters on selected ``nnx.Linear`` layers of any Flax NNX model.

Convention (kernels stored ``[in, out]``, as ``nnx.Linear`` does: ``y = x @ kernel + bias``)::

    y = x @ W + b + (alpha / r) * dropout(x) @ A @ B        A: [in, r]   B: [r, out]

so ``delta W = (alpha / r) * A @ B`` has the kernel's own ``[in, out]`` layout and ``merge`` simply adds it.
(PEFT/PyTorch stores the transposes: ``lora_A.weight = A.T`` of shape [r, in], ``lora_B.weight = B.T`` [out, r].)
A is initialised like PEFT's ``kaiming_uniform_(a=sqrt(5))`` (uniform with bound ``1/sqrt(in)``) and B with zeros, so
an adapted model computes exactly the base model at initialisation.

``apply_lora`` replaces each target ``nnx.Linear`` by a ``LoRALinear`` that *shares* the base ``kernel``/``bias``
variables: parameter paths are unchanged (``...q_proj.kernel``) and the adapters appear next to them
(``...q_proj.lora_a``, ``...q_proj.lora_b``). Adapters are ``LoRAParam`` variables, which are not ``nnx.Param``, so

    nnx.Optimizer(model, tx, wrt=LoRAParam)               # updates adapters only
    nnx.grad(loss_fn, argnums=nnx.DiffState(0, LoRAParam))  # gradients w.r.t. adapters only; the base stays frozen

The GRPO reference policy is the same model inside ``with lora_disabled(model): ...`` (no second copy of weights).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float
from safetensors.numpy import load_file, save_file

from jaxdrive.errors import UserInputError

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


class LoRAParam(nnx.Variable):
    """Variable type of LoRA adapter matrices (deliberately *not* an ``nnx.Param``, so base-weight filters skip it)."""


def _lora_a_init(key: jax.Array, shape: tuple[int, int], dtype) -> Float[Array, "in r"]:
    # PEFT: kaiming_uniform_(a=sqrt(5)) on [r, in] == uniform(-1/sqrt(in), 1/sqrt(in)); fan_in is axis 0 of [in, r].
    return jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform", in_axis=0, out_axis=1)(key, shape, dtype)


def _sharding_meta(kernel: nnx.Variable) -> tuple | None:
    meta = kernel.get_metadata()
    for name in ("out_sharding", "sharding_names", "sharding"):
        axes = meta.get(name)
        if axes is not None:
            return tuple(axes)
    return None


class LoRALinear(nnx.Linear):
    """An ``nnx.Linear`` (sharing the base kernel/bias variables) plus a low-rank update.

    Call: ``x [..., in] -> y [..., out]``. State flags (plain attributes, hence static under ``nnx.jit``):
    ``lora_enabled`` (``lora_disabled`` toggles it) and ``merged`` (``merge_lora``/``unmerge_lora``).
    Dropout on the LoRA input path follows NNX conventions: active unless ``model.eval()`` (or
    ``deterministic=True``) was set; it draws from the ``dropout`` stream of the ``rngs`` given to ``apply_lora``.
    """

    def __init__(self, base: nnx.Linear, *, rank: int, alpha: float, dropout: float, targets: str, dtype,
                 rngs: nnx.Rngs):
        for name, value in vars(base).items():  # share kernel/bias variables and copy the layer's config
            if not name.startswith("_"):
                setattr(self, name, nnx.data(value) if value is None and name == "bias" else value)
        kernel = base.kernel
        d_in, d_out = kernel.shape
        key = rngs.params()
        a = _lora_a_init(key, (d_in, rank), dtype)
        b = jnp.zeros((rank, d_out), dtype)
        sharding = getattr(kernel[...], "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding) and len(sharding.spec) == 2:
            spec_in, spec_out = tuple(sharding.spec)
            a = jax.device_put(a, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(spec_in, None)))
            b = jax.device_put(b, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(None, spec_out)))
        axes = _sharding_meta(kernel)
        meta_a = {"out_sharding": (axes[0], None), "eager_sharding": False} if axes else {}
        meta_b = {"out_sharding": (None, axes[1]), "eager_sharding": False} if axes else {}
        self.lora_a = LoRAParam(a, **meta_a)
        self.lora_b = LoRAParam(b, **meta_b)
        self.lora_rank = rank
        self.lora_alpha = float(alpha)
        self.lora_scale = float(alpha) / rank
        self.lora_dropout_rate = float(dropout)
        self.lora_targets = targets
        self.lora_dropout = nnx.Dropout(dropout, rngs=rngs) if dropout > 0 else None
        self.lora_enabled = True
        self.merged = False

    def lora_delta(self) -> Float[Array, "in out"]:
        """``(alpha / r) * A @ B`` in float32, shape [in, out] (the kernel layout)."""
        a = self.lora_a[...].astype(jnp.float32)
        b = self.lora_b[...].astype(jnp.float32)
        return self.lora_scale * jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)

    def effective_kernel(self) -> Float[Array, "in out"]:
        """The ``[in, out]`` kernel this layer applies (base, plus or minus the update as the enabled / merged flags
        say), in the kernel's dtype; for callers that use the weight itself (a tied or chunked output head). The
        adapter's input dropout has no weight form and is not applied."""
        kernel = self.kernel[...]
        if self.lora_enabled == self.merged:
            return kernel
        sign = -1.0 if self.merged else 1.0
        return (kernel.astype(jnp.float32) + sign * self.lora_delta()).astype(kernel.dtype)

    def __call__(self, inputs: Float[Array, "... in"], out_sharding=None) -> Float[Array, "... out"]:
        y = super().__call__(inputs, out_sharding=out_sharding)
        if self.lora_enabled == self.merged:  # enabled+merged: folded in; disabled+unmerged: plain base
            return y
        if self.merged:  # disabled but folded in: remove the update on the fly (the base path has no dropout)
            return y - self._lora_out(inputs, y.dtype)
        x = self.lora_dropout(inputs) if self.lora_dropout is not None else inputs
        return y + self._lora_out(x, y.dtype)

    def _lora_out(self, x: Float[Array, "... in"], dtype) -> Float[Array, "... out"]:
        h = jnp.matmul(x.astype(dtype), self.lora_a[...].astype(dtype), precision=self.precision)
        return self.lora_scale * jnp.matmul(h, self.lora_b[...].astype(dtype), precision=self.precision)


def _path_str(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _linear_paths(model: nnx.Module, cls: type) -> list[tuple[tuple, nnx.Module]]:
    return [(path, node) for path, node in nnx.iter_graph(model) if isinstance(node, cls) and path]


def lora_modules(model: nnx.Module) -> dict[str, LoRALinear]:
    """All ``LoRALinear`` layers of ``model`` keyed by their dotted module path (e.g. ``layers.0.self_attn.q_proj``)."""
    return {_path_str(path): node for path, node in _linear_paths(model, LoRALinear)}


_CONTAINERS = (nnx.List, nnx.Dict, list, dict)


def _set_child(model: nnx.Module, path: tuple, value: nnx.Module) -> None:
    parent = model
    for key in path[:-1]:
        parent = parent[key] if isinstance(parent, _CONTAINERS) else getattr(parent, key)
    if isinstance(parent, _CONTAINERS):
        parent[path[-1]] = value
    else:
        setattr(parent, path[-1], value)


def apply_lora(
    model: nnx.Module,
    targets: str,
    *,
    rank: int,
    alpha: float,
    dropout: float = 0.0,
    adapter_dtype=jnp.float32,
    rngs: nnx.Rngs,
) -> list[str]:
    """Adds LoRA adapters in place to every ``nnx.Linear`` whose dotted path ``re.fullmatch``-es ``targets``.

    Args:
      model: any NNX module; it is modified in place.
      targets: regex over module paths, e.g. ``r".*(q_proj|k_proj|v_proj|o_proj)"``.
      rank: r >= 1. alpha: the update is scaled by ``alpha / r``. dropout: rate in [0, 1) on the LoRA input path.
      adapter_dtype: storage dtype of A and B (float32 by default, also for bf16 models; the LoRA matmuls run in the
        layer's compute dtype).
      rngs: ``params`` stream initialises A; ``dropout`` stream (needed when dropout > 0) drives dropout.
    Returns: the adapted module paths, sorted.
    """
    if not isinstance(rank, int) or rank < 1:
        raise UserInputError(f"apply_lora: rank must be an int >= 1, got {rank!r}")
    if not 0.0 <= dropout < 1.0:
        raise UserInputError(f"apply_lora: dropout must be in [0, 1), got {dropout!r}")
    if lora_modules(model):
        raise UserInputError("apply_lora: model already has LoRA adapters (apply once per model)")
    pattern = re.compile(targets)
    linears = _linear_paths(model, nnx.Linear)
    chosen = [(path, node) for path, node in linears if pattern.fullmatch(_path_str(path))]
    if not chosen:
        names = sorted(_path_str(p) for p, _ in linears)
        raise UserInputError(f"apply_lora: targets {targets!r} matched no nnx.Linear; available paths: {names[:20]}")
    for path, node in chosen:
        _set_child(model, path, LoRALinear(node, rank=rank, alpha=alpha, dropout=dropout, targets=targets,
                                              dtype=adapter_dtype, rngs=rngs))
    return sorted(_path_str(p) for p, _ in chosen)


def _require_lora(model: nnx.Module, what: str) -> dict[str, LoRALinear]:
    mods = lora_modules(model)
    if not mods:
        raise UserInputError(f"{what}: model has no LoRA adapters (call apply_lora first)")
    return mods


def merge_lora(model: nnx.Module) -> None:
    """Folds every adapter into its base kernel (``W += alpha/r * A @ B``, in f32 then cast); calls then skip LoRA.

    Merging/unmerging is exact up to one rounding of the kernel dtype per fold (bf16 kernels lose bits).
    """
    for mod in _require_lora(model, "merge_lora").values():
        if not mod.merged:
            kernel = mod.kernel[...]
            mod.kernel[...] = (kernel.astype(jnp.float32) + mod.lora_delta()).astype(kernel.dtype)
            mod.merged = True


def unmerge_lora(model: nnx.Module) -> None:
    """Inverse of ``merge_lora``: ``W -= alpha/r * A @ B``; calls go back to the separate low-rank path."""
    for mod in _require_lora(model, "unmerge_lora").values():
        if mod.merged:
            kernel = mod.kernel[...]
            mod.kernel[...] = (kernel.astype(jnp.float32) - mod.lora_delta()).astype(kernel.dtype)
            mod.merged = False


@contextlib.contextmanager
def lora_disabled(model: nnx.Module) -> Iterator[nnx.Module]:
    """Within the block ``model`` computes the base model (the KL reference policy); restored on exit.

    Works inside ``nnx.jit``/traced code too (the flag is static; both variants compile once each).
    """
    mods = _require_lora(model, "lora_disabled")
    previous = {name: mod.lora_enabled for name, mod in mods.items()}
    for mod in mods.values():
        mod.lora_enabled = False
    try:
        yield model
    finally:
        for name, mod in mods.items():
            mod.lora_enabled = previous[name]


def _lora_config(mods: dict[str, LoRALinear]) -> dict:
    first = next(iter(mods.values()))
    return {"rank": first.lora_rank, "alpha": first.lora_alpha, "dropout": first.lora_dropout_rate,
            "targets": first.lora_targets}


def save_lora(model: nnx.Module, directory: str) -> None:
    """Writes adapters only: ``adapter_model.safetensors`` (keys ``<path>.lora_a`` [in, r] / ``<path>.lora_b`` [r, out],
    float32 or the adapter dtype) and ``adapter_config.json`` (rank, alpha, dropout, targets, modules)."""
    mods = _require_lora(model, "save_lora")
    tensors = {}
    for name, mod in mods.items():
        tensors[f"{name}.lora_a"] = np.asarray(jax.device_get(mod.lora_a[...]))
        tensors[f"{name}.lora_b"] = np.asarray(jax.device_get(mod.lora_b[...]))
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, ADAPTER_WEIGHTS))
    config = dict(_lora_config(mods), modules=sorted(mods))
    with open(os.path.join(directory, ADAPTER_CONFIG), "w") as f:
        json.dump(config, f, indent=2)


def load_lora(model: nnx.Module, directory: str, *, rngs: nnx.Rngs | None = None) -> None:
    """Loads a ``save_lora`` directory into ``model``; applies LoRA first (from the saved config) if it has none.

    Raises ValueError naming the module/tensor when the saved adapters and the model disagree (missing, extra,
    mis-shaped, or a different rank/alpha). Loading into a merged model is refused (unmerge first).
    """
    with open(os.path.join(directory, ADAPTER_CONFIG)) as f:
        config = json.load(f)
    if not lora_modules(model):
        apply_lora(model, config["targets"], rank=config["rank"], alpha=config["alpha"],
                   dropout=config["dropout"], rngs=rngs if rngs is not None else nnx.Rngs(0))
    mods = lora_modules(model)
    current = _lora_config(mods)
    for key in ("rank", "alpha"):
        if current[key] != config[key]:
            raise UserInputError(f"load_lora: {key} mismatch: checkpoint has {config[key]}, model has {current[key]}")
    missing = sorted(set(config["modules"]) - set(mods))
    extra = sorted(set(mods) - set(config["modules"]))
    if missing or extra:
        raise UserInputError(f"load_lora: module mismatch; in checkpoint but not model: {missing}; "
                         f"in model but not checkpoint: {extra}")
    tensors = load_file(os.path.join(directory, ADAPTER_WEIGHTS))
    for name, mod in mods.items():
        if mod.merged:
            raise UserInputError(f"load_lora: module {name} is merged; call unmerge_lora before loading adapters")
        for part in ("lora_a", "lora_b"):
            key = f"{name}.{part}"
            if key not in tensors:
                raise UserInputError(f"load_lora: tensor {key!r} missing from {ADAPTER_WEIGHTS}")
            var = getattr(mod, part)
            if tensors[key].shape != var.shape:
                raise UserInputError(f"load_lora: tensor {key!r} has shape {tensors[key].shape}, expected {var.shape}")
            value = jnp.asarray(tensors[key], dtype=var.dtype)
            sharding = getattr(var[...], "sharding", None)
            var[...] = jax.device_put(value, sharding) if sharding is not None else value
