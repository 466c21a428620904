"""Greedy and sampled reward of OpenREAD tiny policies, split by task and by reward part, on the GRPO preset's fixed
eval prompts (``eval_data``) and on a subset of its training prompts (``data``): which part of R a GRPO run moved,
and whether greedy decoding moved the same way as sampling at the training temperature.

    python benchmarks/openread_grpo_parts.py COLD_START_DIR GRPO_EXPORT_DIR --critic CRITIC_DIR \\
        [--train-prompts 32 --samples 4 --seed 0 --show 1]

Each model is read through the same code as ``jaxdrive train grpo --config configs/openread_grpo_tiny.py`` (its
rewards, decoder, prompt and completion lengths, temperature); sampled rows use ``--samples`` draws per prompt.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "openread_grpo_tiny.py"


def _table(name: str, rows: list[dict], total, parts: dict) -> None:
    tasks = np.asarray([r["task"] for r in rows])
    for task in sorted(set(tasks)):
        m = tasks == task
        cells = " ".join(f"{k} {np.nanmean(np.asarray(v)[m]):.3f}" for k, v in sorted(parts.items()))
        print(f"  {name:16s} {task:10s} n={int(m.sum()):3d}  R {np.mean(np.asarray(total)[m]):.3f}  ({cells})")
    print(f"  {name:16s} {'all':10s} n={len(rows):3d}  R {np.mean(total):.3f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="exported policy directories")
    p.add_argument("--critic", required=True, help="the trained critic directory")
    p.add_argument("--train-prompts", type=int, default=32, help="training prompts scored besides the eval prompts "
                   "(default: 32)")
    p.add_argument("--samples", type=int, default=4, help="sampled answers per prompt at the training temperature "
                   "(default: 4)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--show", type=int, default=1, help="greedy answers printed per task of the eval prompts")
    args = p.parse_args(argv)

    import importlib.util

    import jax

    from jaxdrive.train import optim
    from jaxdrive.train.grpo_trainer import grpo_loss_fn, grpo_summary
    from jaxdrive.train.jobs import (build_decoder, build_examples, build_model, build_rewards, load_tokenizer,
                                     prepare_finetuning, token_ids)
    from jaxdrive.train.registry import ROLLOUTS
    from jaxdrive.train.rewards import combine_rewards
    from jaxdrive.train.trainer import Trainer

    spec = importlib.util.spec_from_file_location("openread_grpo_tiny", CONFIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rewards = None
    for path in args.models:
        cfg = mod.get_config()
        cfg.model.path = path
        cfg.finetune.mode = "full"
        cfg.rewards.openread_knowledge.critic.path = args.critic
        model = build_model(cfg.model)
        trainable = prepare_finetuning(model, cfg.finetune)
        tokenizer = load_tokenizer(cfg.model)
        g = token_ids(cfg.grpo, tokenizer)
        train = build_examples(cfg.data, tokenizer)
        pick = np.random.default_rng(args.seed).choice(len(train), min(args.train_prompts, len(train)), replace=False)
        sets = {"eval": build_examples(cfg.eval_data, tokenizer), "train subset": [train[i] for i in sorted(pick)]}
        rewards = rewards or build_rewards(cfg.rewards)
        rollouts = ROLLOUTS.get("single_turn")(train, rewards, build_decoder(cfg.decoder, tokenizer), g)
        trainer = Trainer(model, loss_fn=grpo_loss_fn(g), tx=optim.make_optimizer(cfg.optim, 1), trainable=trainable,
                          summary=grpo_summary, progress=False, seed=cfg.seed)
        print(f"== {path}")
        for set_name, rows in sets.items():
            for mode in ("greedy", "sampled"):
                rr = rows if mode == "greedy" else [r for r in rows for _ in range(args.samples)]
                key = None if mode == "greedy" else jax.random.key(args.seed)
                tokens, cmask = rollouts.generate(trainer, rr, key)
                texts = [rollouts.decode(t, m) for t, m in zip(tokens, cmask)]
                total, _, parts = combine_rewards(rewards, texts, rr, tokens=tokens, mask=cmask)
                _table(f"{set_name} {mode}", rr, total, parts)
                if set_name == "eval" and mode == "greedy" and args.show:
                    for task in sorted({r["task"] for r in rr}):
                        for i in [i for i, r in enumerate(rr) if r["task"] == task][:args.show]:
                            print(f"    [{task}] reference: {rr[i]['reference']!r}")
                            print(f"    [{task}] greedy:    {texts[i]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
