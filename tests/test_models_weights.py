"""HF safetensors import (both key layouts), export back to transformers, and errors naming bad tensors."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flax import nnx  # noqa: E402

from jaxdrive.models import from_pretrained, save_pretrained  # noqa: E402
from jaxdrive.models import testing as T  # noqa: E402
from jaxdrive.models.safetensors_io import SafetensorsDir, write_safetensors  # noqa: E402


def _flat(model) -> dict:
    return {tuple(p): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model))}


def _rewrite(src, dst, rename, drop=(), reshape=None):
    """Copy an HF dir with renamed / dropped / reshaped tensors."""
    os.makedirs(dst, exist_ok=True)
    reader = SafetensorsDir(src)
    keys = {rename(k): k for k in reader.keys() if k not in drop}
    arrays = {}
    for new, old in keys.items():
        a = np.asarray(reader.get(old))
        arrays[new] = a[..., :-1] if reshape == old else a
    write_safetensors(os.path.join(dst, "model.safetensors"), [(k, a.shape, a.dtype) for k, a in arrays.items()],
                      arrays.__getitem__)
    with open(os.path.join(src, "config.json")) as f, open(os.path.join(dst, "config.json"), "w") as g:
        g.write(f.read())


def _to_nested(k: str) -> str:
    if k.startswith("visual."):
        return "model." + k
    if k.startswith("model.") and not k.startswith("model.language_model."):
        return "model.language_model." + k[len("model."):]
    return k


def _to_legacy(k: str) -> str:
    if k.startswith("model.visual."):
        return k[len("model."):]
    return k.replace("model.language_model.", "model.")


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_both_key_layouts_import(family, tmp_path):
    """transformers saves Qwen2.5-VL legacy (model.layers / visual) and Qwen3-VL nested (model.language_model /
    model.visual); each family also loads from the other layout with identical parameters."""
    T.save_tiny_model(family, tmp_path / "hf", seed=1)
    keys = SafetensorsDir(tmp_path / "hf").keys()
    native_nested = any(k.startswith("model.language_model.") for k in keys)
    assert native_nested == (family == "qwen3_vl")
    _rewrite(tmp_path / "hf", tmp_path / "other", _to_legacy if native_nested else _to_nested)
    a, b = _flat(from_pretrained(tmp_path / "hf")), _flat(from_pretrained(tmp_path / "other"))
    assert a.keys() == b.keys() and any(p[0] == "visual" for p in a)
    for p in a:
        np.testing.assert_array_equal(a[p], b[p], err_msg=str(p))


@pytest.mark.parametrize("family,tie", [("qwen3", True), ("qwen2_5_vl", False), ("qwen3_vl", False)])
def test_export_loads_in_transformers_with_identical_logits(family, tie, tmp_path):
    hf = T.save_tiny_model(family, tmp_path / "hf", seed=2, tie_word_embeddings=tie)
    model = from_pretrained(tmp_path / "hf")
    save_pretrained(model, tmp_path / "out", max_shard_bytes=200_000)  # forces a sharded export with an index
    assert os.path.exists(tmp_path / "out" / "model.safetensors.index.json")
    reloaded = type(hf).from_pretrained(tmp_path / "out", dtype=torch.float32).eval()
    ids = np.random.default_rng(0).integers(1, 990, (1, 10))
    pv = grid = None
    if family != "qwen3":
        u = hf.config.vision_config.patch_size * 2
        pv, grid = T.image_inputs(hf.config, [(u, 2 * u)])
        ids = np.asarray([T.prompt_with_images(hf.config, grid, [5, 6], [], [7])])
    np.testing.assert_array_equal(T.hf_logits(reloaded, ids, None, pv, grid), T.hf_logits(hf, ids, None, pv, grid))
    again = _flat(from_pretrained(tmp_path / "out"))
    for p, v in _flat(model).items():
        np.testing.assert_array_equal(v, again[p], err_msg=str(p))


def test_missing_and_misshaped_tensors_are_named(tmp_path):
    T.save_tiny_model("qwen2_5_vl", tmp_path / "hf", seed=3)
    key = "model.layers.1.self_attn.k_proj.bias"
    _rewrite(tmp_path / "hf", tmp_path / "missing", lambda k: k, drop=(key,))
    with pytest.raises(ValueError, match=f"missing tensor '{key}'"):
        from_pretrained(tmp_path / "missing")
    bad = "visual.blocks.0.mlp.up_proj.weight"
    _rewrite(tmp_path / "hf", tmp_path / "bad", lambda k: k, reshape=bad)
    with pytest.raises(ValueError, match=rf"tensor '{bad}': expected shape \(64, 32\), got \(64, 31\)"):
        from_pretrained(tmp_path / "bad")
    with open(tmp_path / "hf" / "config.json") as f:
        raw = json.load(f)
    raw["model_type"] = "llava"
    with open(tmp_path / "bad" / "config.json", "w") as f:
        json.dump(raw, f)
    with pytest.raises(ValueError, match="model_type"):
        from_pretrained(tmp_path / "bad")


def test_bfloat16_checkpoint_and_dtype(tmp_path):
    hf = T.save_tiny_model("qwen3", tmp_path / "hf", seed=4)
    hf.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    model = from_pretrained(tmp_path / "bf16", dtype=jnp.bfloat16)
    w = model.language_model.layers[0].mlp.up_proj.kernel[...]
    assert w.dtype == jnp.bfloat16
    ref = hf.model.layers[0].mlp.up_proj.weight.detach().float().numpy().T
    np.testing.assert_array_equal(np.asarray(w.astype(jnp.float32)), ref)
    logits = model(np.array([[1, 2, 3, 4]]))
    assert logits.dtype == jnp.float32 and bool(jnp.isfinite(logits).all())
    assert jax.tree.leaves(nnx.state(model))[0].dtype == jnp.bfloat16


@pytest.mark.parametrize("family", ["qwen3", "qwen2_5_vl"])
def test_export_writes_a_generation_config_transformers_loads(family, tmp_path):
    """Found by a review: save_pretrained wrote no generation_config.json, so transformers' ``generate`` on an
    exported model lost the source's stop ids (Qwen chat models stop on <|im_end|> and <|endoftext|>) and sampling
    defaults. The token ids come from config.json (the text config's for a VL model) when the source has no
    generation config, and the source's generation config is kept when it has one."""
    from transformers import GenerationConfig

    from jaxdrive.models.config import stop_token_ids

    hf = T.save_tiny_model(family, tmp_path / "hf", seed=5)
    os.remove(tmp_path / "hf" / "generation_config.json")
    save_pretrained(from_pretrained(tmp_path / "hf"), tmp_path / "plain")
    gen = GenerationConfig.from_pretrained(tmp_path / "plain")
    assert (gen.bos_token_id, gen.eos_token_id, gen.pad_token_id) == (None, T.TINY_EOS, 0)

    source = {"eos_token_id": [T.TINY_EOS, 7], "pad_token_id": 0, "do_sample": True, "temperature": 0.7,
              "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    (tmp_path / "hf" / "generation_config.json").write_text(json.dumps(source))
    save_pretrained(from_pretrained(tmp_path / "hf"), tmp_path / "chat")
    gen = type(hf).from_pretrained(tmp_path / "chat").generation_config  # what generate() uses
    assert gen.eos_token_id == [T.TINY_EOS, 7] and gen.pad_token_id == 0 and gen.do_sample
    assert (gen.temperature, gen.top_p, gen.top_k, gen.repetition_penalty) == (0.7, 0.8, 20, 1.05)
    assert stop_token_ids(tmp_path / "chat") == (T.TINY_EOS, 7)
