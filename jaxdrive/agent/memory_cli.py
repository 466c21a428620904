"""``jaxdrive memory build | query | consolidate``: the long-term memory store from the command line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from jaxdrive.errors import UserInputError


def add_memory_subcommands(sub) -> None:
    p = sub.add_parser("memory", help="long-term memory store: build, query, consolidate")
    msub = p.add_subparsers(dest="memory_command", required=True)
    b = msub.add_parser("build", help="embed entries (JSONL of MemoryEntry dicts) with all-MiniLM-L6-v2 into a store")
    b.add_argument("--entries", type=Path, required=True, help="JSONL file, one entry per line")
    b.add_argument("--out", type=Path, required=True, help="store directory (a new generation is committed)")
    b.set_defaults(func=_run_build)
    q = msub.add_parser("query", help="top-K entries (inference-safe view) for a question and short-term memory")
    q.add_argument("--store", type=Path, required=True, help="store directory (`jaxdrive memory build --out`)")
    q.add_argument("--question", required=True, help="the question text the entries are retrieved for")
    q.add_argument("--stm", type=Path, help="text file with the serialised short-term memory")
    q.add_argument("--scene-id", default="", help="exclude entries from this scene")
    q.add_argument("-k", type=int, help="number of entries returned (default: jaxdrive.agent.memory.TOP_K, 4, or "
                   "every entry of a smaller store)")
    q.add_argument("--lam", type=float, default=None, help="utility weight (default: jaxdrive.agent.memory.LAMBDA)")
    q.add_argument("--devices", type=int, help="shard the entries over this many local devices")
    q.set_defaults(func=_run_query)
    c = msub.add_parser("consolidate", help="offline consolidation (Algorithm 1) of verified trajectories")
    c.add_argument("--store", type=Path, required=True, help="store directory; the consolidated entries are "
                   "committed to it as a new generation")
    c.add_argument("--trajectories", type=Path, required=True,
                   help="JSONL trajectories written by `jaxdrive agent run`")
    c.add_argument("--eta", type=float, default=0.1, help="utility-update rate (Eq. 6)")
    c.set_defaults(func=_run_consolidate)


def _not_a_file(path: Path) -> str:
    """Why an input file flag's ``path`` cannot be read as one."""
    return "is a directory; expected a file" if path.is_dir() else "no such file"


def _run_build(args) -> int:
    from jaxdrive.agent.embed import minilm
    from jaxdrive.agent.store import build, current_generation, read_entries_jsonl, save
    from jaxdrive.output_paths import output_dir

    if not args.entries.is_file():
        raise UserInputError(f"--entries {args.entries}: {_not_a_file(args.entries)}")
    output_dir("--out", args.out)  # a store is a directory
    previous = current_generation(args.out) if args.out.is_dir() else None
    try:
        entries = read_entries_jsonl(args.entries)
    except ValueError as e:  # each message starts with the file's path
        raise UserInputError(f"--entries {e}") from None
    if not entries:
        raise UserInputError(f"--entries {args.entries}: no entries (a store needs at least one to retrieve from)")
    gen = save(build(entries, minilm()), args.out)
    if previous:  # consolidation's utilities and added entries are replaced too: say so, and where they still are
        print(f"jaxdrive memory build: replaced the store in {args.out}; its previous generation {previous} (with "
              f"what consolidation added) is kept beside {gen.name} until the store's next write", file=sys.stderr)
    print(f"wrote {len(entries)} entries to {gen}")
    return 0


def _check_query_flags(args) -> None:
    """``--question``, ``--lam`` and ``--devices`` of ``memory query``, before the store and the embedder load."""
    import jax
    import numpy as np

    if not args.question.strip():
        raise UserInputError("--question: expected a non-empty question text")
    if args.lam is not None and not 0 <= args.lam <= np.finfo(np.float32).max:  # NaN fails; retrieval uses float32
        raise UserInputError(f"--lam: expected a finite utility weight >= 0, got {args.lam}")
    if args.devices is not None and not 1 <= args.devices <= len(jax.devices()):
        raise UserInputError(f"--devices: expected 1..{len(jax.devices())} (available devices), got {args.devices}")


def _run_query(args) -> int:
    import numpy as np

    from jaxdrive.agent import memory
    from jaxdrive.agent.embed import check_store_width, compose_query, minilm
    from jaxdrive.agent.store import load

    if args.stm is not None and not args.stm.is_file():
        raise UserInputError(f"--stm {args.stm}: {_not_a_file(args.stm)}")
    _check_query_flags(args)
    store = load(args.store)
    check_store_width(store, args.store)
    k = min(memory.TOP_K, len(store.entries)) if args.k is None else args.k
    if not 1 <= k <= len(store.entries):
        raise UserInputError(f"-k: expected 1..{len(store.entries)} (entries in the store), got {k}")
    try:
        stm = args.stm.read_text(encoding="utf-8") if args.stm else ""
    except UnicodeDecodeError as e:
        raise UserInputError(f"--stm {args.stm}: not UTF-8 text ({e})") from None
    q = minilm()([compose_query(args.question, stm)])
    lam = memory.LAMBDA if args.lam is None else args.lam
    mesh = memory.entry_mesh(args.devices) if args.devices is not None else None
    scores, idx = memory.retrieve(q, store.embeddings, store.utility, k=k, lam=lam,
                                  exclude=store.exclusion([args.scene_id]), mesh=mesh)
    for s, i in zip(np.asarray(scores)[0], np.asarray(idx)[0]):
        if i >= 0:
            print(json.dumps({"score": round(float(s), 5), **store.entries[int(i)].safe_view()}))
    return 0


def _run_consolidate(args) -> int:
    import dataclasses

    from jaxdrive.agent.consolidate import ConsolidationConfig, check_verified_fields, consolidate
    from jaxdrive.agent.embed import check_store_width, minilm
    from jaxdrive.agent.loop import read_trajectories
    from jaxdrive.agent.store import current_generation, load, save
    from jaxdrive.datasets.base import require

    cfg = ConsolidationConfig(eta=args.eta)
    store = load(args.store)
    check_store_width(store, args.store)

    def check(traj: dict, where: str) -> None:
        """The field types, then a ``termination``, which every loop trajectory has: another JSONL file (e.g.
        `agent convert`'s records) was taken as trajectories failing verification, their ids recorded."""
        check_verified_fields(traj, where)
        require(traj, where, {"termination": str})

    trajs = read_trajectories(args.trajectories, check=check)
    out, rep = consolidate(store, trajs, minilm(), cfg=cfg)
    if rep.skipped_already_consolidated == rep.seen:  # a re-run: nothing new, so no new generation (it would replace
        gen = args.store / current_generation(args.store)  # the backup, the generation before the first run, by a copy)
    else:
        gen = save(out, args.store)
    summary = {k: v for k, v in dataclasses.asdict(rep).items() if k not in ("reinforced", "added")}
    summary.update(reinforced=len(rep.reinforced), added=len(rep.added), entries=len(out.entries), generation=gen.name)
    print(json.dumps(summary))
    return 0
