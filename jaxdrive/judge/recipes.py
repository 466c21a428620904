"""DriveJudge training recipes for ``jaxdrive train``, registered in ``jaxdrive.train.registry``:

* dataset ``judge_gates`` (SFT): one example per record, the judge conversation of ``judge.prompt`` with the Eq.
  10-11 gate labels as the answer block (``prompt`` / ``answer`` ids, ``pixel_values``, ``image_grid_thw``);
* dataset ``judge_direct`` (SFT of the VLM direct-score baseline): the human label at one ``Reasonable: yes|no``
  answer token (``direct_examples``);
* dataset ``judge_pairs`` (GRPO): one example per DriveCritic pair, both trajectories' conversations with the all-yes
  answer block (``judge.grpo`` reads the gate logits at the rule slots), their sub-scores and the preference;
* reward ``judge_preference``: Eq. 12, 1 if the gated scores of the sampled gates rank the pair as the human did
  (a tie is wrong), else 0; ``judge_margin``: the preferred trajectory's sampled gated score minus the other's;
* decoder ``judge_answer``: completion ids -> the answer block text (the tokenizer's, specials dropped);
* export ``judge_gates`` / ``judge_pairs`` / ``judge_direct``: ``policy.JUDGE_META`` beside the exported weights, the
  image size and prompt form the judge was trained on (``export_files``), which its readers default to.

Data config fields: ``path`` (dataset directory), ``split``, ``model_path`` (the pretrained model directory: chat
template, merge size and image processor), ``describe`` (text scene description ablation; None: as the model was
trained, ``training_settings``), ``reason`` (prepend the record's justification as ``Reason:`` in SFT targets),
``target`` (SFT: ``answer`` or ``slots``, see ``gate_examples``), ``limit`` (first N, 0 = all), ``balance`` (SFT:
oversample the records with a rule gated off, ``balance_records``).
"""
from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.judge import prompt as P
from jaxdrive.judge.baselines import subscores_of
from jaxdrive.judge.dataset import check_pair_records, dataset_image_size, dataset_thresholds, item_name, \
    read_image, read_pairs, read_records, read_scenes, record_images
from jaxdrive.judge.gates import RULE_LABELS, rule_gated_score
from jaxdrive.judge.labels import rule_values
from jaxdrive.judge.policy import ALL_YES, JUDGE_META, TrainedAs, answer_slots, check_slot_tokens, encode, \
    load_image_config, slot_positions, trained_settings
from jaxdrive.models.chat import ChatEncoder
from jaxdrive.train.rewards import Reward

from jaxdrive.rules.epdms import METRICS as _METRICS  # noqa: E402  (gate order)


def _model_path(cfg) -> str:
    """The data block's ``model_path``, which the judge recipes need."""
    if not cfg.get("model_path"):
        raise UserInputError("data.model_path: the judge recipes need the pretrained model directory (chat template, "
                         "image processor); set data.model_path = model.path")
    return cfg.model_path


def encoder_for(cfg, tokenizer) -> ChatEncoder:
    """The chat encoder of the data block's ``model_path`` (with the job's tokenizer when given)."""
    path = _model_path(cfg)
    return ChatEncoder.from_pretrained(path) if tokenizer is None else ChatEncoder(
        tokenizer, ChatEncoder.from_pretrained(path).merge_size)


def training_settings(cfg) -> TrainedAs:
    """How the data block ``cfg`` trains the model ``cfg.model_path`` (and what its export records): the side of the
    set's BEV images (meta.json ``image_size``), ``describe`` and, with it, the set's rule-check thresholds, each
    checked against the model's record of its own training (``policy.trained_settings``; a ValueError naming the
    field, its value and the record): a judge goes on (GRPO from SFT) with the inputs it learnt on. ``describe`` None
    (unset) is the record's, off for a model without one (a base model)."""
    root = Path(cfg.path)
    size = dataset_image_size(root)
    size, describe, thresholds = trained_settings(
        _model_path(cfg), image_size=size, describe=cfg.get("describe"), thresholds=dataset_thresholds(root),
        given={"image_size": f"data.path {root} (meta.json image_size {size})",
               "describe": f"data.describe={cfg.get('describe')}",
               "thresholds": f"data.path {root} (meta.json thresholds)"})
    return TrainedAs(size, describe, tuple(thresholds.tolist()) if describe else None)


def _limit(items: list, cfg) -> list:
    n = int(cfg.get("limit", 0) or 0)
    return items[:n] if n else items


def balance_records(records: list) -> list:
    """``data.balance``: the records whose gate vector has a rule off (reasonable driving that breaks a rule, the
    records a judge must tell from the all-yes majority) repeated round(n_all_yes / n_off) times (at least once),
    so both kinds weigh about the same in an epoch; order kept (the trainer's sampler shuffles)."""
    off = [not all(r.gates[g] for g in RULE_LABELS) for r in records]
    k = max(1, round((len(records) - sum(off)) / sum(off))) if any(off) else 1
    return [x for r, o in zip(records, off) for x in [r] * (k if o else 1)]


def _pair_records(root: Path, pairs) -> list[tuple]:
    """Per pair, its (a, b) records, checked (``check_pair_records``): a pair trains on both, so both are needed."""
    records = read_records(root)
    check_pair_records(root, pairs, records)
    by_id = {r.id: r for r in records}
    for p in pairs:
        if not (p.a_record and p.b_record):
            raise UserInputError(f"{item_name(root, p)}: fields 'a_record' / 'b_record': judge_pairs "
                             f"trains on both trajectories' records, got {p.a_record!r} / {p.b_record!r}")
    return [(by_id[p.a_record], by_id[p.b_record]) for p in pairs]


def _broken(settings: TrainedAs, records) -> list:
    """Per record, the rules its trajectory breaks (named in the text description), or None without ``describe``."""
    if not settings.describe:
        return [None] * len(records)
    values = np.asarray(rule_values(subscores_of(records)))
    return [P.broken_rules(v, np.asarray(settings.thresholds, np.float32)) for v in values]


def gate_examples(cfg, tokenizer=None) -> list[dict]:
    """``data.kind = "judge_gates"``: SFT examples (module docstring); ``gates`` [7] and ``label`` ride along.
    ``data.balance``: oversample the records with a rule off (``balance_records``).

    ``data.target``: ``"answer"`` (default) trains the whole answer block with the record's gates (and its
    justification as ``Reason:`` with ``data.reason``); ``"slots"`` trains exactly what the policy reads: the input
    is the all-yes answer block, the loss covers only the seven rule answer tokens, whose targets are the record's
    gates (``yes`` / ``no`` token), so each slot learns p_r under the same context it is read in."""
    root = Path(cfg.path)
    records = _limit(read_records(root, cfg.get("split", "train")), cfg)
    if not records:
        raise UserInputError(f"data.path {root}: no records in split {cfg.get('split', 'train')!r}")
    if cfg.get("balance", False):
        records = balance_records(records)
    target = cfg.get("target", "answer")
    if target not in ("answer", "slots"):
        raise UserInputError(f"data.target: expected 'answer' or 'slots', got {target!r}")
    if target == "slots" and cfg.get("reason", False):
        raise UserInputError("data.reason: the 'slots' target trains the all-yes answer block only (no Reason: line)")
    settings = training_settings(cfg)
    scenes, images = read_scenes(root, records), record_images(root, records)
    encoder, image_cfg = encoder_for(cfg, tokenizer), load_image_config(cfg.model_path)
    slots = answer_slots(encoder) if target == "slots" else None
    out = []
    for r, broken in zip(records, _broken(settings, records)):
        gates = [bool(r.gates[k]) for k in RULE_LABELS]
        answer = (P.answer_text(ALL_YES) if target == "slots" else
                  P.answer_text(gates, r.justification if cfg.get("reason", False) else ""))
        conv = P.messages(scenes[r.scene], r.proposal, describe=settings.describe, answer=answer, broken=broken)
        enc = encode(encoder, [conv], [read_image(images[r.id], item_name(root, r))], image_cfg, pad_to_multiple_of=1)
        n = int(enc.attention_mask[0].sum())
        start = int(enc.answer_start[0])
        ex = {"prompt": enc.input_ids[0, :start], "answer": enc.input_ids[0, start:n],
              "pixel_values": enc.pixel_values, "image_grid_thw": enc.image_grid_thw,
              "gates": np.asarray(gates), "label": r.label, "id": r.id}
        if slots is not None:
            offsets = np.asarray(slots.offsets)
            check_slot_tokens(ex["answer"][None, np.minimum(offsets, len(ex["answer"]) - 1)], slots.yes_id)
            ex["targets"] = ex["answer"].copy()
            ex["targets"][offsets] = np.where(gates, slots.yes_id, slots.no_id)
            ex["answer_mask"] = np.zeros(n - start, np.float32)
            ex["answer_mask"][offsets] = 1.0
        out.append(ex)
    return out


def direct_examples(cfg, tokenizer=None) -> list[dict]:
    """``data.kind = "judge_direct"``: SFT examples of the VLM direct-score baseline (paper Table 3): the direct
    conversation (``prompt.messages(direct=True)``) teacher-forced with ``Reasonable: yes``; the loss covers only
    the answer token, whose target is the record's human label (``yes`` / ``no``), as ``baselines.direct_scores``
    reads it."""
    from jaxdrive.judge.policy import direct_slot

    root = Path(cfg.path)
    records = _limit(read_records(root, cfg.get("split", "train")), cfg)
    if not records:
        raise UserInputError(f"data.path {root}: no records in split {cfg.get('split', 'train')!r}")
    settings = training_settings(cfg)
    scenes, images = read_scenes(root, records), record_images(root, records)
    encoder, image_cfg = encoder_for(cfg, tokenizer), load_image_config(cfg.model_path)
    slot = direct_slot(encoder)
    out = []
    for r, broken in zip(records, _broken(settings, records)):
        conv = P.messages(scenes[r.scene], r.proposal, describe=settings.describe,
                          answer=P.direct_answer_text(True), broken=broken, direct=True)
        enc = encode(encoder, [conv], [read_image(images[r.id], item_name(root, r))], image_cfg, pad_to_multiple_of=1)
        n, start = int(enc.attention_mask[0].sum()), int(enc.answer_start[0])
        answer = enc.input_ids[0, start:n]
        check_slot_tokens(answer[None, min(slot.offsets[0], len(answer) - 1)], slot.yes_id)
        targets, mask = answer.copy(), np.zeros(n - start, np.float32)
        targets[slot.offsets[0]] = slot.yes_id if r.label else slot.no_id
        mask[slot.offsets[0]] = 1.0
        out.append({"prompt": enc.input_ids[0, :start], "answer": answer, "targets": targets, "answer_mask": mask,
                    "pixel_values": enc.pixel_values, "image_grid_thw": enc.image_grid_thw, "label": r.label,
                    "id": r.id})
    return out


def pair_examples(cfg, tokenizer=None) -> list[dict]:
    """``data.kind = "judge_pairs"``: per pair, A and B encoded with the all-yes answer block (fixed length
    ``cfg.max_len``), their slot positions [2, 7], pixel values [2P, D], grids [2, 3], sub-scores and ``preferred``
    (0 = a, 1 = b)."""
    root = Path(cfg.path)
    pairs = _limit(read_pairs(root, cfg.get("split", "train")), cfg)
    if not pairs:
        raise UserInputError(f"data.path {root}: no pairs in split {cfg.get('split', 'train')!r}")
    pair_records = _pair_records(root, pairs)
    settings = training_settings(cfg)
    used = [r for recs in pair_records for r in recs]
    scenes, images = read_scenes(root, used), record_images(root, used)
    encoder, image_cfg = encoder_for(cfg, tokenizer), load_image_config(cfg.model_path)
    slots = answer_slots(encoder)
    out = []
    for p, recs in zip(pairs, pair_records):
        convs = [P.messages(scenes[r.scene], r.proposal, describe=settings.describe, answer=P.answer_text(ALL_YES),
                            broken=b) for r, b in zip(recs, _broken(settings, recs))]
        enc = encode(encoder, convs, [read_image(images[r.id], item_name(root, r)) for r in recs], image_cfg,
                     pad_to_multiple_of=1, max_length=cfg.max_len)
        sub = subscores_of(recs)
        out.append({"input_ids": enc.input_ids, "attention_mask": enc.attention_mask,
                    "positions": slot_positions(enc, slots), "pixel_values": enc.pixel_values,
                    "image_grid_thw": enc.image_grid_thw, "preferred": np.int32(p.preferred == "b"),
                    "subscores": np.stack([np.asarray(getattr(sub, m)) for m in _METRICS], -1),  # [2, 9]
                    "id": p.id})
    return out


def export_files(cfg) -> dict[str, str]:
    """Registry EXPORTS of the judge data kinds: {``JUDGE_META``: JSON} (``policy.TrainedAs``) for the data block
    ``cfg`` of the job, ``training_settings``: the side of its BEV images (the set's meta.json ``image_size``;
    without it the model's record's, else ``IMAGE_SIZE``), ``describe`` and, with it, the set's rule-check
    thresholds."""
    return {JUDGE_META: training_settings(cfg).to_json()}


def _subscores_from_array(a: jnp.ndarray):
    """SubScores-like leaves [..., 9] -> ``SubScores`` [...] (only the gated metrics are meaningful)."""
    from jaxdrive.rules.epdms import SubScores

    vals = {m: a[..., i] for i, m in enumerate(_METRICS)}
    zero = jnp.zeros(a.shape[:-1], jnp.float32)
    step = jnp.full(a.shape[:-1], -1, jnp.int32)
    return SubScores(**vals, raw_progress=zero, multiplier=zero, pdm_score=zero, epdms=zero, pdms=zero,
                     comfort_v1=zero, hc_checks=jnp.zeros(a.shape[:-1] + (6,), bool), nc_step=step, dac_step=step,
                     ddc_step=step, tlc_step=step, ttc_step=step, lk_step=step)


def _preferred_and_other(gates, batch) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Gated scores [N] of the preferred and the other trajectory under sampled ``gates`` [N, 14] (A's 7, B's 7)."""
    g = jnp.asarray(gates, bool)
    s = _subscores_from_array(jnp.asarray(batch["subscores"], jnp.float32))
    scores = rule_gated_score(s, jnp.stack([g[:, :7], g[:, 7:]], 1))  # [N, 2]
    a, b = scores[:, 0], scores[:, 1]
    pref_b = jnp.asarray(batch["preferred"]) == 1
    return jnp.where(pref_b, b, a), jnp.where(pref_b, a, b)


def preference_reward(gates, mask, batch) -> jnp.ndarray:
    """Eq. 12 on device: ``gates`` [N, 14] sampled gates (A's 7 then B's 7), ``batch["subscores"]`` [N, 2, 9],
    ``batch["preferred"]`` [N] (0 = a, 1 = b) -> [N] in {0, 1}; a tie counts as wrong."""
    del mask
    preferred, other = _preferred_and_other(gates, batch)
    return (preferred > other).astype(jnp.float32)


def margin_reward(gates, mask, batch) -> jnp.ndarray:
    """The preferred trajectory's gated score minus the other's under the sampled gates, [N] in [-1, 1] (inputs as
    ``preference_reward``). Its mean over the policy's rollouts is the expected-score margin (Eq. 14), whose sign
    is what TPS accuracy reads; unlike Eq. 12's 0/1 it varies within a group whenever the sampled gates move
    either score, so a pair the judge already orders right still carries an advantage."""
    del mask
    preferred, other = _preferred_and_other(gates, batch)
    return preferred - other


def preference_reward_from_config(cfg) -> Reward:
    """``rewards.judge_preference``: Eq. 12 (``weight``)."""
    return Reward(name="judge_preference", fn=preference_reward, weight=float(cfg.get("weight", 1.0)), kind="jnp")


def margin_reward_from_config(cfg) -> Reward:
    """``rewards.judge_margin``: the sampled gated-score margin (``margin_reward``, ``weight``)."""
    return Reward(name="judge_margin", fn=margin_reward, weight=float(cfg.get("weight", 1.0)), kind="jnp")


def answer_decoder(cfg, tokenizer):
    """``decoder.kind = "judge_answer"``: completion ids -> text (stops at the first masked slot)."""
    if tokenizer is None:
        raise UserInputError("decoder.kind='judge_answer' needs the pretrained model's tokenizer (model.path)")

    def fn(ids, mask=None) -> str:
        ids = np.asarray(ids)
        if mask is not None:
            m = np.asarray(mask).astype(bool)
            ids = ids[: int(np.argmin(m)) if not m.all() else len(ids)]
        return tokenizer.decode(ids.tolist(), skip_special_tokens=True)

    return fn
