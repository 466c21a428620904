"""``jaxdrive data build KIND SRC_DIR --out DIR``: a local source directory -> a TFDS dataset (array_record)."""
from __future__ import annotations

from pathlib import Path


def add_data_subcommands(sub) -> None:
    from jaxdrive.datasets import BUILDERS

    data = sub.add_parser("data", help="build TFDS datasets (array_record, read with grain) from local directories")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    p = data_sub.add_parser("build", help="build one dataset from a local directory (layouts: docs/datasets.md)")
    p.add_argument("kind", choices=sorted(BUILDERS), help="source layout")
    p.add_argument("src", type=Path, help="source directory")
    p.add_argument("--out", type=Path, required=True, help="dataset directory to create")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_run_build)


def _run_build(args) -> int:
    from jaxdrive.datasets import get_builder

    meta = get_builder(args.kind).build(args.src, args.out, progress=not args.no_progress)
    counts = ", ".join(f"{s}: {v['examples']}" for s, v in meta["splits"].items())
    print(f"wrote {args.kind} dataset to {args.out} ({counts})")
    return 0
