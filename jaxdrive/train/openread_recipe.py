"""OpenREAD training data for ``jaxdrive train``: CoT records (``jaxdrive.data.openread_cot``) tokenized with the
policy's chat template, registered in ``registry.DATASETS`` as "openread_synthetic", "openread_lingoqa",
"openread_omnidrive" and "openread_tfds" (any of those built as a TFDS dataset, ``jaxdrive.datasets``).

Each example: ``prompt`` ids (system prompt + question, generation prompt appended), ``answer`` ids (the
``<think>/<answer>`` target and the end-of-turn token), and the fields the OpenREAD rewards read: ``task``,
``question``, ``reference`` (the answer text), ``trajectory`` (planning), ``answer_text`` (the full target).
Text-only: image paths of the public sets are kept in ``images`` for a VLM pipeline but not encoded here.
"""
from __future__ import annotations

import numpy as np

from jaxdrive.data import openread_cot as cot
from jaxdrive.errors import UserInputError
from jaxdrive.eval.cot_format import SYSTEM_PROMPT

IM_END = "<|im_end|>"


def system_prompt(name: str) -> str:
    """``"openread"`` -> OpenREAD's GRPO system prompt; ``""`` -> none; anything else is used as written."""
    return SYSTEM_PROMPT if name == "openread" else name


def encode_record(rec: dict, tokenizer, system: str = SYSTEM_PROMPT) -> dict:
    """One training example from a CoT record (see the module docstring)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": rec["question"]}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer.encode(text, add_special_tokens=False)
    answer = tokenizer.encode(rec["target"] + IM_END, add_special_tokens=False)
    ex = {"prompt": np.asarray(prompt, np.int32), "answer": np.asarray(answer, np.int32), "task": rec["task"],
          "question": rec["question"], "reference": rec["answer"], "answer_text": rec["target"], "id": rec["id"]}
    if rec["task"] == cot.PLANNING:
        ex["trajectory"] = cot.trajectory_array(rec)
    return ex


def _need_tokenizer(tokenizer, kind: str):
    if tokenizer is None:
        raise UserInputError(f"data.kind={kind!r} needs a tokenizer: use model.kind='pretrained' with a model.path holding "
                         "one (python -m jaxdrive.train.openread_tiny DIR builds a tiny one)")


def _encode_all(records: list[dict], cfg, tokenizer, kind: str) -> list[dict]:
    _need_tokenizer(tokenizer, kind)
    system = system_prompt(cfg.get("system_prompt", "openread"))
    out = [encode_record(r, tokenizer, system) for r in records]
    limit = cfg.get("max_examples")
    return out[:limit] if limit else out


def synthetic_dataset(cfg, tokenizer) -> list[dict]:
    """``data.kind = "openread_synthetic"``: ``num_scenes``, ``seed``, ``tasks`` (default all three),
    ``describe_scene`` (True), ``planning`` ("logged" | "constant_speed": the rule-determined planning variant),
    ``system_prompt`` ("openread" | "" | text), ``max_examples``."""
    records = cot.synthetic_records(cfg.num_scenes, cfg.get("seed", 0),
                                    tuple(cfg.get("tasks", (cot.KNOWLEDGE, cot.PLANNING, cot.COUNTERFACTUAL))),
                                    cfg.get("describe_scene", True), planning=cfg.get("planning", "logged"))
    return _encode_all(records, cfg, tokenizer, "openread_synthetic")


def critic_pairs_dataset(cfg, tokenizer) -> list[dict]:
    """``data.kind = "openread_critic_pairs"``: SFT examples that teach a small Qwen3 the OpenREAD critic's job on the
    synthetic knowledge questions (``cot.critic_pairs``: ``num_scenes``, ``seed``, ``negatives`` per record,
    ``describe_scene``). The prompt is the critic prompt exactly as ``eval.critic.QwenCritic`` renders it with
    ``max_len = critic_max_len`` (give the critic the same value), the answer "yes" or "no" then the end-of-turn token, so the trained model's yes/no logits after the
    prompt are the critic's reading. ``max_examples`` caps the count."""
    from jaxdrive.eval.critic import render_prompt

    _need_tokenizer(tokenizer, "openread_critic_pairs")
    records = cot.synthetic_records(cfg.num_scenes, cfg.get("seed", 0), (cot.KNOWLEDGE,), cfg.get("describe_scene", True))
    out = []
    for i, pair in enumerate(cot.critic_pairs(records, cfg.get("seed", 0), cfg.get("negatives", 1))):
        prompt = render_prompt(tokenizer, pair["question"], pair["reference"], pair["prediction"],
                               max_len=cfg.get("critic_max_len", 1024))
        answer = tokenizer.encode(("yes" if pair["match"] else "no") + IM_END, add_special_tokens=False)
        out.append({"prompt": np.asarray(prompt, np.int32), "answer": np.asarray(answer, np.int32), "id": f"pair/{i}",
                    **pair})
    limit = cfg.get("max_examples")
    return out[:limit] if limit else out


def lingoqa_dataset(cfg, tokenizer) -> list[dict]:
    """``data.kind = "openread_lingoqa"``: ``root`` (local LingoQA directory), ``split`` ("train": action/ and
    scenery/, the default; "val": evaluation/), ``rationale_column``."""
    return _encode_all(cot.load_lingoqa(cfg.root, cfg.get("rationale_column", "rationale"), cfg.get("split", "train")),
                       cfg, tokenizer, "openread_lingoqa")


def omnidrive_dataset(cfg, tokenizer) -> list[dict]:
    """``data.kind = "openread_omnidrive"``: ``root`` (local OmniDrive-nuScenes directory), ``split``."""
    return _encode_all(cot.load_omnidrive(cfg.root, cfg.get("split", "train")), cfg, tokenizer, "openread_omnidrive")


def tfds_dataset(cfg, tokenizer) -> list[dict]:
    """``data.kind = "openread_tfds"``: ``path`` (a dataset built by ``jaxdrive data build`` of kind openread_cot,
    omnidrive or lingoqa), ``split`` ("train"); read through its grain loader in stored order (every process reads
    all of it: the trainer's sampler picks each step's rows), ``system_prompt``, ``max_examples``."""
    from jaxdrive.datasets.base import dataset_meta
    from jaxdrive.datasets.loader import grain_loader

    kind = dataset_meta(cfg.path)["kind"]
    if kind not in ("openread_cot", "omnidrive", "lingoqa"):
        raise UserInputError(f"data.path {cfg.path}: a {kind!r} dataset; openread_tfds reads openread_cot, omnidrive "
                         "or lingoqa builds")
    loader = grain_loader(cfg.path, cfg.get("split", "train"), shuffle=False, num_epochs=1, shard_index=0,
                          shard_count=1)
    return _encode_all(list(loader), cfg, tokenizer, "openread_tfds")


def mixture_dataset(cfg, tokenizer) -> list[dict]:
    """``data.kind = "openread_mix"``: the concatenation of the sub-blocks of ``sources`` (each a data block with its
    own ``kind``, e.g. openread_lingoqa + openread_omnidrive for the cold start), shuffled with ``seed``."""
    from jaxdrive.train.registry import DATASETS

    if not cfg.get("sources"):
        raise UserInputError("data.sources: expected at least one sub-block with a 'kind'")
    out = []
    for name, block in cfg.sources.items():
        out += DATASETS.get(block.kind)(block, tokenizer)
    order = np.random.default_rng(cfg.get("seed", 0)).permutation(len(out))
    return [out[i] for i in order]
