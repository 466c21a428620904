"""Named registries through which ``jaxdrive train`` configs choose datasets, rewards and decoders.

A config names an entry (``data.kind = "tiny_bright"``, ``rewards = {"exact_match": {...}}``, ``decoder.kind``);
the job looks it up here. Entries are lazy ``"module:attribute"`` targets, so registering a recipe imports nothing
until a job uses it. A config may also name a target directly (``data.kind = "mypkg.data:build"``) to plug in code
that lives outside jaxdrive.

Factory signatures (``cfg`` is the entry's ``ConfigDict`` block; ``tokenizer`` the pretrained model's tokenizer or
None for tiny token-id recipes):
  * DATASETS: ``fn(cfg, tokenizer) -> list[dict]``, examples with ``prompt`` / ``answer`` int arrays and optional
    ``pixel_values`` / ``image_grid_thw`` / extra fields the rewards read.
  * REWARDS: ``fn(cfg) -> jaxdrive.train.rewards.Reward`` (the weight comes from ``cfg.weight``, default 1).
  * DECODERS: ``fn(cfg, tokenizer) -> Callable[[ids, mask], str]``.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


class Registry:
    """A name -> lazily imported factory table; unknown names are errors listing the known ones."""

    def __init__(self, what: str, entries: dict[str, str]):
        self.what = what
        self._entries: dict[str, str | Callable[..., Any]] = dict(entries)

    def register(self, name: str, target: str | Callable[..., Any]) -> None:
        """Adds ``name`` -> ``target`` (a callable or a ``"module:attribute"`` string); re-registering is an error."""
        if name in self._entries and self._entries[name] is not target:
            raise ValueError(f"{self.what} {name!r} is already registered ({self._entries[name]!r})")
        self._entries[name] = target

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> Callable[..., Any]:
        """The factory registered as ``name``, or the ``"module:attribute"`` target ``name`` spells."""
        target = self._entries.get(name)
        if target is None:
            if ":" not in name:
                raise ValueError(f"{self.what} {name!r} is not registered (known: {', '.join(self.names())}; "
                                 "or name a target as 'module:attribute')")
            target = name
        if callable(target):
            return target
        module, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"{self.what} {name!r}: cannot load {target!r} ({e})") from None


DATASETS = Registry("dataset", {
    "tiny_memorise": "jaxdrive.train.tiny_recipes:memorise_dataset",
    "tiny_bright": "jaxdrive.train.tiny_recipes:bright_dataset",
    "judge_gates": "jaxdrive.judge.recipes:gate_examples",
    "judge_pairs": "jaxdrive.judge.recipes:pair_examples",
})

REWARDS = Registry("reward", {
    "exact_match": "jaxdrive.train.rewards:exact_match_from_config",
    "judge_preference": "jaxdrive.judge.recipes:preference_reward_from_config",
})

DECODERS = Registry("decoder", {
    "tiny_words": "jaxdrive.train.tiny_recipes:words_decoder",
    "tokenizer": "jaxdrive.train.tiny_recipes:tokenizer_decoder",
    "judge_answer": "jaxdrive.judge.recipes:answer_decoder",
})
