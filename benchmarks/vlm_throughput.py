"""Prefill and decode throughput of the jitted Flax model vs transformers (PyTorch) on the same CPU.

Mid-size random model (text hidden 512, 8 layers; vision depth 4) and one 448x448 image; greedy decoding with a
static KV cache (ours) vs ``generate`` with its dynamic cache (transformers). Prints tokens/s and ratios; times are
the best of ``--repeats`` runs after a warm-up (compile) run. Decode time = time to generate N tokens - time to
generate 1 token (the prefill cancels), for N-1 decode steps.

    python benchmarks/vlm_throughput.py --family qwen2_5_vl --batch 1 --new-tokens 64 [--single-thread]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

TEXT = dict(vocab_size=32768, hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
            num_key_value_heads=2, eos_token_id=32767, pad_token_id=0)
VISION = {
    "qwen2_5_vl": dict(depth=4, hidden_size=256, intermediate_size=512, num_heads=4, out_hidden_size=512,
                       window_size=112, fullatt_block_indexes=[3]),
    "qwen3_vl": dict(depth=4, hidden_size=256, intermediate_size=512, num_heads=4, out_hidden_size=512,
                     num_position_embeddings=2304, deepstack_visual_indexes=[1, 2]),
}
TEXT_EXTRA = {
    "qwen2_5_vl": dict(rope_parameters=dict(rope_type="default", mrope_section=[8, 12, 12], rope_theta=1e6)),
    "qwen3_vl": dict(head_dim=64, rope_parameters=dict(rope_type="default", mrope_section=[12, 10, 10],
                                                      mrope_interleaved=True, rope_theta=5e6)),
}


def best(fn, repeats: int) -> float:
    fn()  # warm-up / compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="qwen2_5_vl", choices=sorted(VISION))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--single-thread", action="store_true",
                    help="one compute thread for both frameworks (steadier figures on a shared machine)")
    args = ap.parse_args()
    if args.single_thread:  # must precede the first jax / torch import
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import torch

    from jaxdrive.models import from_pretrained
    from jaxdrive.models import testing as T
    from jaxdrive.models.generate import SamplingConfig, generate

    if args.single_thread:
        torch.set_num_threads(1)

    tmp = tempfile.mkdtemp()
    hf = T.save_tiny_model(args.family, tmp, text=dict(TEXT, **TEXT_EXTRA[args.family]), vision=VISION[args.family])
    model = from_pretrained(tmp)
    cfg = hf.config
    pv1, g1 = T.image_inputs(cfg, [(448, 448)])
    row = T.prompt_with_images(cfg, g1, list(range(10, 30)), [], list(range(30, 62)))
    ids = np.asarray([row] * args.batch)
    pv = np.concatenate([pv1] * args.batch)
    grid = np.concatenate([g1] * args.batch)
    mm = torch.tensor(T.mm_token_type_ids(cfg, ids))
    tkw = dict(input_ids=torch.tensor(ids), attention_mask=torch.ones(ids.shape, dtype=torch.long),
               pixel_values=torch.tensor(pv), image_grid_thw=torch.tensor(grid), mm_token_type_ids=mm)
    n_prompt = ids.size
    n_new = (args.new_tokens - 1) * args.batch

    def ours_gen(n):
        config = SamplingConfig(max_new_tokens=n, greedy=True)
        return best(lambda: np.asarray(generate(model, ids, None, pv, grid, config=config).tokens), args.repeats)

    def hf_gen(n):
        return best(lambda: hf.generate(**tkw, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0),
                    args.repeats)

    ours_prefill = best(lambda: np.asarray(model(ids, None, pv, grid)), args.repeats)
    ours_decode = max(ours_gen(args.new_tokens) - ours_gen(1), 1e-9)  # same prefill in both: it cancels
    with torch.no_grad():
        hf_prefill = best(lambda: hf(**tkw), args.repeats)
        hf_decode = max(hf_gen(args.new_tokens) - hf_gen(1), 1e-9)

    print(f"{args.family}: text hidden 512 x 8 layers, vision depth 4, one 448x448 image ({int(g1.prod()) // 4} "
          f"image tokens), prompt {ids.shape[1]} tokens, batch {args.batch}, {args.new_tokens} new tokens, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'':10s}{'jaxdrive':>14s}{'transformers':>16s}{'ratio':>9s}")
    print(f"{'prefill':10s}{n_prompt / ours_prefill:>10.0f} t/s{n_prompt / hf_prefill:>12.0f} t/s"
          f"{hf_prefill / ours_prefill:>8.2f}x")
    print(f"{'decode':10s}{n_new / ours_decode:>10.1f} t/s{n_new / hf_decode:>12.1f} t/s"
          f"{hf_decode / ours_decode:>8.2f}x")


if __name__ == "__main__":
    main()
