"""Logical-axis sharding: rules -> PartitionSpecs, and a sharded forward on 8 CPU devices equals one device."""
import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jaxdrive.parallel import (
    LOGICAL_AXIS_RULES,
    activation_sharding,
    logical_to_spec,
    make_mesh,
    named_sharding,
    shard_model,
)

pytest.importorskip("torch")

from jaxdrive.models import from_pretrained  # noqa: E402
from jaxdrive.models import testing as T  # noqa: E402


def test_logical_to_spec_and_mesh_validation():
    assert logical_to_spec(("embed", "heads")) == P("fsdp", "tensor")
    assert logical_to_spec(("batch", "seq", "act_embed")) == P(("data", "fsdp"), None, None)
    assert logical_to_spec(("batch", "embed")) == P(("data", "fsdp"), None)  # fsdp already used by batch
    assert logical_to_spec(("norm",)) == P(None)
    assert logical_to_spec(None) == P()
    mesh = make_mesh(2, 2, 2)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert named_sharding(("vocab", "embed"), (1001, 64), mesh).spec == P(None, "fsdp")  # 1001 % 2 != 0
    with pytest.raises(ValueError, match="data\\*fsdp\\*tensor"):
        make_mesh(4, 2, 2)


def test_sharded_forward_matches_single_device(tmp_path):
    assert jax.device_count() >= 8, "tests/conftest.py forces 8 host CPU devices"
    hf = T.save_tiny_model("qwen3_vl", tmp_path, seed=9)
    cfg = hf.config
    u = cfg.vision_config.patch_size * cfg.vision_config.spatial_merge_size
    pv, grid = T.image_inputs(cfg, [(u, 2 * u), (2 * u, u), (u, u), (2 * u, 2 * u)], seed=5)
    rows = [T.prompt_with_images(cfg, grid[i:i + 1], [5 + i, 6], [], [7, 8, 9][: 1 + i % 3]) for i in range(4)]
    s = max(map(len, rows))
    ids = np.zeros((4, s), np.int64)
    mask = np.zeros((4, s), np.int64)
    for i, r in enumerate(rows):
        ids[i, s - len(r):], mask[i, s - len(r):] = r, 1

    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    sharded = from_pretrained(tmp_path, mesh=mesh)
    q = sharded.language_model.layers[0].self_attn.q_proj.kernel[...]
    assert q.sharding.spec == P("fsdp", "tensor") and len(q.sharding.device_set) == 8
    assert sharded.language_model.embed_tokens.embedding[...].sharding.spec == P("tensor", "fsdp")
    forward = nnx.jit(lambda m, x: m.logits(m.forward_hidden(x)[0]))
    with activation_sharding(mesh, LOGICAL_AXIS_RULES):
        out = forward(sharded, sharded.prepare_inputs(ids, mask, pv, grid))
    assert len(out.sharding.device_set) == 8
    plain = from_pretrained(tmp_path)
    single = np.asarray(plain(ids, mask, pv, grid))
    valid = mask.astype(bool)
    err = np.abs(np.asarray(out) - single)[valid].max()
    print(f"sharded (data=2, fsdp=2, tensor=2) vs single device: max |dlogit| {err:.2e}")
    assert err <= 1e-5
    # shard_model places an already loaded model the same way from_pretrained(mesh=...) does
    placed = {p: v.get_value().sharding for p, v in nnx.to_flat_state(nnx.state(shard_model(plain, mesh)))}
    for p, v in nnx.to_flat_state(nnx.state(sharded)):
        assert placed[p].is_equivalent_to(v.get_value().sharding, v.get_value().ndim), p
