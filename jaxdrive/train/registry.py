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
  * EXPORTS (by ``data.kind``, optional): ``fn(cfg) -> {file name: text}`` (``cfg`` the data block), files the
    job's ``export_dir`` gets beside the weights (``jobs.export_pretrained``): what a user of the model must know of
    its training (the judge kinds: ``jaxdrive_judge.json``).
  * ROLLOUTS (``grpo.rollouts``, default "single_turn"): ``cls(examples, rewards, decode, grpo_cfg)``, the GRPO
    ``batch_fn``; entries other than "single_turn" also get ``tokenizer=`` (multi-turn tool episodes:
    "agent_multi_turn").
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from jaxdrive.errors import UserInputError


class Registry:
    """A name -> lazily imported factory table; unknown names are errors listing the known ones."""

    def __init__(self, what: str, entries: dict[str, str]):
        self.what = what
        self._entries: dict[str, str | Callable[..., Any]] = dict(entries)

    def register(self, name: str, target: str | Callable[..., Any]) -> None:
        """Adds ``name`` -> ``target`` (a callable or a ``"module:attribute"`` string); re-registering is an error."""
        if name in self._entries and self._entries[name] is not target:
            raise UserInputError(f"{self.what} {name!r} is already registered ({self._entries[name]!r})")
        self._entries[name] = target

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> Callable[..., Any]:
        """The factory registered as ``name``, or the ``"module:attribute"`` target ``name`` spells."""
        target = self._entries.get(name)
        if target is None:
            if ":" not in name:
                raise UserInputError(f"{self.what} {name!r} is not registered (known: {', '.join(self.names())}; "
                                 "or name a target as 'module:attribute')")
            target = name
        if callable(target):
            return target
        module, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise UserInputError(f"{self.what} {name!r}: cannot load {target!r} ({e})") from None


DATASETS = Registry("dataset", {
    "tiny_memorise": "jaxdrive.train.tiny_recipes:memorise_dataset",
    "tiny_bright": "jaxdrive.train.tiny_recipes:bright_dataset",
    "agent_tiny_mcq": "jaxdrive.agent.grpo_rollout:tiny_mcq_dataset",
    "agent_mcq": "jaxdrive.agent.grpo_rollout:mcq_dataset",
    "agent_sft_records": "jaxdrive.agent.sft_data:records_dataset",
    "openread_synthetic": "jaxdrive.train.openread_recipe:synthetic_dataset",
    "openread_lingoqa": "jaxdrive.train.openread_recipe:lingoqa_dataset",
    "openread_omnidrive": "jaxdrive.train.openread_recipe:omnidrive_dataset",
    "openread_mix": "jaxdrive.train.openread_recipe:mixture_dataset",
    "openread_tfds": "jaxdrive.train.openread_recipe:tfds_dataset",
    "openread_critic_pairs": "jaxdrive.train.openread_recipe:critic_pairs_dataset",
    "chat_qa": "jaxdrive.train.chat_qa:chat_qa_dataset",
    "judge_gates": "jaxdrive.judge.recipes:gate_examples",
    "judge_pairs": "jaxdrive.judge.recipes:pair_examples",
    "judge_direct": "jaxdrive.judge.recipes:direct_examples",
})

EXPORTS = Registry("export", {
    "judge_gates": "jaxdrive.judge.recipes:export_files",
    "judge_pairs": "jaxdrive.judge.recipes:export_files",
    "judge_direct": "jaxdrive.judge.recipes:export_files",
})

REWARDS = Registry("reward", {
    "exact_match": "jaxdrive.train.rewards:exact_match_from_config",
    "agent_tiered": "jaxdrive.agent.reward:tiered_from_config",
    "openread_trajectory": "jaxdrive.train.openread_rewards:trajectory_from_config",
    "openread_format": "jaxdrive.train.openread_rewards:format_from_config",
    "openread_semantic": "jaxdrive.train.openread_rewards:semantic_from_config",
    "openread_critic": "jaxdrive.train.openread_rewards:critic_from_config",
    "openread_knowledge": "jaxdrive.train.openread_rewards:knowledge_from_config",
    "openread_total": "jaxdrive.train.openread_rewards:total_from_config",
    "judge_preference": "jaxdrive.judge.recipes:preference_reward_from_config",
    "judge_margin": "jaxdrive.judge.recipes:margin_reward_from_config",
})

DECODERS = Registry("decoder", {
    "tiny_words": "jaxdrive.train.tiny_recipes:words_decoder",
    "tokenizer": "jaxdrive.train.tiny_recipes:tokenizer_decoder",
    "agent_tiny": "jaxdrive.agent.grpo_rollout:tiny_words_decoder",
})

ROLLOUTS = Registry("rollouts", {
    "single_turn": "jaxdrive.train.grpo_trainer:Rollouts",
    "agent_multi_turn": "jaxdrive.agent.grpo_rollout:MultiTurnRollouts",
    "judge_answer": "jaxdrive.judge.recipes:answer_decoder",
})
