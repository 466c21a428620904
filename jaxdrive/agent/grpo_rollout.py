"""Multi-turn GRPO rollouts with tool calls: the policy generates a turn, the host parses it, runs the tool (the same
``ToolRegistry`` and loop rules as ``jaxdrive.agent.loop``) and appends the observation tokens, then the policy
generates the next turn, for every row of the batch in lockstep. Observation and feedback tokens are context: they
are in the attention mask but not in the loss mask (``completion_mask``), so the GRPO loss covers only tokens the
policy generated. Each row's episode becomes a trajectory record scored by the tiered reward, as the loop's record of
the same replies is: a turn is read by the loop's rule (``loop.read_reply``: a finish ends the episode whatever its
answer, one without an option letter is scored malformed output), and an item carrying retrieved long-term memory
(``memory``, the prompt text, and ``retrieved``, its entry ids in the prompt's numbering) has the answer's
``memory_used`` numbers mapped to those ids (``cited_entries``).

The token language is a codec. ``TinyAgentCodec`` is the one for the tiny random Qwen-VL (no tokenizer): one token per
turn (a tool, or an option letter = finish), observations as a few value tokens.

Buffer layout (as ``grpo_trainer.Rollouts``): [prompt left-padded to ``prompt_len`` | completion ``completion_len``],
the completion holding the turns and observations back to back, padding at the end. Turn t is generated from the same
tokens left-padded to ``prompt_len + completion_len`` (one compile for every turn); positions come from the attention
mask, so they equal the teacher-forced buffer's.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.agent.loop import (MAX_TOOL_TURNS, answer_letter, cited_entries, parse_reply, read_reply,
                                 reasoning_text, system_prompt, user_prompt)
from jaxdrive.agent.mcq import KINDS, make_mcq_set
from jaxdrive.agent.tools import Observation, ToolContext, default_registry
from jaxdrive.data.synthetic import generate_scene
from jaxdrive.errors import UserInputError
from jaxdrive.models.generate import SamplingConfig
from jaxdrive.train import grpo
from jaxdrive.train.grpo_trainer import Rollouts, _generate, completion_stop_ids, left_pad, reward_metrics
from jaxdrive.train.rewards import combine_rewards


class TinyAgentCodec:
    """Token ids (vocabulary 48 of the tiny model; 0 pad, 1 eos) of the MCQ agent language."""

    QUESTION, OBS, ERROR = 40, 37, 38
    KIND = {k: 10 + i for i, k in enumerate(KINDS)}
    VALUE = {v: 15 + i for i, v in enumerate(["Yes", "No", "0", "1", "2", "3 or more", "LEFT", "RIGHT", "FORWARD",
                                               "below 2 m/s", "2 to 8 m/s", "8 to 15 m/s", "above 15 m/s"])}
    LETTER = {c: 28 + i for i, c in enumerate("ABCD")}
    TOOL = {32: ("get_leading_object_detection", {}), 33: ("get_front_object_detections", {}),
            34: ("get_ego_states", {}), 35: ("get_drivable_at_locations", {"locations": [[-3.5, 0.0]]}),
            36: ("get_surrounding_object_detections", {}), 41: ("teleport", {})}  # 41: an unknown tool
    turn_tokens = 1

    def prompt(self, item: dict) -> list[int]:
        ids = [self.QUESTION, self.KIND[item["kind"]]]
        for letter, text in item["options"].items():
            ids += [self.LETTER[letter], self.VALUE[text]]
        return ids

    def parse(self, tokens: list[int]):
        """("tool", name, args) | ("finish", reply) | ("malformed",) from one turn's generated tokens (as
        ``loop.read_reply``); a letter token is the finish ``{"final_answer": letter}``."""
        t = tokens[0] if tokens else -1
        if t in self.TOOL:
            return ("tool",) + self.TOOL[t]
        letters = {v: k for k, v in self.LETTER.items()}
        return ("finish", {"final_answer": letters[t]}) if t in letters else ("malformed",)

    def observation(self, obs: Observation) -> list[int]:
        if not obs.ok:
            return [self.ERROR]
        r, name = obs.result, obs.tool
        if name == "get_leading_object_detection":
            vals = ["Yes" if r is not None else "No"]
        elif name in ("get_front_object_detections", "get_surrounding_object_detections"):
            vals = [str(len(r)) if len(r) < 3 else "3 or more"]
        elif name == "get_ego_states":
            v = r["speed"]
            vals = [r["mission_goal"], "below 2 m/s" if v < 2 else "2 to 8 m/s" if v < 8 else "8 to 15 m/s" if v < 15
                    else "above 15 m/s"]
        else:
            vals = ["Yes" if r[0]["drivable"] else "No"]
        return [self.OBS] + [self.VALUE[v] for v in vals]

    def feedback(self) -> list[int]:
        return [self.ERROR]

    def words(self, ids, mask=None) -> str:
        names = {self.QUESTION: "Q", self.OBS: "obs", self.ERROR: "error", 0: "<pad>", 1: "<eos>"}
        names.update({v: k for k, v in self.KIND.items()})
        names.update({v: k for k, v in self.VALUE.items()})
        names.update({v: f"{k})" for k, v in self.LETTER.items()})
        names.update({k: v[0] for k, v in self.TOOL.items()})
        ids = np.asarray(ids).tolist()
        return " ".join(names.get(t, f"<{t}>") for i, t in enumerate(ids) if mask is None or mask[i])


class TextAgentCodec:
    """The loop's JSON protocol (``jaxdrive.agent.loop``) through a pretrained tokenizer with Qwen chat markup: the
    prompt is the system turn (tool specs) and the user turn (short-term memory, question) with the assistant header;
    a turn is generated up to ``<|im_end|>``; the observation closes the turn and opens the next assistant turn."""

    def __init__(self, tokenizer, turn_tokens: int = 256, registry=None):
        self.tok, self.turn_tokens = tokenizer, turn_tokens
        self.registry = registry or default_registry()

    def _ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def prompt(self, item: dict) -> list[int]:
        return self._ids(f"<|im_start|>system\n{system_prompt(self.registry)}<|im_end|>\n<|im_start|>user\n"
                         f"{user_prompt(item['question'], item.get('stm', ''), item.get('memory', ''))}<|im_end|>\n"
                         "<|im_start|>assistant\n")

    def parse(self, tokens: list[int]):
        """One turn's generated tokens read as the loop reads the reply (``loop.read_reply``)."""
        return read_reply(parse_reply(self.tok.decode(tokens, skip_special_tokens=True)))

    def _user(self, text: str) -> list[int]:
        return self._ids(f"\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")

    def observation(self, obs: Observation) -> list[int]:
        return self._user(f"Observation ({obs.tool}): {obs.text()}")

    def feedback(self) -> list[int]:
        return self._user("error: rejected reply (malformed, repeated call, or finish before a useful call)")

    def words(self, ids, mask=None) -> str:
        ids = np.asarray(ids)
        ids = ids[np.asarray(mask).astype(bool)] if mask is not None else ids
        return self.tok.decode(ids, skip_special_tokens=True)


def accuracy(trajs: list[dict]) -> float:
    """The fraction of episodes whose final answer's option letter (``loop.answer_letter``) is the gold letter."""
    return float(np.mean([answer_letter(t["final_answer"]) == t["gold"] for t in trajs]))


class MultiTurnRollouts(Rollouts):
    """GRPO ``batch_fn`` with multi-turn tool episodes. ``examples`` rows carry ``prompt`` ids and the MCQ ``item``
    (optionally with ``stm``, ``memory`` and ``retrieved``, as ``run_episode``'s arguments);
    ``cfg`` is the ``grpo`` block plus ``max_tool_turns`` (and ``turn_tokens`` for the text codec). The codec is the
    text one when a tokenizer is given (a pretrained model), else the tiny one."""

    def __init__(self, examples, rewards, decode, cfg, codec=None, registry=None, tokenizer=None):
        super().__init__(examples, rewards, decode, cfg)
        turn = cfg.get("turn_tokens", 256)
        self.codec = codec or (TextAgentCodec(tokenizer, turn) if tokenizer is not None else TinyAgentCodec())
        self.registry = registry or getattr(self.codec, "registry", None) or default_registry()
        self._ctx: dict[int, ToolContext] = {}

    def _context(self, item: dict) -> ToolContext:
        seed = item["scene_seed"]
        if seed not in self._ctx:
            self._ctx[seed] = ToolContext.from_scene(generate_scene(seed, num_proposals=1))
        return self._ctx[seed]

    def episodes(self, trainer, rows: list[dict], key: jax.Array | None):
        """Lockstep episodes: (completion ids [N, T], loss mask [N, T], attention mask [N, T], trajectories)."""
        cfg, codec = self.cfg, self.codec
        n, T = len(rows), cfg.completion_len
        max_tools = cfg.get("max_tool_turns", MAX_TOOL_TURNS)
        comp = [[] for _ in rows]
        gen = [[] for _ in rows]  # 1 = generated by the policy
        trajs = [{"id": r["item"]["id"], "gold": r["item"]["gold"], "steps": [], "final_answer": "", "reasoning": "",
                  "stm": r["item"].get("stm", ""), "memory": r["item"].get("memory", ""),
                  "retrieved": list(r["item"].get("retrieved", [])), "memory_used": [], "termination": "max_turns",
                  "counters": dict(turns=0, malformed=0, premature_finish=0, repeated=0, tool_calls=0, useful_calls=0)}
                 for r in rows]
        seen = [set() for _ in rows]
        done = np.zeros(n, bool)
        sampling = SamplingConfig(max_new_tokens=codec.turn_tokens, temperature=cfg.temperature, greedy=key is None,
                                  stop_token_ids=completion_stop_ids(cfg), pad_token_id=cfg.pad_id)
        for turn in range(max_tools + 1):
            if done.all():
                break
            ids, mask = left_pad([np.concatenate([r["prompt"], np.asarray(c, np.int32)]) for r, c in zip(rows, comp)],
                                 cfg.prompt_len + T, cfg.pad_id)
            inputs = trainer.shard_batch(trainer.model().prepare_inputs(ids, mask, bucket=1))
            k = None if key is None else jax.random.fold_in(key, turn)
            out = jax.device_get(_generate(trainer.graphdef, sampling, trainer.params, trainer.rest, inputs, k))
            toks, tmask = np.asarray(out.tokens), np.asarray(out.mask)
            for i in np.flatnonzero(~done):
                new = toks[i][tmask[i]].tolist()
                tr = trajs[i]
                c = tr["counters"]
                c["turns"] += 1
                action = codec.parse(new)
                extra: list[int] = []
                if action[0] == "finish" and c["useful_calls"] > 0:
                    reply = action[1]
                    tr["final_answer"] = reply["final_answer"]
                    tr["reasoning"] = reasoning_text(reply)  # a string, as the loop records it
                    tr["memory_used"] = cited_entries(reply.get("memory_used"), tr["retrieved"])
                    tr["termination"] = "finish"
                    done[i] = True
                elif action[0] == "tool" and turn < max_tools:
                    name, args = action[1], action[2]
                    keyc = name + json.dumps(args, sort_keys=True)
                    if keyc in seen[i]:
                        c["repeated"] += 1
                        extra = codec.feedback()
                    else:
                        seen[i].add(keyc)
                        obs = self.registry.call(self._context(rows[i]["item"]), name, args)
                        c["tool_calls"] += 1
                        c["useful_calls"] += int(obs.ok)
                        tr["steps"].append({"action": {"tool": name, "arguments": args}, "ok": obs.ok,
                                            "error": obs.error, "latency_ms": obs.latency_ms})
                        extra = codec.observation(obs)
                elif action[0] == "tool":  # a tool call in the answer turn: out of turns
                    done[i] = True
                else:
                    c["malformed" if action[0] == "malformed" else "premature_finish"] += 1
                    extra = codec.feedback()
                if turn == max_tools:  # nothing follows the answer turn: no feedback to append
                    extra = []
                if len(comp[i]) + len(new) + len(extra) > T:  # completion budget exhausted: stop here
                    new, extra, done[i] = new[: T - len(comp[i])], [], True
                comp[i] += new + extra
                gen[i] += [1] * len(new) + [0] * len(extra)
                if turn == max_tools:
                    done[i] = True
        tokens = np.full((n, T), cfg.pad_id, np.int32)
        loss_mask = np.zeros((n, T), np.float32)
        attn = np.zeros((n, T), np.int32)
        for i in range(n):
            tokens[i, : len(comp[i])] = comp[i]
            loss_mask[i, : len(gen[i])] = gen[i]
            attn[i, : len(comp[i])] = 1
        return tokens, loss_mask, attn, trajs

    def buffer_inputs(self, trainer, rows, tokens, attn):
        cfg = self.cfg
        ids, mask = left_pad([r["prompt"] for r in rows], cfg.prompt_len, cfg.pad_id)
        ids, mask = np.concatenate([ids, tokens], 1), np.concatenate([mask, attn], 1)
        return trainer.shard_batch(trainer.model().prepare_inputs(ids, mask, bucket=1))

    def _score(self, rows, tokens, loss_mask, trajs):
        texts = [self.decode(t, m) for t, m in zip(tokens, loss_mask)]
        exs = [dict(r, trajectory=t) for r, t in zip(rows, trajs)]
        return combine_rewards(self.rewards, texts, exs, tokens=tokens, mask=loss_mask,
                               allow_missing=self.cfg.get("allow_missing_rewards", False))

    def __call__(self, trainer, step: int, key: jax.Array):
        cfg, G = self.cfg, self.cfg.group_size
        prompts = [self.examples[i] for i in self.sampler.indices(step - 1)]
        rows = [p for p in prompts for _ in range(G)]
        tokens, loss_mask, attn, trajs = self.episodes(trainer, rows, key)
        total, valid, parts = self._score(rows, tokens, loss_mask, trajs)
        adv = grpo.group_advantages(jnp.asarray(total), G, valid=jnp.asarray(valid), **self.adv_kwargs)
        inputs = self.buffer_inputs(trainer, rows, tokens, attn)
        batch = {"inputs": inputs, "completion_mask": loss_mask, "advantages": adv}
        if cfg.policy_epochs > 1:
            batch["old_logp"] = self._completion_logp(trainer, inputs)
        if cfg.beta != 0.0:
            batch["ref_logp"] = self._completion_logp(trainer, inputs, reference=True)
        metrics = {**reward_metrics(total, valid, G),
                   "accuracy": accuracy(trajs),
                   "tool_calls": float(np.mean([t["counters"]["tool_calls"] for t in trajs])),
                   "finished": float(np.mean([t["termination"] == "finish" for t in trajs])),
                   "generated_tokens": float(loss_mask.sum(1).mean()), "context_tokens": float(attn.sum(1).mean())}
        metrics.update({f"reward/{k}": float(np.nanmean(v)) for k, v in parts.items()})
        return batch, metrics

    def evaluate(self, trainer, examples: list[dict]) -> dict:
        """Mean reward and accuracy of greedy episodes on ``examples``; with ``allow_missing_rewards`` the mean is
        over the rows some reward scored, as in training (NaN if none)."""
        tokens, loss_mask, _, trajs = self.episodes(trainer, examples, None)
        total, valid, _ = self._score(examples, tokens, loss_mask, trajs)
        return {"reward_mean": reward_metrics(total, valid, 1)["reward_mean"],
                "accuracy": accuracy(trajs)}


def tiny_mcq_dataset(cfg, tokenizer=None) -> list[dict]:
    """Registry ``data.kind = "agent_tiny_mcq"``: the synthetic MCQ set (``num_scenes`` scenes from ``seed``, every
    question kind) in the tiny agent token language."""
    del tokenizer
    codec = TinyAgentCodec()
    items = make_mcq_set(cfg.num_scenes, cfg.seed)
    return [{"prompt": np.asarray(codec.prompt(it), np.int32), "item": it, "gold": it["gold"],
             "answer": np.asarray([codec.LETTER[it["gold"]], 1], np.int32), "answer_text": it["gold"]} for it in items]


def mcq_dataset(cfg, tokenizer) -> list[dict]:
    """Registry ``data.kind = "agent_mcq"``: the synthetic MCQ set with its short-term memory in the prompt, tokenized
    by the pretrained model's tokenizer (the loop's JSON protocol, ``TextAgentCodec``)."""
    from jaxdrive.agent import stm

    if tokenizer is None:
        raise UserInputError("data.kind='agent_mcq' needs a pretrained model directory with a tokenizer (model.path)")
    codec = TextAgentCodec(tokenizer)
    out = []
    for it in make_mcq_set(cfg.num_scenes, cfg.seed):
        ctx = ToolContext.from_scene(generate_scene(it["scene_seed"], num_proposals=1))
        it = dict(it, stm=stm.build(ctx).serialise())
        out.append({"prompt": np.asarray(codec.prompt(it), np.int32), "item": it, "gold": it["gold"],
                    "answer_text": it["gold"]})
    return out


def tiny_words_decoder(cfg=None, tokenizer=None):
    """Registry ``decoder.kind = "agent_tiny"``: the tiny agent language as words."""
    del cfg, tokenizer
    return TinyAgentCodec().words
