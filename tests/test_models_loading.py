"""Loading a transformers checkpoint is all-or-nothing by default: missing and unexpected tensors are named; a VL model
never loses its vision tower; ``strict=False`` is the explicit opt-out for partial loads."""
import builtins
import os

import numpy as np
import pytest

pytest.importorskip("torch")

from flax import nnx  # noqa: E402

from jaxdrive.models import from_pretrained  # noqa: E402
from jaxdrive.models import testing as T  # noqa: E402
from jaxdrive.models.config import load_config  # noqa: E402
from jaxdrive.models.safetensors_io import SafetensorsDir, write_safetensors  # noqa: E402
from jaxdrive.models.vlm import QwenModel  # noqa: E402
from jaxdrive.models.weights import load_weights  # noqa: E402


def _copy(src, dst, drop=(), extra=None):
    """Copy an HF directory with some tensors dropped and/or extra tensors added."""
    os.makedirs(dst, exist_ok=True)
    reader = SafetensorsDir(src)
    arrays = {k: np.asarray(reader.get(k)) for k in reader.keys() if not any(k.startswith(d) for d in drop)}
    arrays.update(extra or {})
    write_safetensors(os.path.join(dst, "model.safetensors"), [(k, a.shape, a.dtype) for k, a in arrays.items()],
                      arrays.__getitem__)
    with open(os.path.join(src, "config.json")) as f, open(os.path.join(dst, "config.json"), "w") as g:
        g.write(f.read())


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def saved(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "hf"
    T.save_tiny_model(request.param, path, seed=7)  # transformers' save_pretrained
    return request.param, path


def _vision_prefix(family):
    return "model.visual." if family == "qwen3_vl" else "visual."


def _some_key(family, part):
    text = "model.language_model." if family == "qwen3_vl" else "model."
    return {"text": text + "layers.1.mlp.up_proj.weight", "vision": _vision_prefix(family) + "blocks.0.norm1.weight"}[part]


def test_complete_checkpoint_loads_with_its_vision_tower(saved):
    family, path = saved
    model = from_pretrained(path)
    assert model.visual is not None
    keys = set(SafetensorsDir(path).keys())
    assert any(k.startswith(_vision_prefix(family)) for k in keys)


@pytest.mark.parametrize("part", ["text", "vision"])
def test_missing_tensor_is_named(saved, part, tmp_path):
    family, path = saved
    key = _some_key(family, part)
    _copy(path, tmp_path / "ck", drop=(key,))
    with pytest.raises(ValueError, match=rf"missing tensor '{key}'.*strict=False"):
        from_pretrained(tmp_path / "ck")


def test_checkpoint_without_vision_tower_fails(saved, tmp_path):
    """A VL checkpoint whose vision tensors are gone does not load as a text model."""
    family, path = saved
    _copy(path, tmp_path / "ck", drop=(_vision_prefix(family),))
    with pytest.raises(ValueError, match=rf"missing tensor '{_vision_prefix(family)}patch_embed\.proj\.weight'"):
        from_pretrained(tmp_path / "ck")


def test_unexpected_tensor_is_named(saved, tmp_path):
    family, path = saved
    extra = {"model.extra_head.weight": np.ones((3, 2), np.float32),
             _vision_prefix(family) + "blocks.9.attn.qkv.weight": np.ones((4,), np.float32)}
    _copy(path, tmp_path / "ck", extra=extra)
    with pytest.raises(ValueError, match=r"unexpected tensors .*'model.extra_head.weight'") as err:
        from_pretrained(tmp_path / "ck")
    assert _vision_prefix(family) + "blocks.9.attn.qkv.weight" in str(err.value)


def test_strict_false_is_the_explicit_partial_load(saved, tmp_path):
    """Opt-out: the missing parameter keeps the model's value, the unexpected tensor is skipped, both are reported."""
    family, path = saved
    key = _some_key(family, "vision")
    _copy(path, tmp_path / "ck", drop=(key,), extra={"model.extra_head.weight": np.ones((3, 2), np.float32)})
    full = from_pretrained(path)
    base = QwenModel(load_config(path), rngs=nnx.Rngs(3))
    with pytest.warns(UserWarning) as record:
        partial = load_weights(base, tmp_path / "ck", strict=False)
    text = " ".join(str(w.message) for w in record)
    assert key in text and "model.extra_head.weight" in text
    kept = np.asarray(partial.visual.blocks[0].norm1.scale[...])
    np.testing.assert_array_equal(kept, np.asarray(base.visual.blocks[0].norm1.scale[...]))
    assert not np.array_equal(kept, np.asarray(full.visual.blocks[0].norm1.scale[...]))
    np.testing.assert_array_equal(np.asarray(partial.visual.blocks[1].norm1.scale[...]),
                                  np.asarray(full.visual.blocks[1].norm1.scale[...]))
    with pytest.warns(UserWarning, match=key):
        assert from_pretrained(tmp_path / "ck", strict=False).visual is not None
    with pytest.raises(ValueError, match="abstract"):  # nothing to keep in a shape-only model
        load_weights(nnx.eval_shape(lambda: QwenModel(load_config(path), rngs=nnx.Rngs(0))), tmp_path / "ck",
                     strict=False)


def test_tied_lm_head_twin_is_not_unexpected(tmp_path):
    """A tied model's checkpoint may carry lm_head.weight (the embedding's twin); transformers ignores it, so do we."""
    T.save_tiny_model("qwen3", tmp_path / "hf", seed=1, tie_word_embeddings=True)
    emb = np.asarray(SafetensorsDir(tmp_path / "hf").get("model.embed_tokens.weight"))
    _copy(tmp_path / "hf", tmp_path / "ck", extra={"lm_head.weight": emb})
    assert from_pretrained(tmp_path / "ck").lm_head is None


def test_missing_vision_module_is_an_error_not_a_text_model(saved, monkeypatch):
    """An ImportError inside the vision tower propagates instead of building the model without ``visual``."""
    family, path = saved
    real_import = builtins.__import__

    def no_vision(name, *args, **kwargs):
        if name.startswith("jaxdrive.models.vision_qwen"):
            raise ImportError(f"simulated: {name} unavailable")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vision)
    with pytest.raises(ImportError, match="simulated"):
        QwenModel(load_config(path), rngs=nnx.Rngs(0))


def test_tied_config_with_a_different_lm_head_is_an_error(tmp_path):
    """config.json says tied but the checkpoint's lm_head.weight is not the embedding: transformers (5.x) loads it
    untied, and the load ignored it silently (logits off by ~1 on the tiny model); now an error naming the key."""
    T.save_tiny_model("qwen3", tmp_path / "hf", seed=1, tie_word_embeddings=True)
    emb = np.asarray(SafetensorsDir(tmp_path / "hf").get("model.embed_tokens.weight"))
    _copy(tmp_path / "hf", tmp_path / "ck", extra={"lm_head.weight": emb + 0.5})
    with pytest.raises(ValueError, match="'lm_head.weight' differs from 'model.embed_tokens.weight'"):
        from_pretrained(tmp_path / "ck")
