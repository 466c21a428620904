"""The VLM gate policy: DriveJudge scores trajectories with gates read from a Qwen-VL model's yes/no logits.

For each (scene, trajectory) the judge renders the BEV image (``judge.bev``), builds the conversation of
``judge.prompt`` and teacher-forces the answer block with every rule line set to ``yes``. At the answer token of rule
r (the first token where ``r: yes`` and ``r: no`` differ, ``AnswerSlots``), the policy's gate probability is

    p_r = sigmoid(logit[yes_token] - logit[no_token])

read at the position that predicts that token. The policy is the product of these Bernoullis: the exact expected
score and the 128-combination distribution follow from ``judge.gates``, GRPO rollouts sample gates from the same
p_r (``judge.grpo``), and the log-probability of a combination is the sum of the slots' Bernoulli log-probs from one
forward pass. (Slot r is conditioned on the earlier slots being ``yes``, the most common SFT target.)

``DriveJudge.score(scenes, trajectories)`` returns the expected score, the hard-gated score (p_r > 0.5), gates, gate
probabilities, the rule sub-scores and a rationale naming the rules the context excuses.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import numbers
import os
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdrive.errors import UserInputError
from jaxdrive.judge import prompt as P
from jaxdrive.judge.bev import IMAGE_SIZE, TILE, BevConfig, render_bev_batch, render_shape
from jaxdrive.judge.gates import RULE_LABELS, expected_score, rule_gated_score
from jaxdrive.judge.labels import PAPER_THRESHOLDS, rule_values
from jaxdrive.models.chat import ChatEncoder
from jaxdrive.models.image_processing import ImageProcessorConfig, preprocess_images, read_preprocessor_config
from jaxdrive.rules import epdms
from jaxdrive.rules.comfort import EC_SHIFT
from jaxdrive.scene import HostScene, PadSpec, batch_scenes
from jaxdrive.scene.device import check_scene_list
from jaxdrive.broadphase.device import needs
from jaxdrive.scorer import BatchScorer, capacity_for

ALL_YES = (True,) * len(RULE_LABELS)
# Written beside an exported judge's weights (``recipes.export_files``): how it was trained, so it is used the same way.
JUDGE_META = "jaxdrive_judge.json"


@dataclasses.dataclass(frozen=True)
class AnswerSlots:
    """Token offsets of the yes/no answer of each rule inside the answer block (from the first answer token), and the
    yes / no token ids (one pair for all rules)."""

    offsets: tuple[int, ...]
    yes_id: int
    no_id: int


def answer_slots(encoder: ChatEncoder) -> AnswerSlots:
    """Finds each rule's answer token by tokenizing the all-yes block against the block with that rule set to no."""
    tok = encoder.tokenizer
    base = tok(P.answer_text(ALL_YES), add_special_tokens=False)["input_ids"]
    offsets, yes, no = [], set(), set()
    for r in range(len(RULE_LABELS)):
        gates = list(ALL_YES)
        gates[r] = False
        other = tok(P.answer_text(gates), add_special_tokens=False)["input_ids"]
        i = next(i for i, (a, b) in enumerate(zip(base, other)) if a != b)
        offsets.append(i)
        yes.add(base[i])
        no.add(other[i])
    if len(yes) != 1 or len(no) != 1:
        raise UserInputError(f"tokenizer: the yes/no answers do not start with one token each (yes {yes}, no {no})")
    return AnswerSlots(tuple(offsets), yes.pop(), no.pop())


def direct_slot(encoder: ChatEncoder) -> AnswerSlots:
    """The direct-score baseline's one answer slot (``prompt.direct_answer_text``)."""
    tok = encoder.tokenizer
    a, b = (tok(P.direct_answer_text(v), add_special_tokens=False)["input_ids"] for v in (True, False))
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return AnswerSlots((i,), a[i], b[i])


@dataclasses.dataclass
class Encoded:
    """A padded batch of judge conversations: ids / mask / target mask [B, S], answer start [B] (first assistant
    token), image patches and grids."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    target_mask: np.ndarray
    answer_start: np.ndarray
    pixel_values: np.ndarray
    image_grid_thw: np.ndarray


def encode(encoder: ChatEncoder, convs: list[list[dict]], images: Sequence[np.ndarray],
           image_cfg: ImageProcessorConfig, pad_to_multiple_of: int = 32, max_length: int | None = None) -> Encoded:
    """Tokenizes conversations with one image each (BEV uint8 [H, W, 3]) into one right-padded batch."""
    pv, grid = preprocess_images(list(images), image_cfg)
    enc = encoder.encode(convs, grid, pad_to_multiple_of=pad_to_multiple_of, max_length=max_length)
    start = np.argmax(enc.target_mask, axis=1)
    return Encoded(enc.input_ids, enc.attention_mask, enc.target_mask, start, pv, grid)


@functools.partial(jax.jit, static_argnums=(0,))
def _slot_logits(graphdef, state, inputs, positions, yes_no):
    """[B, R, 2] (yes, no) logits at ``positions`` [B, R] (the positions predicting the answer tokens)."""
    model = nnx.merge(graphdef, state)
    h = model.forward_hidden(inputs, query_index=positions)[0]  # [B, R, H]; the last layer runs at R positions
    w = model.lm_head_weight()[:, yes_no]  # [H, 2]
    return jnp.einsum("brh,hc->brc", h.astype(jnp.float32), w.astype(jnp.float32))


def check_slot_tokens(tokens: np.ndarray, yes_id: int) -> None:
    """Raises unless every token id in ``tokens`` [B, R] (the tokens at the answer slots of conversations
    teacher-forced with ``yes`` lines) is ``yes_id``: a chat template that writes something before the assistant's
    content (an empty ``<think></think>`` block, as Qwen3 thinking templates do) moves the answer block, and the
    slots would read (and SFT would train) the logits of other tokens."""
    if (np.asarray(tokens) != yes_id).any():
        raise UserInputError("chat template: the answer block does not start at the first assistant token (a template "
                         "that writes e.g. an empty <think></think> block first?), so the yes/no slots would read "
                         "other tokens; use a template that renders the assistant content as given")


def slot_positions(enc: Encoded, slots: AnswerSlots) -> np.ndarray:
    """[B, 7] positions whose output predicts each rule's answer token, in conversations teacher-forced with the
    all-yes block (checked: ``check_slot_tokens``)."""
    pos = enc.answer_start[:, None] + np.asarray(slots.offsets)[None, :]
    check_slot_tokens(np.take_along_axis(enc.input_ids, np.minimum(pos, enc.input_ids.shape[1] - 1), 1),
                      slots.yes_id)
    return (pos - 1).astype(np.int32)


def gate_probabilities(model, enc: Encoded, slots: AnswerSlots, bucket: int = 64) -> np.ndarray:
    """[B, 7] P(rule applies) of a batch encoded with the all-yes answer block."""
    inputs = model.prepare_inputs(enc.input_ids, enc.attention_mask, enc.pixel_values, enc.image_grid_thw,
                                  bucket=bucket)
    graphdef, state = nnx.split(model)
    logits = _slot_logits(graphdef, state, inputs, jnp.asarray(slot_positions(enc, slots)),
                          jnp.asarray([slots.yes_id, slots.no_id]))
    return np.asarray(jax.nn.sigmoid(logits[..., 0] - logits[..., 1]))


def load_image_config(path: str | os.PathLike) -> ImageProcessorConfig:
    """The judge directory's image settings (``read_preprocessor_config``; the defaults without the file)."""
    return read_preprocessor_config(path) or ImageProcessorConfig()


@dataclasses.dataclass(frozen=True)
class TrainedAs:
    """How a judge was trained, as it must be used: ``image_size`` the side of its BEV images (pixels),
    ``describe`` whether its prompts had the text scene description, ``thresholds`` [7] (``RULE_LABELS`` order) the
    rule tolerances of that description's rule checks (None without ``describe``)."""

    image_size: int
    describe: bool
    thresholds: tuple[float, ...] | None = None

    def to_json(self) -> str:
        """The ``JUDGE_META`` text: ``{"image_size": N, "describe": bool[, "thresholds": {rule: tolerance}]}``."""
        d = {"image_size": self.image_size, "describe": self.describe}
        if self.thresholds is not None:
            # the shortest decimals of each float32 tolerance (0.7, not 0.699999988): they read back to the same value
            d["thresholds"] = {r: float(np.format_float_positional(np.float32(t)))
                               for r, t in zip(RULE_LABELS, self.thresholds)}
        return json.dumps(d, indent=2) + "\n"

    @classmethod
    def read(cls, path: str | os.PathLike) -> "TrainedAs | None":
        """The record ``path/JUDGE_META`` of a judge directory, or None without one (older exports, a base model)."""
        file = os.path.join(path, JUDGE_META)
        if not os.path.exists(file):
            return None
        try:
            with open(file) as f:
                d = json.load(f)
            if not isinstance(d["describe"], bool):
                raise TypeError(f"describe: expected true or false, got {d['describe']!r}")
            thresholds = d.get("thresholds")
            return cls(int(d["image_size"]), bool(d["describe"]),
                       None if thresholds is None else tuple(float(thresholds[r]) for r in RULE_LABELS))
        except (ValueError, KeyError, TypeError) as e:
            raise UserInputError(f"{file}: expected {{\"image_size\": N, \"describe\": bool[, \"thresholds\": "
                             f"{{rule: tolerance}}]}} ({type(e).__name__}: {e})") from None


def _tolerances(thresholds) -> str:
    """``LK=0.7 NC=0.9 ...``: rule tolerances [7] (``RULE_LABELS`` order) for messages."""
    return " ".join(f"{r}={t:g}" for r, t in zip(RULE_LABELS, np.asarray(thresholds, np.float32).tolist()))


def trained_settings(path: str | os.PathLike, *, image_size: int | None = None, describe: bool | None = None,
                     thresholds: np.ndarray | None = None,
                     given: dict[str, str] | None = None) -> tuple[int, bool, np.ndarray]:
    """(BEV image side in pixels, describe, rule-check thresholds [7]) to use the judge directory ``path`` with.

    A value given (not None) must agree with the directory's ``JUDGE_META`` record, else a ValueError naming the
    option (``given[field]``, e.g. ``"--gates judge:DIR,size=96"``; default ``field=value``) and the recorded value;
    the record supplies the values not given (thresholds are compared and taken only with ``describe``: they change
    nothing else). Without the record: ``IMAGE_SIZE``, no description, appendix B.1's thresholds, as before."""
    rec = TrainedAs.read(path)
    if rec is None:
        return (IMAGE_SIZE if image_size is None else int(image_size), bool(describe),
                PAPER_THRESHOLDS if thresholds is None else np.asarray(thresholds, np.float32))
    names = {"image_size": f"image_size={image_size}", "describe": f"describe={describe}",
             "thresholds": "thresholds", **(given or {})}
    trained = f"{os.fspath(path)} was trained"
    if image_size is not None and int(image_size) != rec.image_size:
        raise UserInputError(f"{names['image_size']}: {trained} on {rec.image_size}-pixel BEV images ({JUDGE_META})")
    if describe is not None and bool(describe) != rec.describe:
        raise UserInputError(f"{names['describe']}: {trained} {'with' if rec.describe else 'without'} the text scene "
                         f"description ({JUDGE_META})")
    if not rec.describe:  # the thresholds only name the broken rules in the description
        return rec.image_size, False, PAPER_THRESHOLDS if thresholds is None else np.asarray(thresholds, np.float32)
    recorded = PAPER_THRESHOLDS if rec.thresholds is None else np.asarray(rec.thresholds, np.float32)
    if thresholds is not None and not np.array_equal(np.asarray(thresholds, np.float32), recorded):
        raise UserInputError(f"{names['thresholds']}: {trained} with the rule-check thresholds {_tolerances(recorded)} "
                         f"({JUDGE_META}), not {_tolerances(thresholds)}")
    return rec.image_size, True, recorded


@dataclasses.dataclass
class Judgement:
    """``DriveJudge.score`` output for N trajectories: score (exact expected score) and score_hard (gates
    p > 0.5) [N], epdms [N], gates bool [N, 7], probs [N, 7], subscores {metric: [N]}, rationale [N] strings."""

    score: np.ndarray
    score_hard: np.ndarray
    epdms: np.ndarray
    gates: np.ndarray
    probs: np.ndarray
    subscores: dict
    rationale: list[str]


def with_trajectory(scene: HostScene, states: np.ndarray) -> HostScene:
    """``scene`` with rear-axle ``states`` [41, 11] (global frame) appended as its last proposal ("judged"); the
    others stay the EP normaliser's reference. When the scene has previous plans, the judged one's is the same plan
    planned 0.5 s earlier (kind "same"): previous[5:] = states[:36], what EC compares with states[:36], so its EC is
    that of an unchanged plan (1); the 0.5 s before now, which EC does not read, repeat the current state."""
    previous = None
    if scene.previous_states is not None:
        shifted = np.concatenate([np.repeat(states[:1], EC_SHIFT, axis=0), states[:len(states) - EC_SHIFT]])
        previous = np.concatenate([scene.previous_states, shifted[None]])
    return dataclasses.replace(
        scene, proposal_states=np.concatenate([scene.proposal_states, states[None]]),
        proposal_names=scene.proposal_names + ["judged"], proposal_families=scene.proposal_families + ["judged"],
        previous_states=previous,
        previous_kinds=None if previous is None or scene.previous_kinds is None else scene.previous_kinds + ["same"])


def judged_rows(scenes: Sequence[HostScene], trajectories: Sequence[int | np.ndarray]
                ) -> tuple[list[HostScene], list[int]]:
    """``DriveJudge.score``'s checked inputs: the scenes (one given states: ``with_trajectory``) and the index of the
    judged proposal in each; a ValueError / TypeError naming ``scenes`` or ``trajectories[i]``."""
    check_scene_list(scenes, "DriveJudge.score: scenes")
    if isinstance(trajectories, (str, bytes)) or not isinstance(trajectories, (Sequence, np.ndarray)):
        raise TypeError(f"DriveJudge.score: trajectories: expected a list (one per scene), got "
                        f"{type(trajectories).__name__}")
    if len(scenes) != len(trajectories):
        raise UserInputError(f"trajectories: expected one per scene ({len(scenes)}), got {len(trajectories)}")
    scenes, proposals = list(scenes), []
    for i, (s, t) in enumerate(zip(scenes, trajectories)):
        if np.ndim(t) == 0:
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Integral):
                raise TypeError(f"trajectories[{i}]: expected a proposal index (an int) or states "
                                f"{s.proposal_states.shape[1:]}, got {t!r}")
            if not 0 <= int(t) < s.num_proposals:
                raise UserInputError(f"trajectories[{i}]: proposal index {t} out of range [0, {s.num_proposals})")
            proposals.append(int(t))
            continue
        t = np.asarray(t, np.float64)
        if t.shape != s.proposal_states.shape[1:]:
            raise UserInputError(f"trajectories[{i}]: expected states {s.proposal_states.shape[1:]}, got {t.shape}")
        if not np.isfinite(t).all():  # else named as the scene's appended proposals[*].states
            raise UserInputError(f"trajectories[{i}]: states hold non-finite values (first at index "
                             f"{tuple(int(j) for j in np.argwhere(~np.isfinite(t))[0])})")
        scenes[i] = with_trajectory(s, t)
        proposals.append(s.num_proposals)
    return scenes, proposals


def rationale(probs: np.ndarray) -> str:
    off = [f"{r} (p={p:.2f})" for r, p in zip(RULE_LABELS, probs) if p <= 0.5]
    return ("Every rule applies." if not off else
            "The context excuses " + ", ".join(off) + "; the other rules apply.")


class DriveJudge:
    """A Qwen-VL gate policy over rule sub-scores.

    Args:
      model: a ``jaxdrive.models.vlm.QwenModel``; encoder: its ``ChatEncoder``; image_cfg: its image processor.
      bev: the BEV rendering (the image the model was trained on; default ``IMAGE_SIZE`` pixels, the side
      ``jaxdrive judge data`` renders by default); describe: add the text scene description (with
      the rules the plan breaks: rule scores below ``thresholds`` [7], ``RULE_LABELS`` order, as in training).
      batch_size: conversations per forward pass (and scenes per scoring / rendering batch; a last smaller batch
      is padded); pad: ``PadSpec`` of the scoring batches (default: fitted to the first call's scenes).

    The judge compiles each program once for the shapes it has seen and only grows them: the
    ``PadSpec`` (a scene that does not fit grows it), the BEV render's ``RenderShape``, the scorer's capacities
    and the token length (powers of two). ``reserve(scenes)`` grows them to cover scenes up front, so judging them
    afterwards compiles once (``jaxdrive score --gates judge:``); the values do not depend on the shapes.
    """

    def __init__(self, model, encoder: ChatEncoder, image_cfg: ImageProcessorConfig, *, bev: BevConfig = BevConfig(size=IMAGE_SIZE),
                 describe: bool = False, batch_size: int = 8, pad: PadSpec | None = None,
                 thresholds: np.ndarray = PAPER_THRESHOLDS):
        self.model, self.encoder, self.image_cfg = model, encoder, image_cfg
        self.bev, self.describe, self.batch_size, self.pad = bev, describe, batch_size, pad
        self.thresholds = np.asarray(thresholds, np.float32)
        self.slots = answer_slots(encoder)
        self.scorer = BatchScorer()  # sub-scores with the broad phase (the unculled kernels' values)
        self.render_shape = None  # bev.RenderShape of the images so far (grown)
        self.seq_len = None  # token length of the conversations so far (a power of two, grown)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, bev: BevConfig | None = None, describe: bool | None = None,
                        thresholds: np.ndarray | None = None, **kwargs) -> "DriveJudge":
        """The judge of a pretrained directory. ``bev`` (its ``size``), ``describe`` and ``thresholds`` default to the
        directory's ``JUDGE_META`` record of its training and must agree with it (``trained_settings``); without the
        record, to ``IMAGE_SIZE`` pixels, no description and appendix B.1's thresholds. Other ``kwargs``:
        ``__init__``'s."""
        from jaxdrive.models.weights import from_pretrained

        size, describe, thresholds = trained_settings(
            path, image_size=None if bev is None else bev.size, describe=describe, thresholds=thresholds,
            given={"image_size": f"bev.size={bev.size}"} if bev is not None else None)
        bev = BevConfig(size=size) if bev is None else bev
        return cls(from_pretrained(os.fspath(path), dtype=jnp.float32), ChatEncoder.from_pretrained(os.fspath(path)),
                   load_image_config(path), bev=bev, describe=describe, thresholds=thresholds, **kwargs)

    def _batch(self, scenes: Sequence[HostScene]):
        """``batch_scenes`` at the judge's ``PadSpec``, grown first when a scene does not fit (one more compile)."""
        fit = PadSpec.fit(list(scenes))
        self.pad = fit if self.pad is None else self.pad.union(fit)
        return batch_scenes(list(scenes), self.pad)

    def _chunks(self, n: int):
        """Row indices of batches of ``batch_size`` covering ``n`` rows, the last one padded with its last row (one
        shape for every batch), and how many rows of each are real."""
        for i in range(0, n, self.batch_size):
            rows = list(range(i, min(i + self.batch_size, n)))
            yield rows + rows[-1:] * (self.batch_size - len(rows)), len(rows)

    def reserve(self, scenes) -> None:
        """Grows the judge's shapes (``PadSpec``, ``RenderShape``, with ``describe`` the scorer's capacities) to cover
        ``scenes`` (an iterable of ``HostScene``; e.g. a whole run's, before judging it), so judging them compiles
        each program once. The token length is grown as conversations come (powers of two)."""
        for s in scenes:
            fit = PadSpec.fit([s])
            self.pad = fit if self.pad is None else self.pad.union(fit)
            sc, pr, _ = batch_scenes([s], self.pad)
            self._grow_render(sc)
            if self.describe:
                cap = capacity_for(needs(sc, pr), 1.0)
                self.scorer.capacity = cap if self.scorer.capacity is None else self.scorer.capacity.union(cap)

    def _grow_render(self, sc) -> None:
        if self.bev.size % TILE == 0:
            shape = render_shape(sc, self.bev)
            self.render_shape = shape if self.render_shape is None else self.render_shape.union(shape)

    def _render(self, sc, states) -> np.ndarray:
        self._grow_render(sc)
        return np.asarray(render_bev_batch(sc, states, self.bev, self.render_shape))

    def images(self, scenes: Sequence[HostScene], proposals: Sequence[int]) -> np.ndarray:
        """BEV images [N, H, W, 3] of each scene with its trajectory."""
        out = []
        for rows, n in self._chunks(len(scenes)):
            sc, pr, _ = self._batch([scenes[i] for i in rows])
            out.append(self._render(sc, np.asarray(pr.states)[np.arange(len(rows)), [proposals[i] for i in rows]])[:n])
        return np.concatenate(out)

    def subscores(self, scenes: Sequence[HostScene], proposals: Sequence[int]) -> epdms.SubScores:
        """Rule sub-scores [N] of each scene's proposal, each distinct scene (object) scored once, in batches of
        ``batch_size`` scenes."""
        index, distinct = {}, []
        for s in scenes:
            if id(s) not in index:
                index[id(s)] = len(distinct)
                distinct.append(s)
        where = np.asarray([index[id(s)] for s in scenes])
        order, parts = [], []
        for rows, n in self._chunks(len(distinct)):
            sc, pr, _ = self._batch([distinct[i] for i in rows])
            subs = self.scorer(sc, pr)  # [batch_size, K]; K may grow between batches: take the rows here
            mine = np.flatnonzero((where >= rows[0]) & (where < rows[0] + n))
            order.append(mine)
            at = (where[mine] - rows[0], np.asarray(proposals)[mine])
            parts.append(jax.tree.map(lambda x: np.asarray(x)[at], subs))
        back = np.argsort(np.concatenate(order), kind="stable")
        return jax.tree.map(lambda *x: np.concatenate(x)[back], *parts)

    def _encode(self, convs, images) -> Encoded:
        """``encode`` at the judge's token length (a power of two, grown to the longest conversation so far)."""
        enc = encode(self.encoder, convs, images, self.image_cfg)
        length = enc.input_ids.shape[1]
        if self.seq_len is None or length > self.seq_len:
            self.seq_len = max(32, 1 << (length - 1).bit_length())
        if length != self.seq_len:
            enc = encode(self.encoder, convs, images, self.image_cfg, max_length=self.seq_len)
        return enc

    def probs(self, scenes: Sequence[HostScene], proposals: Sequence[int], images: np.ndarray | None = None,
              values: np.ndarray | None = None) -> np.ndarray:
        """[N, 7] gate probabilities; ``values`` [N, 7]: the trajectories' rule scores (``labels.rule_values``), needed
        with ``describe`` (computed when not given)."""
        scenes, proposals = list(scenes), list(proposals)
        images = self.images(scenes, proposals) if images is None else images
        if self.describe and values is None:
            values = np.asarray(rule_values(self.subscores(scenes, proposals)))
        broken = ([P.broken_rules(v, self.thresholds) for v in values] if self.describe
                  else [None] * len(scenes))
        out = []
        for rows, n in self._chunks(len(scenes)):
            convs = [P.messages(scenes[i], proposals[i], describe=self.describe, answer=P.answer_text(ALL_YES),
                                broken=broken[i]) for i in rows]
            out.append(gate_probabilities(self.model, self._encode(convs, images[rows]), self.slots)[:n])
        return np.concatenate(out)

    def score(self, scenes: Sequence[HostScene], trajectories: Sequence[int | np.ndarray]) -> Judgement:
        """Judges one trajectory per scene: a proposal index of the scene, or rear-axle states [41, 11] in the scene's
        global frame (appended to the scene's proposals, which stay the EP normaliser's reference; its previous plan
        is itself 0.5 s earlier: ``with_trajectory``)."""
        scenes, proposals = judged_rows(scenes, trajectories)
        sub = self.subscores(scenes, proposals)
        probs = self.probs(scenes, proposals, self.images(scenes, proposals), np.asarray(rule_values(sub)))
        gates = probs > 0.5
        return Judgement(score=np.asarray(expected_score(sub, probs)), score_hard=np.asarray(rule_gated_score(sub, gates)),
                         epdms=np.asarray(sub.epdms), gates=gates, probs=probs,
                         subscores={m: np.asarray(getattr(sub, m)) for m in epdms.METRICS},
                         rationale=[rationale(p) for p in probs])
