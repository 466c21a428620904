"""LoRA on NNX models: identity at init, adapter-only training, merge/unmerge, disabling, LoRA-only checkpoints."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxdrive.models.lora import (LoRALinear, LoRAParam, apply_lora, load_lora, lora_disabled, lora_modules,
                                  merge_lora, save_lora, unmerge_lora)

TARGETS = r".*(q_proj|v_proj)"


class Block(nnx.Module):
    def __init__(self, d: int, rngs: nnx.Rngs):
        self.q_proj = nnx.Linear(d, d, rngs=rngs)
        self.v_proj = nnx.Linear(d, d, use_bias=False, rngs=rngs)
        self.mlp = nnx.Linear(d, d, rngs=rngs)

    def __call__(self, x):
        return x + self.mlp(jax.nn.gelu(self.q_proj(x) * self.v_proj(x)))


class Toy(nnx.Module):
    def __init__(self, d: int = 8, n: int = 2, rngs: nnx.Rngs = None):
        self.layers = nnx.List([Block(d, rngs) for _ in range(n)])
        self.head = nnx.Linear(d, 3, rngs=rngs)

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _model(seed=0):
    return Toy(rngs=nnx.Rngs(seed))


def _x():
    return jax.random.normal(jax.random.key(1), (4, 8))


@nnx.jit
def _step(model, opt, x, y):
    loss_fn = lambda m: jnp.mean((m(x) - y) ** 2)
    loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, LoRAParam))(model)
    opt.update(model, grads)
    return loss


def _train(model, steps=3):
    """A few Adam steps on adapters only (one compile shared by tests whose models have the same structure)."""
    opt = nnx.Optimizer(model, optax.adam(5e-2), wrt=LoRAParam)
    x, y = _x(), jax.random.normal(jax.random.key(2), (4, 3))
    return [float(_step(model, opt, x, y)) for _ in range(steps)]


def test_selection_paths_and_identity_at_init():
    model = _model()
    base_out = model(_x())
    names = apply_lora(model, TARGETS, rank=2, alpha=4.0, rngs=nnx.Rngs(3))
    assert names == ["layers.0.q_proj", "layers.0.v_proj", "layers.1.q_proj", "layers.1.v_proj"]
    assert sorted(lora_modules(model)) == names and not isinstance(model.layers[0].mlp, LoRALinear)
    # base parameter paths unchanged; adapters next to them; B zero, A non-zero with PEFT's bound 1/sqrt(in)
    params = nnx.state(model, nnx.Param)
    assert params["layers"][0]["q_proj"]["kernel"].shape == (8, 8)
    lora = nnx.state(model, LoRAParam)
    assert lora["layers"][1]["v_proj"]["lora_a"].shape == (8, 2)
    assert lora["layers"][1]["v_proj"]["lora_b"].shape == (2, 8)
    a = lora["layers"][0]["q_proj"]["lora_a"][...]
    assert jnp.all(lora["layers"][0]["q_proj"]["lora_b"][...] == 0)
    assert 0 < float(jnp.abs(a).max()) <= 1 / np.sqrt(8)
    np.testing.assert_array_equal(model(_x()), base_out)


def test_no_match_and_bad_args_error():
    with pytest.raises(ValueError, match="matched no nnx.Linear.*layers.0.mlp"):
        apply_lora(_model(), r".*k_proj", rank=2, alpha=2.0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="rank"):
        apply_lora(_model(), TARGETS, rank=0, alpha=2.0, rngs=nnx.Rngs(0))


def test_training_updates_only_adapters_then_merge_unmerge_and_disable():
    model = _model()
    base_state = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
    base_out = model(_x())
    apply_lora(model, TARGETS, rank=2, alpha=4.0, rngs=nnx.Rngs(3))
    losses = _train(model)
    assert losses[-1] < losses[0]
    # base frozen: every nnx.Param (kernels, biases, untargeted layers) unchanged bit for bit
    jax.tree.map(np.testing.assert_array_equal, nnx.state(model, nnx.Param), base_state)
    adapted = model(_x())
    assert float(jnp.abs(adapted - base_out).max()) > 1e-3  # the adapters now matter
    with lora_disabled(model):
        np.testing.assert_allclose(model(_x()), base_out, atol=1e-6)
    np.testing.assert_array_equal(model(_x()), adapted)  # restored on exit

    merge_lora(model)
    np.testing.assert_allclose(model(_x()), adapted, atol=1e-5)
    assert float(jnp.abs(model.layers[0].q_proj.kernel[...] - base_state["layers"][0]["q_proj"]["kernel"][...]).max()) > 0
    with lora_disabled(model):  # disabled on a merged model still gives the base policy
        np.testing.assert_allclose(model(_x()), base_out, atol=1e-5)
    unmerge_lora(model)
    np.testing.assert_allclose(model(_x()), adapted, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), nnx.state(model, nnx.Param), base_state)


def test_disable_inside_jit_gives_policy_and_reference_in_one_call():
    model = _model()
    base_out = model(_x())
    apply_lora(model, TARGETS, rank=2, alpha=4.0, rngs=nnx.Rngs(3))
    _train(model, steps=2)
    adapted = model(_x())

    @nnx.jit
    def both(model, x):
        with lora_disabled(model):
            ref = model(x)
        return model(x), ref

    pol, ref = both(model, _x())
    np.testing.assert_allclose(pol, adapted, atol=1e-6)
    np.testing.assert_allclose(ref, base_out, atol=1e-6)


def test_dropout_uses_rngs_and_eval_is_deterministic():
    model = _model()
    apply_lora(model, TARGETS, rank=2, alpha=4.0, dropout=0.5, rngs=nnx.Rngs(params=3, dropout=4))
    _train(model, steps=1)  # non-zero B so dropout is visible
    a, b = model(_x()), model(_x())
    assert float(jnp.abs(a - b).max()) > 0  # training mode: fresh dropout masks each call
    model.eval()
    np.testing.assert_array_equal(model(_x()), model(_x()))


def test_bf16_layer_keeps_f32_adapters_and_bf16_output():
    model = Block(8, nnx.Rngs(0))
    model.q_proj = nnx.Linear(8, 8, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(1))
    apply_lora(model, r"q_proj", rank=2, alpha=2.0, rngs=nnx.Rngs(2))
    assert model.q_proj.lora_a.dtype == jnp.float32 and model.q_proj.kernel.dtype == jnp.bfloat16
    assert model.q_proj(_x()).dtype == jnp.bfloat16


def test_adapters_follow_a_sharded_kernel():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("tensor",))
    model = _model()
    q = model.layers[0].q_proj
    q.kernel[...] = jax.device_put(q.kernel[...], jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "tensor")))
    apply_lora(model, TARGETS, rank=2, alpha=4.0, rngs=nnx.Rngs(3))
    q = model.layers[0].q_proj
    assert q.lora_a[...].sharding.spec == jax.sharding.PartitionSpec(None, None)
    assert q.lora_b[...].sharding.spec == jax.sharding.PartitionSpec(None, "tensor")


def test_save_load_roundtrip_and_errors(tmp_path):
    model = _model()
    apply_lora(model, TARGETS, rank=2, alpha=4.0, rngs=nnx.Rngs(3))
    _train(model, steps=2)
    save_lora(model, str(tmp_path))
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["rank"] == 2 and config["alpha"] == 4.0 and config["targets"] == TARGETS
    assert len(config["modules"]) == 4

    fresh = _model()  # same base weights, no adapters: load applies them from the saved config
    load_lora(fresh, str(tmp_path))
    np.testing.assert_array_equal(fresh(_x()), model(_x()))

    other = _model()
    apply_lora(other, TARGETS, rank=3, alpha=4.0, rngs=nnx.Rngs(3))
    with pytest.raises(ValueError, match="rank mismatch"):
        load_lora(other, str(tmp_path))
    other = _model()
    apply_lora(other, r".*q_proj", rank=2, alpha=4.0, rngs=nnx.Rngs(3))
    with pytest.raises(ValueError, match="layers.0.v_proj"):
        load_lora(other, str(tmp_path))
    assert os.path.getsize(tmp_path / "adapter_model.safetensors") < 4096  # adapters only, no base weights


def test_lora_and_chunked_logprobs_on_the_qwen_model():
    """Integration with jaxdrive's QwenModel (tiny Qwen3 text config): zero-B identity, adapter-only training with the
    chunked log-prob loss, reference policy = adapters disabled = the untouched base, merged == unmerged, and chunked
    log-probs == full log_softmax of the model's logits."""
    models = pytest.importorskip("jaxdrive.models")
    testing = pytest.importorskip("jaxdrive.models.testing")
    from jaxdrive.models.logprobs import token_logprobs

    config = testing.tiny_hf_config("qwen3", text={"num_hidden_layers": 1})
    model = models.QwenModel(models.parse_config(config.to_dict()), rngs=nnx.Rngs(0))
    rng = np.random.RandomState(0)
    ids = rng.randint(0, config.vocab_size, (2, 10))
    mask = np.ones_like(ids)
    mask[1, :3] = 0
    inputs = model.prepare_inputs(ids, mask)
    targets = jnp.asarray(np.roll(ids, -1, axis=1))
    weight = jnp.asarray(mask, jnp.float32)

    @nnx.jit
    def forward(model, inputs):
        hidden = model.forward_hidden(inputs)[0]
        return model.logits(hidden), token_logprobs(hidden, model.lm_head_weight(), targets, vocab_chunk=300)

    def full_logprobs(logits):
        return jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1)[..., 0]

    names = apply_lora(model, r".*(q_proj|k_proj|v_proj|o_proj)", rank=4, alpha=8.0, rngs=nnx.Rngs(1))
    assert names == [f"language_model.layers.0.self_attn.{p}_proj" for p in "koqv"]
    q = model.language_model.layers[0].self_attn.q_proj
    axes = q.kernel.get_metadata()["out_sharding"]  # adapters inherit the kernel's logical axis names
    assert q.lora_a.get_metadata()["out_sharding"] == (axes[0], None)
    assert q.lora_b.get_metadata()["out_sharding"] == (None, axes[1])
    with lora_disabled(model):
        base_logits, base_lp = forward(model, inputs)
    init_logits, init_lp = forward(model, inputs)
    np.testing.assert_array_equal(init_logits, base_logits)  # zero B: the adapted model is the base model
    np.testing.assert_allclose(init_lp, full_logprobs(init_logits), atol=1e-5)

    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=LoRAParam)

    @nnx.jit
    def step(model, opt, inputs):
        def loss_fn(m):
            lp = token_logprobs(m.forward_hidden(inputs)[0], m.lm_head_weight(), targets, vocab_chunk=300)
            return -(lp * weight).sum() / weight.sum()
        loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, LoRAParam))(model)
        opt.update(model, grads)
        return loss

    losses = [float(step(model, opt, inputs)) for _ in range(3)]
    assert losses[-1] < losses[0]
    adapted, adapted_lp = forward(model, inputs)
    assert float(jnp.abs(adapted - base_logits).max()) > 1e-2
    np.testing.assert_allclose(adapted_lp, full_logprobs(adapted), atol=1e-5)
    with lora_disabled(model):  # the reference policy is still exactly the base model
        np.testing.assert_array_equal(forward(model, inputs)[0], base_logits)
    merge_lora(model)
    np.testing.assert_allclose(forward(model, inputs)[0], adapted, atol=1e-5)


def test_an_adapter_on_lm_head_reaches_the_logits_and_its_gradient():
    """``lm_head_weight()`` returned the base kernel, so an adapter on ``lm_head`` was ignored by the logits, the
    sampler and the chunked log-probs until merged (merged vs unmerged logits differed by ~0.5; its gradient was 0)."""
    models = pytest.importorskip("jaxdrive.models")
    testing = pytest.importorskip("jaxdrive.models.testing")
    from jaxdrive.models.logprobs import token_logprobs

    config = testing.tiny_hf_config("qwen3", text={"num_hidden_layers": 1})
    model = models.QwenModel(models.parse_config(config.to_dict()), rngs=nnx.Rngs(0))
    ids = np.random.RandomState(0).randint(0, config.vocab_size, (2, 6))
    targets = jnp.asarray(np.roll(ids, -1, axis=1))
    inputs = model.prepare_inputs(ids)
    base = np.asarray(model(ids))
    assert apply_lora(model, "lm_head", rank=2, alpha=4.0, rngs=nnx.Rngs(1)) == ["lm_head"]
    model.lm_head.lora_b[...] = 0.1 * jnp.ones_like(model.lm_head.lora_b[...])
    unmerged = np.asarray(model(ids))
    assert np.abs(unmerged - base).max() > 1e-2
    with lora_disabled(model):
        np.testing.assert_allclose(np.asarray(model(ids)), base, atol=1e-5)
    merge_lora(model)
    np.testing.assert_allclose(np.asarray(model(ids)), unmerged, atol=1e-5)
    with lora_disabled(model):  # merged, then disabled: the base again
        np.testing.assert_allclose(np.asarray(model(ids)), base, atol=1e-5)
    unmerge_lora(model)

    def loss(m):
        return -token_logprobs(m.forward_hidden(inputs)[0], m.lm_head_weight(), targets).mean()

    grads = nnx.grad(loss, argnums=nnx.DiffState(0, LoRAParam))(model)
    assert float(jnp.abs(grads["lm_head"]["lora_a"][...]).max()) > 0
