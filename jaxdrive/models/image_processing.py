"""Image preprocessing for the Qwen-VL vision towers, in numpy + PIL.

Reproduces transformers' Qwen2-VL image processor (PIL backend, `Qwen2VLImageProcessorPil`; Qwen2.5-VL and Qwen3-VL
use the same processor with their own patch size / mean / std) bit for bit:

1. convert to RGB (transparent images are composited onto white),
2. `smart_resize`: both sides multiples of patch_size * merge_size, pixel count clamped to [min_pixels, max_pixels],
   aspect ratio kept as well as possible; resampled with PIL bicubic on the uint8 image,
3. rescale by 1/255 (in float64, then float32) and normalise (x - mean) / std in float32,
4. duplicate the frame `temporal_patch_size` times and flatten into patches ordered block-major over the
   merge_size x merge_size merge blocks, each patch flattened as (channel, time, row, col).

Output: pixel_values float32 [sum of h*w over images, C * T * P * P] and image_grid_thw int64 [num_images, 3]
(t=1, h, w in patches), the arrays the vision towers and transformers' models take.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import PIL.Image
from jaxtyping import Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.json_values import is_finite_number

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ImageProcessorConfig:
    """Preprocessing settings; defaults are Qwen2-VL's / Qwen2.5-VL's (Qwen3-VL: patch_size=16, mean=std=0.5).

    min_pixels / max_pixels: bounds on resized height*width in pixels. rescale_factor: multiplier to [0, 1].
    """

    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    image_mean: tuple[float, ...] = OPENAI_CLIP_MEAN
    image_std: tuple[float, ...] = OPENAI_CLIP_STD
    rescale_factor: float = 1 / 255

    def __post_init__(self):
        for name in ("patch_size", "temporal_patch_size", "merge_size", "min_pixels", "max_pixels"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise UserInputError(f"{name}: expected a positive integer, got {v!r}")
        if not (is_finite_number(self.rescale_factor, numpy_scalars=True) and self.rescale_factor > 0):
            raise UserInputError(f"rescale_factor: expected a positive number, got {self.rescale_factor!r}")
        for name in ("image_mean", "image_std"):
            v = getattr(self, name)
            if len(v) != 3 or not all(is_finite_number(x, numpy_scalars=True) for x in v) or (
                    name == "image_std" and min(v) <= 0):
                raise UserInputError(f"{name}: expected 3 finite numbers (one per RGB channel"
                                 f"{', positive' if name == 'image_std' else ''}), got {list(v)!r}")

    @classmethod
    def from_hf(cls, cfg: Mapping) -> "ImageProcessorConfig":
        """From a preprocessor_config.json dict: min/max pixels from `min_pixels`/`max_pixels` or from
        `size` = {"shortest_edge": min_pixels, "longest_edge": max_pixels} (explicit keys win, as transformers).
        A value of the wrong type is a ValueError naming its key (``__post_init__`` checks the rest)."""
        size = cfg.get("size") or {}
        if not isinstance(size, Mapping):
            raise UserInputError(f"size: expected an object {{shortest_edge, longest_edge}}, got {size!r}")
        for key in ("image_mean", "image_std"):
            if key in cfg and not isinstance(cfg[key], (list, tuple)):
                raise UserInputError(f"{key}: expected a list of 3 numbers, got {cfg[key]!r}")
        kwargs = {k: cfg[k] for k in ("patch_size", "temporal_patch_size", "merge_size", "rescale_factor")
                  if k in cfg}
        kwargs["min_pixels"] = cfg.get("min_pixels", size.get("shortest_edge", cls.min_pixels))
        kwargs["max_pixels"] = cfg.get("max_pixels", size.get("longest_edge", cls.max_pixels))
        for key in ("image_mean", "image_std"):
            if key in cfg:
                kwargs[key] = tuple(cfg[key])
        return cls(**kwargs)


PREPROCESSOR_FILE = "preprocessor_config.json"


def read_preprocessor_config(directory: str | os.PathLike) -> ImageProcessorConfig | None:
    """The image processor settings of a pretrained ``directory``'s ``preprocessor_config.json``; None when it has
    none. A file that is not a JSON object or holds a value of the wrong type is a ValueError naming it (a wrong
    patch or merge size, mean or std otherwise changed every image silently)."""
    from jaxdrive.models.config import read_json_object

    file = os.path.join(os.fspath(directory), PREPROCESSOR_FILE)
    if not os.path.exists(file):
        return None
    raw = read_json_object(file)
    try:
        return ImageProcessorConfig.from_hf(raw)
    except ValueError as e:
        raise UserInputError(f"{file}: {e}") from None


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """Target (height, width) in pixels: multiples of `factor`, area within [min_pixels, max_pixels], aspect ratio
    kept as closely as possible. Rejects aspect ratios above 200 (as transformers)."""
    if height <= 0 or width <= 0:
        raise UserInputError(f"image size: height and width must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > 200:
        raise UserInputError(f"image size: aspect ratio must be <= 200, got {height}x{width} "
                         f"(ratio {max(height, width) / min(height, width):.1f})")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def to_rgb_uint8(image, index: int = 0) -> np.ndarray:
    """A PIL image (any mode; alpha composited onto white) or a uint8 array [H, W, 3] as uint8 [H, W, 3]."""
    if isinstance(image, PIL.Image.Image):
        if "A" in image.getbands() or image.info.get("transparency") is not None:
            rgba = image.convert("RGBA")
            white = PIL.Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            image = PIL.Image.alpha_composite(white, rgba)
        return np.asarray(image.convert("RGB"))
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[-1] != 3:
            raise UserInputError(f"images[{index}]: expected an RGB array of shape [height, width, 3] (channels last), "
                             f"got shape {image.shape}; pass a PIL image to convert other modes")
        if image.dtype != np.uint8:
            raise UserInputError(f"images[{index}]: expected dtype uint8 (0..255), got {image.dtype}")
        return image
    raise TypeError(f"images[{index}]: expected a PIL.Image.Image or a numpy uint8 array, got {type(image).__name__}")


def patchify(image: Float[np.ndarray, "c h w"], cfg: ImageProcessorConfig) -> Float[np.ndarray, "n patch_dim"]:
    """Normalised image [C, H, W] -> patches [(H/P)*(W/P), C*T*P*P] in block-major merge order, the single frame
    repeated temporal_patch_size times inside each patch."""
    c, h, w = image.shape
    p, m, t = cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size
    gh, gw = h // p, w // p
    x = image.reshape(c, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)  # (bh, bw, i, j, C, py, px)
    x = np.broadcast_to(x[:, :, :, :, :, None], x.shape[:5] + (t,) + x.shape[5:])
    return x.reshape(gh * gw, c * t * p * p)


def preprocess_images(images: Sequence, config: ImageProcessorConfig = ImageProcessorConfig()
                      ) -> tuple[Float[np.ndarray, "n patch_dim"], Int[np.ndarray, "num_images 3"]]:
    """Images (PIL or uint8 [H, W, 3]) -> (pixel_values float32 [N, 3*T*P*P], image_grid_thw int64 [I, 3])."""
    if isinstance(images, (PIL.Image.Image, np.ndarray)):
        images = [images]
    if len(images) == 0:
        raise UserInputError("images: expected at least one image, got an empty sequence")
    if len(config.image_mean) != 3 or len(config.image_std) != 3:
        raise UserInputError(f"image_mean / image_std: expected 3 values each (RGB), got {config.image_mean} / "
                         f"{config.image_std}")
    factor = config.patch_size * config.merge_size
    mean = np.asarray(config.image_mean, dtype=np.float32)[:, None, None]
    std = np.asarray(config.image_std, dtype=np.float32)[:, None, None]
    patches, grids = [], []
    for k, image in enumerate(images):
        rgb = to_rgb_uint8(image, k)
        h, w = smart_resize(rgb.shape[0], rgb.shape[1], factor, config.min_pixels, config.max_pixels)
        resized = np.asarray(PIL.Image.fromarray(rgb).resize((w, h), resample=PIL.Image.Resampling.BICUBIC))
        chw = (resized.transpose(2, 0, 1).astype(np.float64) * config.rescale_factor).astype(np.float32)
        patches.append(patchify((chw - mean) / std, config))
        grids.append((1, h // config.patch_size, w // config.patch_size))
    return np.concatenate(patches, axis=0).astype(np.float32), np.asarray(grids, dtype=np.int64)
