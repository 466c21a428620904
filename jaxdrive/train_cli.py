"""``jaxdrive train sft|grpo --config configs/X.py [field=value ...]``: the training subcommands.

``add_train_subcommands(subparsers)`` registers ``train`` on the main CLI's subparsers. Overrides are dotted config
paths with Python-literal values (``steps=50 optim.lr=3e-4 finetune.mode=lora grpo.beta=0.0 workdir=/tmp/run``);
an unknown field is an error naming it.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
from typing import TYPE_CHECKING

from jaxdrive.errors import UserInputError

if TYPE_CHECKING:
    import ml_collections


def load_config(path: str) -> "ml_collections.ConfigDict":
    """``get_config()`` of a config file, or ``get_config(ARG)`` for ``FILE:ARG`` (ml_collections' config-flag
    convention, e.g. ``configs/agent_sft.py:2``); a missing file, one without ``get_config`` or an argument it refuses
    is a ``ValueError`` naming ``--config``."""
    file, arg = path, None
    if not os.path.isfile(path) and ":" in path:
        file, arg = path.rsplit(":", 1)
    if not os.path.isfile(file):
        raise UserInputError(f"--config: no such file {file}")
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(file))[0], file)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:
        raise UserInputError(f"--config {file}: {e} (training needs the [train] extra: pip install 'jaxdrive[train]')") from None
    if not hasattr(mod, "get_config"):
        raise UserInputError(f"--config {file}: defines no get_config()")
    if arg is None:
        return mod.get_config()
    try:
        return mod.get_config(arg)
    except (TypeError, ValueError) as e:
        raise UserInputError(f"--config {path}: get_config({arg!r}) of {file}: {e}") from None


def apply_overrides(cfg: "ml_collections.ConfigDict", overrides: list[str]) -> "ml_collections.ConfigDict":
    """Sets ``a.b.c=value`` overrides in place (value parsed as a Python literal, else kept as a string)."""
    for item in overrides:
        if "=" not in item:
            raise UserInputError(f"override {item!r}: expected field=value")
        key, raw = item.split("=", 1)
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        node, parts = cfg, key.split(".")
        for p in parts[:-1]:
            if p not in node:
                raise UserInputError(f"override {key!r}: no config field {p!r}")
            node = node[p]
        if parts[-1] not in node:
            raise UserInputError(f"override {key!r}: no config field {parts[-1]!r} (fields: {sorted(node.keys())})")
        current = node[parts[-1]]
        if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:  # an integer literal of hundreds of digits
                raise UserInputError(f"override {key}: expected a float, got an integer beyond the float64 range") \
                    from None
        mismatch = not isinstance(value, type(current)) or isinstance(value, bool) != isinstance(current, bool)
        if current is not None and mismatch and not hasattr(current, "keys"):  # bool is an int: not for steps
            raise UserInputError(f"override {key}={raw}: expected a {type(current).__name__} "
                             f"(current value {current!r}), got {type(value).__name__} {value!r}")
        try:
            node[parts[-1]] = value
        except TypeError as e:
            raise UserInputError(f"override {key}={raw}: {e}") from None
    return cfg


def _run(args: argparse.Namespace) -> int:
    try:
        from jaxdrive.train import jobs
    except ImportError as e:
        raise UserInputError(f"training needs the [train] extra: pip install 'jaxdrive[train]' ({e})") from None

    from jaxdrive import distributed
    from jaxdrive.train.trainer import NonFiniteLoss

    cfg = apply_overrides(load_config(args.config), args.overrides)
    try:
        _, records = (jobs.run_sft if args.job == "sft" else jobs.run_grpo)(cfg)
    except NonFiniteLoss as e:  # a failure of the run (exit 1) whose cause the message states: no traceback
        distributed.log(f"jaxdrive train {args.job}: {e}", file=sys.stderr)
        from jaxdrive.cli import EXIT_FAILURE

        return EXIT_FAILURE

    if records:
        last = records[-1]
        distributed.log(f"done: step {last['step']} loss {last['loss']:.4g}"
              + (f" reward_mean {last['reward_mean']:.3f}" if "reward_mean" in last else ""))
    return 0


def add_train_subcommands(subparsers) -> None:
    """Registers ``train sft`` and ``train grpo`` (each: ``--config`` file + overrides); sets ``func``."""
    train = subparsers.add_parser("train", help="post-train a VLM (SFT or GRPO)")
    jobs = train.add_subparsers(dest="job", required=True)
    for name, help_text in (("sft", "supervised fine-tuning on target spans"),
                            ("grpo", "GRPO with verifiable rewards")):
        p = jobs.add_parser(name, help=help_text)
        p.add_argument("--config", required=True, help="ml_collections config file, e.g. configs/%s_tiny.py; FILE:ARG calls its "
                       "get_config(ARG) (configs/agent_sft.py:2)" % name)
        p.add_argument("overrides", nargs="*", help="field=value overrides, e.g. steps=50 optim.lr=1e-3")
        p.set_defaults(func=_run)
