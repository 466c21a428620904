"""OpenREAD's GRPO rewards (Sec. 3.3): LLM critic, semantic similarity, their 0.9 / 0.1 knowledge mix, the trajectory
reward of Eq. 7, the ``<think>/<answer>`` format reward, and the task-routed total R = R_know + R_traj + R_format.

Every reward is a host ``rewards.Reward`` over decoded completions and their examples; malformed completions
(missing tags, an answer that is not 6 parsable points, an empty answer) score 0, never raise. Examples carry:

  * ``task``: "knowledge" | "planning" | "counterfactual" (rows without one get every reward);
  * ``question``, ``reference`` (the reference answer text, without tags) for the knowledge rewards;
  * ``trajectory`` [6, 2] (the GT points in the text frame, see ``eval.trajectory_text``) for planning.

Routing: the knowledge rewards apply to "knowledge" and "counterfactual" rows, the trajectory reward to "planning"
rows, the format reward to all; elsewhere a reward is 0, so listing the three in a config sums to Eq. 8 while the
trainer logs each part.

Trajectory reward (Eq. 7 as printed): with d_k the mean L2 over the waypoints of second k (steps 2k-2, 2k-1; or
``averaging="cumulative"``: steps 0..2k-1), ``r = 5^(-d1 T1) + e^(-d2 T2) + e^(-d3 T3)``, T = (0.7, 0.7, 0.3); the bases
are configurable (``bases=(e, e, e)`` reads the first term as the exponential of the other two). OpenREAD's released
reward (``OmniReward`` in its ``examples/train/grpo/plugin/plugin.py``) also zeroes the term of a second whose d_k is
above 3, 5, 7 m and divides the sum by 3: ``cutoffs=OFFICIAL_CUTOFFS, scale=OFFICIAL_SCALE`` (r in [0, 1]).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxdrive.errors import UserInputError
from jaxdrive.eval.cot_format import extract_answer, is_well_formed
from jaxdrive.eval.trajectory_text import NUM_POINTS, parse_trajectory
from jaxdrive.train.rewards import Reward

KNOWLEDGE, PLANNING, COUNTERFACTUAL = "knowledge", "planning", "counterfactual"
TASKS = (KNOWLEDGE, PLANNING, COUNTERFACTUAL)
KNOWLEDGE_TASKS = (KNOWLEDGE, COUNTERFACTUAL)
PLANNING_TASKS = (PLANNING,)

DEFAULT_BASES = (5.0, math.e, math.e)  # Eq. 7 as printed
DEFAULT_TEMPERATURES = (0.7, 0.7, 0.3)
OFFICIAL_CUTOFFS = (3.0, 5.0, 7.0)  # m, per second: a term is 0 above it (OpenREAD's released reward)
OFFICIAL_SCALE = 1.0 / 3.0  # OpenREAD's released reward divides the three terms' sum by 3
AVERAGING = ("second", "cumulative")


# ------------------------------------------------------------------ trajectory (jnp kernel, one example, vmapped)

def per_second_l2(pred: Float[Array, "6 2"], gt: Float[Array, "6 2"], averaging: str = "second") -> Float[Array, "3"]:
    """Mean L2 (m) per second of a 6-point, 2 Hz trajectory: over the two waypoints of that second ("second") or over
    all waypoints up to it ("cumulative")."""
    d = jnp.sqrt(jnp.sum(jnp.square(pred - gt), -1))  # [6]
    if averaging == "second":
        return d.reshape(3, 2).mean(-1)
    if averaging == "cumulative":
        return jnp.cumsum(d)[1::2] / jnp.arange(2, 7, 2)
    raise UserInputError(f"averaging: expected one of {AVERAGING}, got {averaging!r}")


def trajectory_reward_value(pred: Float[Array, "6 2"], gt: Float[Array, "6 2"], bases: Float[Array, "3"],
                            temperatures: Float[Array, "3"], cutoffs: Float[Array, "3"],
                            averaging: str = "second") -> Float[Array, ""]:
    """Eq. 7: ``sum_k bases[k] ** (-d_k * temperatures[k]) * (d_k <= cutoffs[k])`` (3 when the prediction is exact;
    cutoffs in m, inf for none)."""
    d = per_second_l2(pred, gt, averaging)
    return jnp.sum(jnp.exp(-d * temperatures * jnp.log(bases)) * (d <= cutoffs))


_batched_trajectory_reward = jax.jit(jax.vmap(trajectory_reward_value, in_axes=(0, 0, None, None, None, None)),
                                     static_argnums=5)


def _check_trajectory_args(bases, temperatures, cutoffs, averaging: str) -> None:
    if len(bases) != 3 or len(temperatures) != 3 or min(bases) <= 0 or min(temperatures) < 0:
        raise UserInputError(f"trajectory reward: expected 3 positive bases and 3 non-negative temperatures, got {bases}, "
                         f"{temperatures}")
    if cutoffs is not None and (len(cutoffs) != 3 or min(cutoffs) < 0):
        raise UserInputError(f"trajectory reward: cutoffs: expected 3 non-negative distances (m) or None, got {cutoffs}")
    if averaging not in AVERAGING:
        raise UserInputError(f"averaging: expected one of {AVERAGING}, got {averaging!r}")


def trajectory_rewards(preds: np.ndarray, gts: np.ndarray, bases=DEFAULT_BASES, temperatures=DEFAULT_TEMPERATURES,
                       averaging: str = "second", cutoffs=None, scale: float = 1.0) -> np.ndarray:
    """[N] Eq. 7 rewards of parsed predictions [N, 6, 2] against GT [N, 6, 2] (same frame; L2 is frame-invariant),
    each term 0 where its d_k > ``cutoffs[k]`` (m; None: never), the sum times ``scale``."""
    _check_trajectory_args(bases, temperatures, cutoffs, averaging)
    preds, gts = np.asarray(preds, np.float32), np.asarray(gts, np.float32)
    if len(preds) == 0:
        return np.zeros(0, np.float64)
    cut = jnp.full(3, jnp.inf, jnp.float32) if cutoffs is None else jnp.asarray(cutoffs, jnp.float32)
    out = _batched_trajectory_reward(jnp.asarray(preds), jnp.asarray(gts), jnp.asarray(bases, jnp.float32),
                                     jnp.asarray(temperatures, jnp.float32), cut, averaging)
    return np.asarray(out, np.float64) * float(scale)


# ------------------------------------------------------------------ routing

def _applies(example: dict, tasks: Sequence[str] | None) -> bool:
    return tasks is None or example.get("task") is None or example["task"] in tasks


def routed(fn: Callable[[list[str], list[dict]], Sequence[float]], tasks: Sequence[str] | None):
    """``fn`` evaluated only on rows whose task is in ``tasks`` (others 0); rows without a task always count."""

    def call(completions: list[str], examples: list[dict]) -> list[float]:
        idx = [i for i, e in enumerate(examples) if _applies(e, tasks)]
        out = [0.0] * len(completions)
        if idx:
            for i, v in zip(idx, fn([completions[i] for i in idx], [examples[i] for i in idx])):
                out[i] = float(v)
        return out

    return call


# ------------------------------------------------------------------ the rewards

def trajectory_reward(bases=DEFAULT_BASES, temperatures=DEFAULT_TEMPERATURES, averaging: str = "second",
                      key: str = "trajectory", tasks: Sequence[str] | None = PLANNING_TASKS, cutoffs=None,
                      scale: float = 1.0) -> Reward:
    """R_traj: Eq. 7 on the 6 points of the ``<answer>`` span (``cutoffs``, ``scale``: see ``trajectory_rewards``);
    0 without an answer span or with unparsable points."""
    _check_trajectory_args(bases, temperatures, cutoffs, averaging)

    def fn(completions, examples):
        parsed = [parse_trajectory(a) if (a := extract_answer(c)) else None for c in completions]
        ok = [i for i, p in enumerate(parsed) if p is not None]
        out = np.zeros(len(completions))
        if ok:
            gts = np.stack([np.asarray(examples[i][key], np.float64).reshape(NUM_POINTS, 2) for i in ok])
            out[ok] = trajectory_rewards(np.stack([parsed[i] for i in ok]), gts, bases, temperatures, averaging,
                                         cutoffs, scale)
        return out.tolist()

    return Reward(name="traj", fn=routed(fn, tasks))


def format_reward(tasks: Sequence[str] | None = None) -> Reward:
    """R_format: 1 when the completion is one ``<think>`` block then one ``<answer>`` block, else 0."""
    return Reward(name="format", fn=routed(lambda cs, _: [float(is_well_formed(c)) for c in cs], tasks))


def _answers(completions: list[str]) -> tuple[list[int], list[str]]:
    """Rows with a non-empty answer span and those answers."""
    idx, texts = [], []
    for i, c in enumerate(completions):
        a = extract_answer(c)
        if a:
            idx.append(i)
            texts.append(a)
    return idx, texts


def semantic_scores(similarity, completions: list[str], examples: list[dict], key: str = "reference") -> np.ndarray:
    """[N] cosine of each answer span and its reference, clipped to [0, 1]; 0 without an answer."""
    idx, texts = _answers(completions)
    out = np.zeros(len(completions))
    if idx:
        out[idx] = np.clip(similarity.cosine(texts, [str(examples[i][key]) for i in idx]), 0.0, 1.0)
    return out


def critic_scores(critic, completions: list[str], examples: list[dict], threshold: float | None = 0.5,
                  key: str = "reference") -> np.ndarray:
    """[N] Eq. 5: 1 when the critic's p(match) > ``threshold`` (None: p itself); 0 without an answer."""
    idx, texts = _answers(completions)
    out = np.zeros(len(completions))
    if idx:
        p = critic.probabilities([str(examples[i].get("question", "")) for i in idx],
                                 [str(examples[i][key]) for i in idx], texts)
        out[idx] = p if threshold is None else (p > threshold).astype(np.float64)
    return out


def semantic_reward(similarity, tasks: Sequence[str] | None = KNOWLEDGE_TASKS) -> Reward:
    """R_semantic: MiniLM cosine of answer and reference in [0, 1]."""
    return Reward(name="semantic", fn=routed(lambda cs, es: semantic_scores(similarity, cs, es).tolist(), tasks))


def critic_reward(critic, threshold: float = 0.5, tasks: Sequence[str] | None = KNOWLEDGE_TASKS) -> Reward:
    """R_qwen3: the thresholded critic probability."""
    return Reward(name="critic", fn=routed(lambda cs, es: critic_scores(critic, cs, es, threshold).tolist(), tasks))


def knowledge_reward(critic, similarity, w_critic: float = 0.9, w_semantic: float = 0.1, threshold: float = 0.5,
                     tasks: Sequence[str] | None = KNOWLEDGE_TASKS) -> Reward:
    """R_know = w_q R_qwen3 + w_s R_semantic (Eq. 6; 0.9 / 0.1); a zero weight skips (and needs no) that scorer."""

    def fn(completions, examples):
        r = np.zeros(len(completions))
        if w_critic:
            r += w_critic * critic_scores(critic, completions, examples, threshold)
        if w_semantic:
            r += w_semantic * semantic_scores(similarity, completions, examples)
        return r.tolist()

    return Reward(name="know", fn=routed(fn, tasks))


def total_reward(know: Reward, traj: Reward, fmt: Reward) -> Reward:
    """R = R_know + R_traj + R_format (Eq. 8) as one reward (each part already routed by task)."""

    def fn(completions, examples):
        return [sum(v) for v in zip(*(np.asarray(r.fn(completions, examples), np.float64) * r.weight
                                      for r in (know, traj, fmt)))]

    return Reward(name="total", fn=fn)


# ------------------------------------------------------------------ registry factories (``registry.REWARDS``)

def _weighted(r: Reward, cfg) -> Reward:
    return dataclasses.replace(r, weight=float(cfg.get("weight", 1.0)))


def _tasks(cfg, default):
    t = cfg.get("tasks", default) if cfg is not None else default
    return None if t is None else tuple(t)


def _trajectory(cfg) -> Reward:
    cutoffs = cfg.get("cutoffs")
    return trajectory_reward(tuple(cfg.get("bases", DEFAULT_BASES)), tuple(cfg.get("temperatures", DEFAULT_TEMPERATURES)),
                             cfg.get("averaging", "second"), cfg.get("key", "trajectory"), _tasks(cfg, PLANNING_TASKS),
                             None if cutoffs is None else tuple(cutoffs), float(cfg.get("scale", 1.0)))


def _similarity(cfg):
    from jaxdrive.eval.semantic import SentenceSimilarity, load_encoder

    path = cfg.get("semantic_model", "") if cfg is not None else ""
    return SentenceSimilarity(load_encoder(path or None))


def _critic(cfg):
    """``critic.kind``: "pretrained" (``critic.path``, a local Qwen3 directory) or "tiny" (a random tiny Qwen3 with
    the test tokenizer, for smoke runs: plumbing only, its judgements are noise)."""
    from jaxdrive.eval.critic import QwenCritic

    c = cfg.critic
    kw = dict(batch_size=c.get("batch_size", 16), length_bucket=c.get("length_bucket", 64),
              max_len=c.get("max_len", 1024))
    if c.get("kind", "pretrained") == "tiny":
        from jaxdrive.train.openread_tiny import tiny_critic

        return tiny_critic(c.get("seed", 0), **kw)
    if not c.get("path"):
        raise UserInputError("rewards.<critic>.critic.path: a local Qwen3 directory is required (or critic.kind='tiny')")
    return QwenCritic.from_pretrained(c.path, dtype=getattr(jnp, c.get("dtype", "bfloat16")), **kw)


def trajectory_from_config(cfg) -> Reward:
    """``rewards.openread_trajectory``: ``bases`` (default 5, e, e), ``temperatures`` (0.7, 0.7, 0.3), ``averaging``
    ("second" | "cumulative"), ``cutoffs`` (default none; OpenREAD's code: [3, 5, 7]), ``scale`` (1; its code: 1/3),
    ``key``, ``tasks``, ``weight``."""
    return _weighted(_trajectory(cfg), cfg)


def format_from_config(cfg) -> Reward:
    """``rewards.openread_format``: ``tasks`` (default all), ``weight``."""
    return _weighted(format_reward(_tasks(cfg, None)), cfg)


def semantic_from_config(cfg) -> Reward:
    """``rewards.openread_semantic``: ``semantic_model`` (default: bundled all-MiniLM-L6-v2), ``tasks``, ``weight``."""
    return _weighted(semantic_reward(_similarity(cfg), _tasks(cfg, KNOWLEDGE_TASKS)), cfg)


def critic_from_config(cfg) -> Reward:
    """``rewards.openread_critic``: ``critic`` block (kind, path, dtype, batch_size, ...), ``threshold``, ``tasks``."""
    return _weighted(critic_reward(_critic(cfg), cfg.get("threshold", 0.5), _tasks(cfg, KNOWLEDGE_TASKS)), cfg)


def knowledge_from_config(cfg) -> Reward:
    """``rewards.openread_knowledge``: ``critic`` block, ``semantic_model``, ``w_critic`` (0.9), ``w_semantic`` (0.1),
    ``threshold`` (0.5), ``tasks``, ``weight``."""
    w_critic, w_semantic = float(cfg.get("w_critic", 0.9)), float(cfg.get("w_semantic", 0.1))
    critic = _critic(cfg) if w_critic else None
    similarity = _similarity(cfg) if w_semantic else None
    return _weighted(knowledge_reward(critic, similarity, w_critic, w_semantic, cfg.get("threshold", 0.5),
                                      _tasks(cfg, KNOWLEDGE_TASKS)), cfg)


def total_from_config(cfg) -> Reward:
    """``rewards.openread_total``: one reward R = R_know + R_traj + R_format from the sub-blocks ``knowledge``,
    ``trajectory``, ``format`` (each as its own factory reads it)."""
    return _weighted(total_reward(knowledge_from_config(cfg.knowledge), trajectory_from_config(cfg.trajectory),
                                  format_from_config(cfg.format)), cfg)
