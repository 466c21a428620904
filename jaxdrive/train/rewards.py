"""Pluggable GRPO reward functions and their validated, weighted combination.

A reward is either
  * host Python: ``fn(completions: list[str], examples: list[dict]) -> Sequence[float | None]`` (one value per
    completion; ``examples[i]`` is the dataset example completion i answers), or
  * jnp: ``fn(tokens: Int[N, T], mask: Float[N, T], batch: dict of arrays [N, ...]) -> Float[N]`` run on device.

``combine_rewards`` sums ``weight * value`` over the rewards. A NaN, infinite or missing (None) value is an error
naming the reward and the row, never a silent zero, unless the caller passes ``allow_missing=True``: then, as TRL
does (``nansum`` over the reward functions), a row's total is the weighted sum of the values it has, and a row that no
reward scored is marked invalid, so ``grpo.group_advantages(valid=...)`` leaves it out of the group statistics
(advantage 0).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal, Sequence

import numpy as np

from jaxdrive.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class Reward:
    """One reward function with its weight; ``kind`` says where it runs ("host" Python or "jnp" on device)."""

    name: str
    fn: Callable[..., Any]
    weight: float = 1.0
    kind: Literal["host", "jnp"] = "host"


def _as_values(name: str, out: Any, n: int) -> np.ndarray:
    """Host values [n] float64 with None -> NaN; checks the count."""
    values = np.asarray([np.nan if v is None else v for v in np.asarray(out, dtype=object).reshape(-1)], np.float64)
    if values.shape != (n,):
        raise UserInputError(f"reward {name!r}: expected {n} values (one per completion), got shape {values.shape}")
    return values


def combine_rewards(
    rewards: Sequence[Reward],
    completions: Sequence[str],
    examples: Sequence[dict],
    *,
    tokens: Any = None,
    mask: Any = None,
    batch: dict | None = None,
    allow_missing: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Evaluate and combine rewards for N completions.

    Args:
      rewards: the reward functions (at least one).
      completions: N decoded completion strings (host rewards).
      examples: N example dicts, row-aligned with completions (host rewards).
      tokens, mask, batch: [N, T] completion tokens, their mask and per-row arrays (jnp rewards).
      allow_missing: let a reward return None/NaN for some rows instead of raising: the row's total sums the values it
        has, and a row without any value becomes invalid (TRL's rule).
    Returns:
      (total [N] float32, valid [N] bool, per-reward values {name: [N] float64}).
    Raises:
      ValueError naming the reward and the first bad row on a NaN/inf/None value (unless allow_missing; infinities
      always raise).
    """
    if not rewards:
        raise UserInputError("rewards: expected at least one reward function, got none")
    n = len(completions)
    if len(examples) != n:
        raise UserInputError(f"examples: expected {n} (one per completion), got {len(examples)}")
    total = np.zeros(n, np.float64)
    scored = np.zeros(n, bool)
    parts = {}
    for r in rewards:
        if r.kind == "host":
            out = r.fn(list(completions), list(examples))
        elif r.kind == "jnp":
            out = np.asarray(r.fn(tokens, mask, batch or {}))
        else:
            raise UserInputError(f"reward {r.name!r}: kind must be 'host' or 'jnp', got {r.kind!r}")
        values = _as_values(r.name, out, n)
        if np.isinf(values).any():
            i = int(np.flatnonzero(np.isinf(values))[0])
            raise UserInputError(f"reward {r.name!r}: infinite value {values[i]} at row {i}")
        missing = np.isnan(values)
        if missing.any() and not allow_missing:
            i = int(np.flatnonzero(missing)[0])
            raise UserInputError(
                f"reward {r.name!r}: NaN/missing value at row {i} (completion {completions[i]!r}); "
                "rewards must be finite numbers (pass allow_missing=True to drop such rows from the advantage)"
            )
        scored |= ~missing
        total += r.weight * np.where(missing, 0.0, values)
        parts[r.name] = values
    return total.astype(np.float32), scored, parts


def exact_match_reward(answer_key: str = "answer", *, strip: bool = True) -> Reward:
    """Host reward 1.0 when the completion equals ``example[answer_key]`` (after whitespace strip), else 0.0."""

    def fn(completions: list[str], examples: list[dict]) -> list[float]:
        norm = (lambda s: s.strip().lower()) if strip else (lambda s: s)
        return [float(norm(c) == norm(str(e[answer_key]))) for c, e in zip(completions, examples)]

    return Reward(name=f"exact_match[{answer_key}]", fn=fn)


def exact_match_from_config(cfg) -> Reward:
    """Registry factory ``rewards.exact_match``: ``key`` (example field, default "answer_text"), ``weight``."""
    r = exact_match_reward(cfg.get("key", "answer_text"))
    return dataclasses.replace(r, weight=float(cfg.get("weight", 1.0)))
