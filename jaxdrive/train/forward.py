"""Per-token log-probs of the policy over its own input, shared by SFT and GRPO so that the trainer's and the sampler's
log-prob definitions are the same: ``log_softmax((hidden @ lm_head) / temperature)`` in float32, computed by the
chunked ``jaxdrive.models.logprobs.token_logprobs`` (never materialising [B, S, V] logits).

Model contract (``jaxdrive.models.vlm.QwenModel``): host ``prepare_inputs(input_ids, attention_mask, pixel_values,
image_grid_thw, bucket=...) -> ModelInputs`` (a pytree: ids/mask [B, S], M-RoPE positions [3, B, S], rope_deltas [B],
padded patches and vision metadata); traceable ``forward_hidden(inputs)[0] -> hidden [B, S, H]`` and
``lm_head_weight() -> [H, V]``.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Float

from jaxdrive import distributed
from jaxdrive.models.logprobs import token_logprobs

BATCH_AXES = ("data", "fsdp")


def target_logprobs(model, inputs, *, temperature: float = 1.0) -> Float[Array, "b s1"]:
    """[B, S - 1]: log p(input_ids[:, s + 1] | input_ids[:, :s + 1], images) for s = 0..S-2."""
    hidden = model.forward_hidden(inputs)[0]
    return token_logprobs(hidden[:, :-1], model.lm_head_weight(), inputs.input_ids[:, 1:], temperature=temperature)


def _batch_spec(path: str, x) -> PartitionSpec:
    """Batch dimension of a ``ModelInputs`` field / batch array: axis 1 for M-RoPE positions [3, B, S], axis 0 for
    other batch-leading arrays, none (replicated) for image patches and vision metadata (their leading axis is
    patches, not examples)."""
    if "pixel_values" in path or "vision_meta" in path or np.ndim(x) == 0:
        return PartitionSpec()
    if path.endswith("positions"):
        return PartitionSpec(None, BATCH_AXES)
    return PartitionSpec(BATCH_AXES)


def shard_batch(batch, mesh: Mesh | None):
    """Device-puts a batch pytree; with a mesh, its example axis is split over ("data", "fsdp") (see ``_batch_spec``);
    arrays whose example axis does not divide the data-parallel size are replicated."""
    if mesh is None:
        return jax.tree.map(lambda x: jax.device_put(np.asarray(x) if not isinstance(x, jax.Array) else x), batch)
    size = mesh.shape["data"] * mesh.shape["fsdp"]

    def put(path, x):
        spec = _batch_spec(jax.tree_util.keystr(path), x)
        axis = next((i for i, s in enumerate(spec) if s is not None), None)
        if axis is not None and np.shape(x)[axis] % size:
            spec = PartitionSpec()
        if jax.process_count() > 1:  # every process holds the global batch; each hands over its devices' rows
            return distributed.global_array(x, NamedSharding(mesh, spec))
        return jax.device_put(x, NamedSharding(mesh, spec))

    return jax.tree_util.tree_map_with_path(put, batch)
