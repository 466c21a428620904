"""Flax NNX Qwen2.5-VL / Qwen3-VL / Qwen3 models: ``from_pretrained(path, dtype)`` loads a local HF directory."""
from jaxdrive.models.config import ModelConfig, TextConfig, load_config, parse_config
from jaxdrive.models.generate import GenerationOutput, SamplingConfig, generate, teacher_forced_logprobs
from jaxdrive.models.vlm import ModelInputs, QwenModel
from jaxdrive.models.weights import from_pretrained, save_pretrained

__all__ = [
    "GenerationOutput",
    "ModelConfig",
    "ModelInputs",
    "QwenModel",
    "SamplingConfig",
    "TextConfig",
    "from_pretrained",
    "generate",
    "load_config",
    "parse_config",
    "save_pretrained",
    "teacher_forced_logprobs",
]
