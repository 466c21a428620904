"""``jaxdrive agent run | convert``: run the reasoning loop on the synthetic MCQ set (scripted policy), write JSONL
trajectories; turn trajectories into phase-1 / phase-2 SFT records."""
from __future__ import annotations

import json
from pathlib import Path

from jaxdrive.errors import UserInputError


def add_agent_subcommands(sub) -> None:
    p = sub.add_parser("agent", help="memory-tool reasoning agent: run episodes, convert trajectories to SFT records")
    asub = p.add_subparsers(dest="agent_command", required=True)
    r = asub.add_parser("run", help="answer the synthetic MCQ set through the Think-Action-Observation-Update loop")
    r.add_argument("--scenes", type=int, default=8, help="generated scenes (5 questions each)")
    r.add_argument("--seed", type=int, default=0, help="seed of the generated scenes and questions")
    r.add_argument("--memory", type=Path, help="long-term memory store to retrieve from (top-4, same scene excluded)")
    r.add_argument("--out", type=Path, required=True, help="trajectories JSONL")
    r.set_defaults(func=_run)
    c = asub.add_parser("convert", help="stepwise conversion of verified trajectories into SFT records")
    c.add_argument("--trajectories", type=Path, required=True,
                   help="JSONL trajectories written by `jaxdrive agent run`")
    c.add_argument("--phase", type=int, choices=[1, 2], required=True,
                   help="1: tool-decision records (the action JSON is the target); 2: observation-grounded "
                        "reasoning (full replies, answer turn included); paper Sec. 3.4")
    c.add_argument("--out", type=Path, required=True, help="records JSONL")
    c.set_defaults(func=_convert)


def _run(args) -> int:
    from tqdm import tqdm

    from jaxdrive.agent import stm
    from jaxdrive.agent.loop import run_episode, write_jsonl
    from jaxdrive.agent.mcq import make_mcq_set
    from jaxdrive.agent.policy import ScriptedPolicy
    from jaxdrive.agent.tools import ToolContext, default_registry
    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.output_paths import output_file

    if args.scenes < 1:
        raise UserInputError(f"--scenes: expected >= 1, got {args.scenes}")
    if args.seed < 0:  # numpy's "expected non-negative integer" before, naming no flag
        raise UserInputError(f"--seed: expected >= 0, got {args.seed}")
    output_file("--out", args.out)
    retriever = _retriever(args.memory) if args.memory else None
    registry, policy = default_registry(), ScriptedPolicy()
    trajs, ctxs = [], {}
    for item in tqdm(make_mcq_set(args.scenes, args.seed), desc="episodes"):
        if item["scene_seed"] not in ctxs:
            ctxs = {item["scene_seed"]: ToolContext.from_scene(generate_scene(item["scene_seed"], num_proposals=1))}
        ctx = ctxs[item["scene_seed"]]
        memory_text = stm.build(ctx).serialise()
        mem, ids = retriever(item, memory_text) if retriever else ("", [])
        trajs.append(run_episode(policy, ctx, registry, item, stm=memory_text, memory=mem, retrieved=ids))
    write_jsonl(args.out, trajs)
    acc = sum(t["correct"] for t in trajs) / len(trajs)
    print(json.dumps({"episodes": len(trajs), "accuracy": round(acc, 4), "out": str(args.out)}))
    return 0


def _retriever(path: Path):
    import numpy as np

    from jaxdrive.agent import memory
    from jaxdrive.agent.embed import check_store_width, compose_query, minilm
    from jaxdrive.agent.store import format_entries, load

    store = load(path)
    check_store_width(store, path)
    embed = minilm()
    k = min(memory.TOP_K, len(store.entries))

    def fn(item, stm_text):
        q = embed([compose_query(item["question"], stm_text)])
        _, idx = memory.retrieve(q, store.embeddings, store.utility, k=k, exclude=store.exclusion([item["scene_id"]]))
        entries = [store.entries[int(i)] for i in np.asarray(idx)[0] if i >= 0]
        return format_entries(entries), [e.id for e in entries]

    return fn


def _convert(args) -> int:
    from jaxdrive.agent.consolidate import verify
    from jaxdrive.agent.loop import read_trajectories, write_jsonl
    from jaxdrive.agent.sft_data import check_sft_fields, convert
    from jaxdrive.output_paths import output_file

    output_file("--out", args.out)
    if args.out.resolve() == args.trajectories.resolve():  # the records replaced the trajectories they came from
        raise UserInputError(f"--out {args.out}: is the --trajectories file; write the records to another file")
    trajs = read_trajectories(args.trajectories, {"messages": list}, check=check_sft_fields)
    records = convert(trajs, args.phase)
    if not records:  # before: an empty records file, exit 0
        verified = sum(map(verify, trajs))
        why = (f"none of its {len(trajs)} trajectories is verified (a correct answer reached by finishing, every tool "
               "call valid: consolidate.verify)" if not verified else
               f"its {verified} verified trajectories have no turns in their messages")
        raise UserInputError(f"--trajectories {args.trajectories}: {why}; no records")
    write_jsonl(args.out, records)
    print(json.dumps({"records": len(records), "phase": args.phase, "out": str(args.out)}))
    return 0
