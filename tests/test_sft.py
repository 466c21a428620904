"""SFT: the loss is the shifted token cross-entropy on target spans only, and a tiny random VLM memorises a small
multimodal set through the shared trainer."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxdrive.train import data, optim, sft
from jaxdrive.train.tiny_recipes import TOKENS, memorise_examples, tiny_vlm
from jaxdrive.train.trainer import Trainer, grad_step


def _loss_and_grad_fn(model):
    """(mean loss, grads w.r.t. all params) through the trainer's jitted gradient step (shared compilation)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss_and_grad(arrays):
        grads, total, denom, _ = grad_step(graphdef, sft.sft_loss_fn, params, rest, sft.sft_batch(model, arrays),
                                           jax.random.key(0))
        return total / denom, grads

    return loss_and_grad


def test_loss_is_masked_shifted_cross_entropy_and_mask_is_honoured():
    model = tiny_vlm(seed=1)
    exs = memorise_examples(8, answer_len=2, seed=3)
    trailing = [11, 12]  # an observation after the answer: attended to, but masked out of the loss
    rows = [sft.sft_example(e["prompt"], np.concatenate([e["answer"], trailing]), 10,
                            pixel_values=e["pixel_values"], image_grid_thw=e["image_grid_thw"]) for e in exs]
    for r, e in zip(rows, exs):
        r["loss_mask"][len(e["prompt"]) + len(e["answer"]):] = 0.0
    arrays = data.stack_examples(rows)

    # the value: -mean log softmax(logits[s])[ids[s+1]] over positions whose *target* is in the loss mask
    loss_and_grad = _loss_and_grad_fn(model)
    assert (arrays["attention_mask"][:, -2:] == 1).all() and (arrays["loss_mask"][:, -2:] == 0).all()
    loss, grads = loss_and_grad(arrays)
    pv = arrays["pixel_values"].reshape(-1, arrays["pixel_values"].shape[-1])
    logits = np.asarray(model(arrays["input_ids"], arrays["attention_mask"], pv, arrays["image_grid_thw"].reshape(-1, 3)))
    logp = jax.nn.log_softmax(logits, -1)
    ids, m = arrays["input_ids"], arrays["loss_mask"]
    b, s = np.nonzero(m[:, 1:])
    want = -np.mean(np.asarray(logp)[b, s, ids[b, s + 1]])
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    assert m.sum() == 8 * 3  # 2 answer tokens + eos per example

    # changing the masked trailing tokens changes neither loss nor gradient (they are not targets, and the causal
    # model's predictions of the answer do not see them) ...
    changed = dict(arrays, input_ids=arrays["input_ids"].copy())
    changed["input_ids"][:, -2:] = np.arange(16).reshape(8, 2) + 20
    loss2, grads2 = loss_and_grad(changed)
    assert float(loss2) == float(loss)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), grads, grads2)
    # ... whereas with those tokens in the mask the same change does move the gradient (the check has teeth)
    unmasked = dict(arrays, loss_mask=arrays["attention_mask"].astype(np.float32))
    unmasked_changed = dict(changed, loss_mask=unmasked["loss_mask"])
    _, g_a = loss_and_grad(unmasked)
    _, g_b = loss_and_grad(unmasked_changed)
    diff = max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(g_a), jax.tree.leaves(g_b)))
    assert diff > 1e-4


def test_sft_example_validation():
    import pytest

    with pytest.raises(ValueError, match="max_len"):
        sft.sft_example([1, 2, 3], [4, 5], 4)
    row = sft.sft_example([7, 8], [5, TOKENS["eos"]], 6)
    np.testing.assert_array_equal(row["loss_mask"], [0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(row["attention_mask"], [1, 1, 1, 1, 0, 0])


def test_sft_memorises_a_small_multimodal_set():
    model = tiny_vlm(seed=0)
    exs = memorise_examples(8, answer_len=3, seed=0)
    arrays = data.stack_examples([sft.sft_example(e["prompt"], e["answer"], 10, pixel_values=e["pixel_values"],
                                                  image_grid_thw=e["image_grid_thw"]) for e in exs])
    steps = 120
    tx = optim.make_optimizer(ml_collections.ConfigDict(dict(lr=1e-2, warmup_steps=10, clip_norm=1.0)), steps)
    trainer = Trainer(model, loss_fn=sft.sft_loss_fn, tx=tx, trainable=optim.trainable_filter("full"), seed=0,
                      progress=False)
    sampler = data.EpochSampler(8, 8, seed=0)
    records = trainer.run(steps, lambda tr, step, key: (sft.sft_batch(model, data.take(arrays, sampler.indices(step - 1))), {}))
    losses = [r["loss"] for r in records]
    print(f"SFT memorisation: loss {losses[0]:.3f} -> {losses[-1]:.4f} in {steps} steps")
    assert losses[0] > 2.0  # a random model knows nothing (ln 48 = 3.9)
    assert losses[-1] < 0.05
