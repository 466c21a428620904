"""Rule-based baselines over a DriveJudge dataset directory, written as ``jaxdrive eval`` prediction files.

* DQC (columns ``id``, ``score``, ``label``): ``epdms`` (every gate on), ``oracle`` (the Eq. 10-11 gate labels of
  the record, i.e. Eq. 14 with the human label known: the ceiling of a gate policy).
* TPS (columns ``id``, ``score_a``, ``score_b``, ``preferred``): ``epdms``, ``oracle``, and ``ade`` / ``fde``
  (score = -distance to the scene's logged human trajectory, m: average over the 41 states / at the last one).
* both, when the dataset has a train split: ``logreg`` / ``logreg_gates``, logistic regression on image embeddings
  (``judge.classifier``, paper A.2) trained on the train split.
* both, when the dataset has a train split: ``constant`` (every gate p = c), ``fixed_gates`` (one gate vector for
  every trajectory) and ``trees`` (gradient-boosted trees on sub-scores and scene-context facts), fitted on the train
  split (``judge.context_baselines``; what each fitted is written to ``<split>_baselines.json``).
* both, with a model (``direct_model``): ``direct``, the VLM direct-score baseline (paper Table 3, VLM-DirectScore /
  -Ft): score = P(``Reasonable: yes``) of a VLM asked about the whole trajectory (``direct_scores``; fine-tuned with
  the ``judge_direct`` dataset, ``configs/judge_direct_sft_tiny.py``).

A run first removes the split's files of every method (``METHODS``) from the output directory, and what ``jaxdrive
eval`` wrote beside them (``eval.cli.metric_files``): what it holds is one run's (a method this run cannot write,
e.g. ``logreg`` without a train split, left an earlier set's file that ``jaxdrive eval tps --predictions
DIR/test_tps_*.parquet`` read without a word).
"""
from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.eval.cli import metric_files
from jaxdrive.judge.dataset import SUBSCORE_KEYS, Pair, Record, check_pair_records, item_name, read_image, \
    read_pairs, read_records, read_scenes, record_images
from jaxdrive.judge.gates import RULE_LABELS, rule_gated_score
from jaxdrive.rules.epdms import METRICS, SubScores

METHODS = ("epdms", "oracle", "ade", "fde", "logreg", "logreg_gates", "constant", "fixed_gates", "trees",
           "direct")  # every <split>_<dqc|tps>_<method>


def check_rule_fields(root: Path, records: list[Record], subscores: bool = True) -> None:
    """Each record has what the rule-based baselines read: every sub-score (only ``ec`` may be null; not checked
    without ``subscores``: training records of the classifiers) and the gate labels; fails naming the record and the
    field (a missing one was a KeyError, or a NaN score)."""
    for r in records:
        named = item_name(root, r)
        missing = [k for k in SUBSCORE_KEYS if subscores and k != "ec" and r.subscores.get(k) is None]
        if missing:
            raise UserInputError(f"{named}: field 'subscores': no value for {missing} (the rule-based baselines read "
                             "every sub-score; only 'ec' may be null)")
        if not r.gates:
            raise UserInputError(f"{named}: field 'gates': empty (the oracle baselines read the gate labels)")


def subscores_of(records: list[Record]) -> SubScores:
    """The records' stored sub-scores as ``SubScores`` [N] (EC null -> NaN; step and auxiliary fields zero)."""
    n = len(records)
    vals = {m: jnp.asarray([np.nan if r.subscores.get(m) is None else r.subscores[m] for r in records], jnp.float32)
            for m in METRICS}
    zero = jnp.zeros(n, jnp.float32)
    step = jnp.full(n, -1, jnp.int32)
    return SubScores(**vals, raw_progress=zero, multiplier=vals["nc"] * vals["dac"] * vals["ddc"] * vals["tlc"],
                     pdm_score=zero, epdms=jnp.asarray([r.subscores["epdms"] for r in records], jnp.float32),
                     pdms=zero, comfort_v1=zero, hc_checks=jnp.zeros((n, 6), bool), nc_step=step, dac_step=step,
                     ddc_step=step, tlc_step=step, ttc_step=step, lk_step=step)


def oracle_gates(records: list[Record]) -> np.ndarray:
    """[N, 7] the records' Eq. 10-11 gate labels (``RULE_LABELS`` order)."""
    return np.array([[r.gates[k] for k in RULE_LABELS] for r in records], bool)


def dqc_scores(records: list[Record], method: str) -> np.ndarray:
    if method == "epdms":
        return np.array([r.subscores["epdms"] for r in records], np.float64)
    if method == "oracle":
        return np.asarray(rule_gated_score(subscores_of(records), oracle_gates(records)), np.float64)
    raise UserInputError(f"method: expected 'epdms' or 'oracle', got {method!r}")


def direct_scores(model_dir: str | Path, root: Path, records: list[Record], *, describe: bool | None = None,
                  batch_size: int = 8) -> np.ndarray:
    """[N] P(reasonable) of the records under the VLM direct-score baseline ``model_dir`` (a pretrained directory):
    the probability of ``yes`` against ``no`` at the answer token of ``Reasonable: yes`` (teacher-forced).
    ``describe`` (prompt with the text description) and the set's image size and rule-check thresholds are checked
    against the model's record of its training, which supplies ``describe`` when None, as for ``jaxdrive judge run``
    (``run.evaluation_settings``: a ValueError naming both when they differ); without the record, no description
    unless ``describe``."""
    from jaxdrive.judge import prompt as P
    from jaxdrive.judge.labels import rule_values
    from jaxdrive.judge.policy import direct_slot, encode, gate_probabilities, load_image_config
    from jaxdrive.judge.run import evaluation_settings
    from jaxdrive.models.chat import ChatEncoder
    from jaxdrive.models.weights import from_pretrained

    _, describe, thresholds = evaluation_settings(Path(model_dir), Path(root), describe)
    scenes = read_scenes(root, records)
    model = from_pretrained(str(model_dir), dtype=jnp.float32)
    encoder, image_cfg = ChatEncoder.from_pretrained(str(model_dir)), load_image_config(model_dir)
    slot = direct_slot(encoder)
    values = np.asarray(rule_values(subscores_of(records))) if records else np.zeros((0, 7))
    out = []
    for i in range(0, len(records), batch_size):
        part = records[i:i + batch_size]
        part = part + part[:1] * (batch_size - len(part))  # one shape: one compile
        convs = [P.messages(scenes[r.scene], r.proposal,
                            describe=describe, answer=P.direct_answer_text(True), direct=True,
                            broken=P.broken_rules(v, thresholds) if describe else None)
                 for r, v in zip(part, values[i:i + batch_size].tolist() + [values[i]] * batch_size)]
        images = [read_image(root / r.image, item_name(root, r)) for r in part]
        out.append(gate_probabilities(model, encode(encoder, convs, images, image_cfg), slot)[:, 0])
    return np.concatenate(out)[:len(records)].astype(np.float64) if out else np.zeros(0)


def _displacements(scenes: dict, pairs: list[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """[P, 2] ADE and FDE (m) of trajectories a and b against the scene's human trajectory (``scenes``:
    ``dataset.read_scenes`` of the pairs)."""
    ade, fde = np.zeros((len(pairs), 2)), np.zeros((len(pairs), 2))
    for i, p in enumerate(pairs):
        scene = scenes[p.scene]
        if scene.human_states is None:
            raise UserInputError(f"pair {p.id}: scene {p.scene} has no human trajectory (needed by ADE/FDE)")
        for j, k in enumerate((p.a, p.b)):
            d = np.linalg.norm(scene.proposal_states[k, :, :2] - scene.human_states[:, :2], axis=-1)
            ade[i, j], fde[i, j] = d.mean(), d[-1]
    return ade, fde


def tps_scores(root: Path, pairs: list[Pair], method: str, scenes: dict | None = None) -> np.ndarray:
    """[P, 2] scores of (a, b) under ``method`` (epdms, oracle, ade, fde; ``scenes``: the pairs' scenes, read when
    None)."""
    if method in ("ade", "fde"):
        ade, fde = _displacements(read_scenes(root, pairs) if scenes is None else scenes, pairs)
        return -(ade if method == "ade" else fde)
    by_id = {r.id: r for r in read_records(root)}
    out = np.zeros((len(pairs), 2))
    for j, key in enumerate(("a_record", "b_record")):
        recs = [by_id[getattr(p, key)] for p in pairs]
        out[:, j] = dqc_scores(recs, method)
    return out


def write_baselines(root: str | Path, split: str = "test", out_dir: str | Path | None = None, *,
                    direct_model: str | Path | None = None, describe: bool | None = None) -> list[Path]:
    """Writes ``<out_dir>/<split>_dqc_<method>.parquet`` and ``<split>_tps_<method>.parquet`` for every baseline;
    ``out_dir`` defaults to ``root/baselines``; ``direct_model`` adds the VLM direct-score baseline (prompted with
    the text description when ``describe``; None: as the model was trained, ``direct_scores``). ADE / FDE score
    every pair of the split; the record-based methods the pairs whose ``a_record`` and ``b_record`` are records of
    the split (the pairs ``judge run`` scores). Returns the paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root)
    out_dir = Path(out_dir) if out_dir else root / "baselines"
    written = []
    records = read_records(root, split)
    train = read_records(root, "train")
    all_pairs = read_pairs(root, split)
    check_pair_records(root, all_pairs, read_records(root))
    check_rule_fields(root, records)
    pair_scenes = read_scenes(root, all_pairs)
    if records and train and split != "train":
        check_rule_fields(root, train, subscores=False)
        record_images(root, train + records)
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind in ("dqc", "tps"):
        for method in METHODS:
            path = out_dir / f"{split}_{kind}_{method}.parquet"
            for old in (path, *metric_files(path)):  # with `jaxdrive eval`'s metrics of it
                old.unlink(missing_ok=True)
    (out_dir / f"{split}_baselines.json").unlink(missing_ok=True)
    direct = {}
    if records and direct_model:  # first: settings contradicting its training record stop before the classifiers fit
        direct["direct"] = direct_scores(direct_model, root, records, describe=describe)
    learned = {}
    if records and train and split != "train":
        from jaxdrive.judge.classifier import classifier_scores

        from jaxdrive.judge.context_baselines import context_baseline_scores

        learned = classifier_scores(root, train, records)
        fitted = context_baseline_scores(root, train, records)
        learned.update({m: scores for m, (scores, _) in fitted.items()})
        notes = out_dir / f"{split}_baselines.json"
        atomic.write_text(notes, json.dumps({m: note for m, (_, note) in fitted.items()}, indent=2) + "\n")
        written.append(notes)
    learned.update(direct)
    if records:
        for method in ("epdms", "oracle") + tuple(learned):
            path = out_dir / f"{split}_dqc_{method}.parquet"
            score = learned[method] if method in learned else dqc_scores(records, method)
            pq.write_table(pa.table({"id": [r.id for r in records], "score": score,
                                     "label": [r.label for r in records]}), path)
            written.append(path)
    by_id = {r.id: k for k, r in enumerate(records)}
    with_records = [p for p in all_pairs if p.a_record in by_id and p.b_record in by_id]
    for method in ("epdms", "oracle", "ade", "fde") + tuple(learned):
        # ADE / FDE need the logged human trajectory: scored over the pairs whose scene has one (none in a set of
        # labelled planner proposals without logs)
        pairs = ([p for p in all_pairs if pair_scenes[p.scene].human_states is not None]
                 if method in ("ade", "fde") else with_records)
        if not pairs:
            continue
        if method in learned:
            s = np.array([[learned[method][by_id[p.a_record]], learned[method][by_id[p.b_record]]] for p in pairs])
        else:
            s = tps_scores(root, pairs, method, pair_scenes)
        path = out_dir / f"{split}_tps_{method}.parquet"
        pq.write_table(pa.table({"id": [p.id for p in pairs], "score_a": s[:, 0], "score_b": s[:, 1],
                                 "preferred": [p.preferred for p in pairs]}), path)
        written.append(path)
    return written
