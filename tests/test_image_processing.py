"""Parity of our numpy/PIL image preprocessing with transformers' Qwen2-VL image processor (PIL backend,
`Qwen2VLImageProcessorPil`, the backend that needs no torchvision)."""
import json

import numpy as np
import PIL.Image
import pytest

pytest.importorskip("transformers")
from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as hf_ip  # noqa: E402

from jaxdrive.models.image_processing import ImageProcessorConfig, preprocess_images, smart_resize  # noqa: E402


def _images(seed):
    rng = np.random.default_rng(seed)
    rgb = [PIL.Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
           for h, w in [(50, 70), (123, 301), (20, 20), (400, 333), (28, 1000)]]
    rgba = PIL.Image.fromarray(rng.integers(0, 256, (60, 90, 4), dtype=np.uint8), "RGBA")
    gray = PIL.Image.fromarray(rng.integers(0, 256, (61, 47), dtype=np.uint8), "L")
    return rgb + [rgba, gray, np.asarray(rgb[0])]


SETTINGS = {
    "defaults": {},
    "min_clamp": dict(min_pixels=100 * 100, max_pixels=200 * 200),   # small images are upscaled
    "max_clamp": dict(min_pixels=28 * 28, max_pixels=56 * 56 * 4),   # large images are downscaled
    "qwen3_style": dict(patch_size=16, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
                        max_pixels=64 * 64 * 16),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_matches_transformers(name):
    kwargs = SETTINGS[name]
    images = _images(seed=len(name))
    ref = hf_ip.Qwen2VLImageProcessorPil(**kwargs)(images, return_tensors="np")
    ours_cfg = ImageProcessorConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()})
    pixel_values, grid = preprocess_images(images, ours_cfg)
    np.testing.assert_array_equal(grid, ref["image_grid_thw"])
    assert pixel_values.dtype == np.float32 and pixel_values.shape == ref["pixel_values"].shape
    diff = np.abs(pixel_values - ref["pixel_values"]).max()
    print(f"{name}: pixel_values {pixel_values.shape}, grids {grid.tolist()}, max |diff| {diff:.1e}")
    np.testing.assert_allclose(pixel_values, ref["pixel_values"], rtol=0, atol=1e-5)


def test_clamping_actually_happens():
    """The min/max settings above really move the pixel count to the bounds (for the first four images; the 28x1000
    one cannot shrink below one 28-pixel row, as in transformers)."""
    images = _images(0)[:4]
    _, grid = preprocess_images(images, ImageProcessorConfig(**SETTINGS["min_clamp"]))
    assert (grid[:, 1] * grid[:, 2] * 14 * 14 >= 100 * 100).all()
    _, grid = preprocess_images(images, ImageProcessorConfig(**SETTINGS["max_clamp"]))
    assert (grid[:, 1] * grid[:, 2] * 14 * 14 <= 56 * 56 * 4).all()


def test_smart_resize_matches_transformers():
    rng = np.random.default_rng(0)
    for h, w in list(rng.integers(1, 3000, (200, 2))) + [(10, 1999), (28, 28), (1, 1)]:
        for lo, hi in [(56 * 56, 28 * 28 * 1280), (3136, 12544), (200 * 200, 400 * 400)]:
            if max(h, w) / min(h, w) > 200:
                continue
            assert smart_resize(int(h), int(w), 28, lo, hi) == hf_ip.smart_resize(int(h), int(w), 28, lo, hi)


def test_config_from_saved_preprocessor(tmp_path):
    hf = hf_ip.Qwen2VLImageProcessorPil(patch_size=16, min_pixels=1024, max_pixels=65536,
                                        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    hf.save_pretrained(tmp_path)
    cfg = ImageProcessorConfig.from_hf(json.loads((tmp_path / "preprocessor_config.json").read_text()))
    assert (cfg.patch_size, cfg.min_pixels, cfg.max_pixels, cfg.image_mean) == (16, 1024, 65536, (0.5, 0.5, 0.5))
    images = _images(3)[:3]
    np.testing.assert_array_equal(preprocess_images(images, cfg)[0], hf(images, return_tensors="np")["pixel_values"])


def test_bad_inputs_give_readable_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"images\[1\]: expected an RGB array of shape \[height, width, 3\].*"
                                         r"got shape \(40, 40, 4\)"):
        preprocess_images([rng.integers(0, 256, (40, 40, 3), dtype=np.uint8),
                           rng.integers(0, 256, (40, 40, 4), dtype=np.uint8)])
    with pytest.raises(ValueError, match=r"images\[0\]: expected an RGB array.*got shape \(3, 40, 40\)"):
        preprocess_images([rng.integers(0, 256, (3, 40, 40), dtype=np.uint8)])
    with pytest.raises(ValueError, match=r"expected dtype uint8"):
        preprocess_images([rng.random((40, 40, 3))])
    with pytest.raises(ValueError, match=r"aspect ratio must be <= 200, got 10x2500"):
        preprocess_images([np.zeros((10, 2500, 3), np.uint8)])
    with pytest.raises(ValueError, match=r"at least one image"):
        preprocess_images([])
    with pytest.raises(TypeError, match=r"images\[0\]: expected a PIL.Image.Image or a numpy uint8 array, got list"):
        preprocess_images([[1, 2, 3]])
