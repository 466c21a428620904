"""A synthetic multiple-choice driving QA set built from generated scenes, with gold answers read from the scene.

Each question is answerable with one tool call (the kind names the tool), so a policy that uses the tools correctly
can reach 100 %. Items: ``{"id", "scene_seed", "scene_id", "kind", "question", "options" {letter: text}, "gold"}``;
the question text ends with the options as "A) ... B) ...". Option order is shuffled per item (seeded).
"""
from __future__ import annotations

import numpy as np

from jaxdrive.agent.tools import ToolContext, driving
from jaxdrive.data.synthetic import generate_scene
from jaxdrive.errors import UserInputError

KINDS = {
    "leading": ("Is there a leading object in the ego lane within 10 m ahead?", ("Yes", "No")),
    "front_count": ("How many objects are in front of the ego vehicle (within 5 m laterally, 0-20 m ahead)?",
                    ("0", "1", "2", "3 or more")),
    "goal": ("What is the ego vehicle's mission goal at this moment?", ("LEFT", "RIGHT", "FORWARD")),
    "speed": ("How fast is the ego vehicle moving?", ("below 2 m/s", "2 to 8 m/s", "8 to 15 m/s", "above 15 m/s")),
    "drivable_left": ("Is the ground 3.5 m to the left of the ego vehicle drivable?", ("Yes", "No")),
}
LETTERS = "ABCDEF"


def gold_text(kind: str, ctx: ToolContext) -> str:
    """The correct option text of question ``kind`` for the scene (from the same ground truth the tools read)."""
    if kind == "leading":
        return "Yes" if driving.leading_object(ctx) is not None else "No"
    if kind == "front_count":
        n = len(driving.front_objects(ctx))
        return str(n) if n < 3 else "3 or more"
    if kind == "goal":
        return ctx.mission
    if kind == "speed":
        v = ctx.ego["speed"]
        return "below 2 m/s" if v < 2 else "2 to 8 m/s" if v < 8 else "8 to 15 m/s" if v < 15 else "above 15 m/s"
    if kind == "drivable_left":
        return "Yes" if driving.drivable(ctx, [[-3.5, 0.0]])[0]["drivable"] else "No"
    raise UserInputError(f"kind: expected one of {sorted(KINDS)}, got {kind!r}")


def make_item(seed: int, kind: str, rng: np.random.Generator, ctx: ToolContext | None = None, scene=None) -> dict:
    scene = scene if scene is not None else generate_scene(seed, num_proposals=1)
    ctx = ctx or ToolContext.from_scene(scene)
    stem, options = KINDS[kind]
    order = [options[i] for i in rng.permutation(len(options))]
    opts = {LETTERS[i]: o for i, o in enumerate(order)}
    gold = next(k for k, v in opts.items() if v == gold_text(kind, ctx))
    question = stem + " " + " ".join(f"{k}) {v}" for k, v in opts.items())
    return {"id": f"{scene.id}_{kind}", "scene_seed": int(seed), "scene_id": scene.id, "kind": kind,
            "question": question, "options": opts, "gold": gold}


def make_mcq_set(num_scenes: int, seed: int = 0, kinds: tuple[str, ...] = tuple(KINDS)) -> list[dict]:
    """``num_scenes`` generated scenes (seeds ``seed ..``) x ``kinds`` questions each."""
    rng = np.random.default_rng(seed)
    items = []
    for s in range(seed, seed + num_scenes):
        scene = generate_scene(s, num_proposals=1)
        ctx = ToolContext.from_scene(scene)
        items += [make_item(s, k, rng, ctx, scene) for k in kinds]
    return items
