"""Stepwise conversion of verified trajectories into two-phase SFT records (paper Sec. 3.4, appendix B.2).

Every accepted policy turn of a trajectory (a tool call that was executed, or the final answer) becomes one
next-step record: the conversation before it as context, the turn itself as the only supervised target ("loss scope:
last round", Table 7). Observations returned by the executor are context, never targets.

* phase 1 (tool-decision records): tool-call turns only; the target is the action JSON alone (tool-call tokens); tool
  observations are removed from the context, except the candidate detections an instance-selection action needs
  (the observation of ``detect_objects_2d_open_vocab`` right before ``select_referred_instance``).
* phase 2 (observation-grounded reasoning): tool turns and the answer turn, full replies (belief update, think,
  action / reasoning and final answer) as targets, observations kept in the context.

A record is ``{"id", "phase", "segments": [{"role", "kind", "text", "train"}]}``; ``to_arrays`` tokenizes it with
Qwen chat markup into ids and a loss mask (1 on the target's content and ``<|im_end|>``, 0 elsewhere).
"""
from __future__ import annotations

import json
from typing import Callable, Sequence

import numpy as np

from jaxdrive.agent.consolidate import verify
from jaxdrive.agent.loop import parse_reply
from jaxdrive.errors import UserInputError


def _accepted(messages: list[dict]) -> list[int]:
    """Indices of assistant turns the executor accepted: followed by an observation, or the final answer."""
    out = []
    for j, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        nxt = messages[j + 1] if j + 1 < len(messages) else None
        if m["kind"] == "answer" and nxt is None:
            out.append(j)
        elif nxt is not None and nxt["kind"] == "observation":
            out.append(j)
    return out


def _seg(m: dict, train: bool, text: str | None = None) -> dict:
    return {"role": m["role"], "kind": m["kind"], "text": m["content"] if text is None else text, "train": train}


def stepwise_records(traj: dict, phase: int) -> list[dict]:
    """The phase-1 or phase-2 records of one trajectory (see the module docstring)."""
    if phase not in (1, 2):
        raise UserInputError(f"phase: expected 1 or 2, got {phase}")
    msgs = traj["messages"]
    records = []
    for j in _accepted(msgs):
        target = msgs[j]
        if phase == 1 and target["kind"] != "action":
            continue
        ctx = []
        for k, m in enumerate(msgs[:j]):
            if m["kind"] == "feedback" or (m["role"] == "assistant" and k not in _accepted(msgs)):
                continue  # rejected turns and their error feedback are not teacher behaviour
            if phase == 1 and m["kind"] == "observation":
                action = parse_reply(target["content"])["action"]
                keep = action["tool"] == "select_referred_instance" and \
                    m["content"].startswith("Observation (detect_objects_2d_open_vocab)") and k == j - 1
                if not keep:
                    continue
            if phase == 1 and m["role"] == "assistant":
                ctx.append(_seg(m, False, json.dumps({"action": parse_reply(m["content"])["action"]})))
                continue
            ctx.append(_seg(m, False))
        text = json.dumps({"action": parse_reply(target["content"])["action"]}) if phase == 1 else None
        records.append({"id": f"{traj['id']}#p{phase}s{len(records)}", "phase": phase,
                        "segments": ctx + [_seg(target, True, text)]})
    return records


MESSAGE_KINDS = ("prompt", "action", "observation", "feedback", "answer")


def check_sft_fields(traj: dict, where: str) -> None:
    """What conversion reads has the loop's types: the fields ``verify`` reads (``consolidate.check_verified_fields``),
    ``messages`` a list of {role: str, content: str, kind: one of ``MESSAGE_KINDS``}, and every executed tool turn (an
    ``action`` turn followed by an observation) holding a JSON action object; a ``SourceError`` naming ``where`` and
    the field otherwise (a hand-edited or truncated trajectory crashed the converter with a bare TypeError)."""
    from jaxdrive.agent.consolidate import check_verified_fields
    from jaxdrive.datasets.base import SourceError, require

    check_verified_fields(traj, where)
    msgs = traj.get("messages")
    if not isinstance(msgs, list):
        raise SourceError(f"{where}: field 'messages': expected a list of message objects, got {type(msgs).__name__}")
    for j, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise SourceError(f"{where}: field 'messages[{j}]': expected an object, got {type(m).__name__}")
        require(m, f"{where}: messages[{j}]", {"role": str, "content": str, "kind": str})
        if m["kind"] not in MESSAGE_KINDS:
            raise SourceError(f"{where}: field 'messages[{j}].kind': expected one of {MESSAGE_KINDS}, "
                              f"got {m['kind']!r}")
    for j in _accepted(msgs):
        if msgs[j]["kind"] == "action" and not isinstance((parse_reply(msgs[j]["content"]) or {}).get("action"), dict):
            raise SourceError(f"{where}: field 'messages[{j}].content': an executed tool turn without a JSON action "
                              "object")


def convert(trajectories: Sequence[dict], phase: int, only_verified: bool = True) -> list[dict]:
    """Records of every (verified) trajectory."""
    return [r for t in trajectories if verify(t) or not only_verified for r in stepwise_records(t, phase)]


def to_arrays(record: dict, encode: Callable[[str], list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(ids [S] int32, loss mask [S] int32) of ``record`` in Qwen chat markup ``<|im_start|>role\\n ... <|im_end|>\\n``;
    the mask covers the content and ``<|im_end|>`` of training segments only."""
    ids, mask = [], []
    for s in record["segments"]:
        for piece, train in ((f"<|im_start|>{s['role']}\n", False), (s["text"] + "<|im_end|>", s["train"]),
                             ("\n", False)):
            t = list(encode(piece))
            ids += t
            mask += [int(train)] * len(t)
    return np.asarray(ids, np.int32), np.asarray(mask, np.int32)


def read_records(path) -> list[dict]:
    """The records of a JSONL file written by ``jaxdrive agent convert``, checked: ``segments`` a non-empty list of
    {role: str, text: str, train: bool} with at least one training segment; ``ValueError`` naming FILE:LINE and the
    field otherwise (a record without a training segment has no answer to learn)."""
    from pathlib import Path

    from jaxdrive.datasets.base import SourceError, read_jsonl_file, require

    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"data.path: no such file {path} (records JSONL from `jaxdrive agent convert`)")
    out = []
    for where, r in read_jsonl_file(path):
        require(r, where, {"segments": list})
        for i, seg in enumerate(r["segments"]):
            if not isinstance(seg, dict):
                raise SourceError(f"{where}: field 'segments[{i}]': expected an object, got {type(seg).__name__}")
            require(seg, f"{where}: segments[{i}]", {"role": str, "text": str, "train": bool})
        if not any(seg["train"] for seg in r["segments"]):
            raise SourceError(f"{where}: field 'segments': no segment has train=true (nothing to learn)")
        out.append(r)
    if not out:
        raise SourceError(f"{path}: no records")
    return out


def records_dataset(cfg, tokenizer) -> list[dict]:
    """Registry ``data.kind = "agent_sft_records"``: SFT examples from a records JSONL (``cfg.path``, written by
    ``jaxdrive agent convert``) with the pretrained model's tokenizer: ``prompt`` = the context tokens, ``answer`` =
    the supervised target (its content and ``<|im_end|>``); observations are in the prompt, so never in the loss."""
    if tokenizer is None:
        raise UserInputError("data.kind='agent_sft_records' needs a pretrained model directory with a tokenizer "
                         "(model.kind='pretrained', model.path)")
    out = []
    for r in read_records(cfg.path):
        ids, mask = to_arrays(r, lambda s: tokenizer.encode(s, add_special_tokens=False))
        on = np.flatnonzero(mask)
        out.append({"prompt": ids[: on[0]], "answer": ids[on[0]: on[-1] + 1], "answer_text": r["segments"][-1]["text"]})
    return out
