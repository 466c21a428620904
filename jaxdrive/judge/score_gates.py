"""``jaxdrive score --gates judge:CHECKPOINT``: per-proposal gates from a DriveJudge model, for gated scoring at scale.

The judge (``judge.policy.DriveJudge``) reads every proposal of every scene of the scoring source (BEV image,
prompt, yes/no logits at the rule slots) and decides its seven rule gates (p_r > 0.5). They expand onto the nine
EPDMS gates (``judge.gates.expand_gates``: COMFORT -> HC and EC, TLC always on) and are handed to the scorer as the
per-proposal gate table ``{scene_id: [[9 booleans] per proposal]}`` that ``jaxdrive score --gates FILE`` reads; the
table is also written beside the run (``judge_gates.json``) so it can be inspected or reused as a file.

The spec after ``judge:`` is the pretrained judge directory, optionally followed by ``,describe`` when the judge was
trained with the text scene description (``--describe`` of ``jaxdrive judge run``) and ``,size=N`` for the side in
pixels of the BEV images it was trained on (``jaxdrive judge data --image-size``): the judge must see the images and
prompts of its training, at the same scale and number of image tokens. Both default to the directory's record of its
training (``policy.JUDGE_META``, written by the export of ``jaxdrive train``), which an option may not contradict;
without the record, to ``IMAGE_SIZE`` (``jaxdrive judge data``'s default) and no description.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.judge.bev import BevConfig
from jaxdrive.judge.gates import expand_gates
from jaxdrive.judge.progress import noting_first_compile

PREFIX = "judge:"


def parse_spec(spec: str) -> tuple[Path, bool, int]:
    """``judge:DIR[,describe][,size=N]`` -> (DIR, describe, BEV image side N in pixels), the options not given taken
    from DIR's record of its training (``policy.trained_settings``); a ValueError naming ``--gates`` otherwise."""
    from jaxdrive.judge.policy import trained_settings

    path, *options = spec[len(PREFIX):].split(",")
    describe, size = None, None
    for opt in options:
        if opt == "describe":
            describe = True
        elif opt.startswith("size=") and opt[5:].isdigit() and int(opt[5:]) >= 8:
            size = int(opt[5:])
        else:
            raise UserInputError(f"--gates {spec}: expected judge:DIR[,describe][,size=N] (N >= 8 pixels), got option "
                             f"{opt!r}")
    if not (Path(path) / "config.json").is_file():
        raise UserInputError(f"--gates {spec}: {path!r} is not a pretrained judge directory (no config.json)")
    size, describe, _ = trained_settings(path, image_size=size, describe=describe,
                                         given={"image_size": f"--gates {spec}", "describe": f"--gates {spec}"})
    return Path(path), describe, size


def judge_gate_table(judge, source, *, progress: bool = True) -> dict[str, list[list[bool]]]:
    """{scene id: [[9 EPDMS gates] per proposal]} for every scene of ``source`` (``scoring.sources.SceneSource``)
    decided by ``judge`` (a ``DriveJudge``); scenes the source cannot read are left out (the scorer reports them).

    One compile per program for the run: a first pass over the source grows the judge's shapes to its scenes
    (``DriveJudge.reserve``: the ``PadSpec``, the BEV render's sizes, with the description the scorer's
    capacities), and every batch has ``judge.batch_size`` rows (a scene's last batch padded)."""
    def scenes():
        for i in range(len(source)):
            scene = source.load(i)
            if hasattr(scene, "num_proposals"):  # else a SourceError: the scoring run reports it
                yield scene

    table = {}
    if not len(source):
        return table
    judge.reserve(scenes())
    bar = tqdm(scenes(), total=len(source), desc="judge gates", disable=not progress)
    for scene in noting_first_compile(bar, bar, "the judge"):
        k = scene.num_proposals
        gates = (np.asarray(expand_gates(judge.probs([scene] * k, list(range(k))) > 0.5)) if k
                 else np.zeros((0, 9), bool))
        table[scene.id] = gates.astype(bool).tolist()
    return table


def gates_from_judge(spec: str, source, out: Path | None, *, pad=None, batch_size: int = 8,
                     progress: bool = True) -> dict[str, list[list[bool]]]:
    """Loads the judge of ``spec`` (``parse_spec``: BEV images of its ``size``), builds the gate table over
    ``source`` and writes it to ``out/judge_gates.json`` (when ``out`` is given)."""
    from jaxdrive.judge.policy import DriveJudge

    path, describe, size = parse_spec(spec)
    judge = DriveJudge.from_pretrained(path, bev=BevConfig(size=size), describe=describe, batch_size=batch_size,
                                       pad=pad)
    table = judge_gate_table(judge, source, progress=progress)
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        atomic.write_text(Path(out) / "judge_gates.json", json.dumps(table))
    return table


def judge_gates_of_proposals(spec: str, scenes, proposals, *, batch_size: int = 8,
                             progress: bool = True) -> np.ndarray:
    """bool [N, 9] EPDMS gates decided by the judge of ``spec`` (``parse_spec``) for one proposal per scene:
    ``proposals[i]`` of ``scenes[i]`` (e.g. a planner's trajectory of ``jaxdrive score --predictions``, judged beside
    PDM-Closed, its EP normaliser). Scenes of different tokens share each judge batch (padded to ``batch_size`` with
    the first, all to one ``PadSpec``: one compile)."""
    from jaxdrive.judge.policy import DriveJudge
    from jaxdrive.scene import PadSpec

    path, describe, size = parse_spec(spec)
    scenes, proposals = list(scenes), [int(k) for k in proposals]
    if not scenes:
        return np.zeros((0, 9), bool)
    judge = DriveJudge.from_pretrained(path, bev=BevConfig(size=size), describe=describe, batch_size=batch_size,
                                       pad=PadSpec.fit(scenes))
    rows = []
    bar = tqdm(range(0, len(scenes), batch_size), desc="judge gates", disable=not progress)
    for start in noting_first_compile(bar, bar, "the judge"):
        idx = list(range(start, min(start + batch_size, len(scenes))))
        padded = idx + idx[:1] * (batch_size - len(idx))
        out = judge.score([scenes[i] for i in padded], [proposals[i] for i in padded])
        rows.append(np.asarray(out.gates[:len(idx)]))
    return np.asarray(expand_gates(np.concatenate(rows))).astype(bool)
