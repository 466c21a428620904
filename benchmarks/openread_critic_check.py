"""How well a trained tiny OpenREAD critic separates matching from non-matching knowledge answers on held-out pairs
(synthetic scenes of another seed than its training set): mean p(yes) per class, accuracy at 0.5, AUC.

    python benchmarks/openread_critic_check.py CRITIC_DIR [--scenes 60 --seed 1000 --max-len 96]
"""
from __future__ import annotations

import argparse
import sys

import jax.numpy as jnp


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("critic", help="exported critic directory (configs/openread_critic_tiny.py export_dir)")
    p.add_argument("--scenes", type=int, default=60, help="held-out synthetic scenes (default: 60)")
    p.add_argument("--seed", type=int, default=1000, help="seed of the held-out scenes and pairs, not the training "
                   "set's (default: 1000)")
    p.add_argument("--max-len", type=int, default=96, help="the critic's prompt length (as trained)")
    args = p.parse_args(argv)
    from jaxdrive.data.openread_cot import KNOWLEDGE, critic_pairs, synthetic_records
    from jaxdrive.eval.critic import QwenCritic, pair_separation

    critic = QwenCritic.from_pretrained(args.critic, dtype=jnp.float32, max_len=args.max_len, batch_size=32)
    pairs = critic_pairs(synthetic_records(args.scenes, args.seed, (KNOWLEDGE,)), args.seed)
    out = pair_separation(critic, pairs)
    print(f"held-out pairs: {out['pairs']} (seed {args.seed}); p(yes) match {out['p_yes_match']:.3f}, "
          f"mismatch {out['p_yes_mismatch']:.3f}; accuracy {out['accuracy']:.3f}; AUC {out['auc']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
