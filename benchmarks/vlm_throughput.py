"""Prefill, teacher-forced forward and decode throughput of the jitted Flax model vs transformers (PyTorch).

Mid-size random model (text hidden 512, 8 layers, vocab 32768; vision depth 4) and one 448x448 image (256 image
tokens, prompt 310 tokens). Rows:

* ``prefill``: time to first token, i.e. the prompt pass that fills the KV cache and yields the next token
  (``generate(max_new_tokens=1)`` on both sides; transformers computes the last position's logits only, and so do we).
* ``forward``: one teacher-forced pass returning the logits of *every* position ``[B, S, V]`` (what a full-vocabulary
  scorer pays; the judge and the trainer read chosen slots or chunked log-probs instead).
* ``decode``: greedy decoding with a static KV cache (ours) vs ``generate`` with its dynamic cache. Decode time = time
  to generate N tokens - time to generate 1 token (the prefill cancels), for N-1 steps.

Times are the best of ``--repeats`` runs after a warm-up (compile) run. ``--clock cpu`` measures process CPU time
instead of wall time: with ``--single-thread`` that is each framework's compute work, and it stays meaningful on a
machine shared with other jobs (wall time there mostly measures the scheduler). On an accelerator (JAX backend not
CPU) it also prints our achieved FLOP/s (XLA's cost analysis of the compiled pass) and MFU against the chip's dense
bf16 peak; transformers then runs wherever its torch build runs.

    python benchmarks/vlm_throughput.py --family qwen2_5_vl --batch 1 --new-tokens 64 [--single-thread --clock cpu]
    python benchmarks/vlm_throughput.py --rows prefill --repeats 5  # time to first token only
    python benchmarks/vlm_throughput.py --rows prefill --breakdown   # + vision tower vs decoder, GFLOP/s each
    python benchmarks/vlm_throughput.py --dtype bfloat16          # on a GPU / TPU host
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
#: dense bf16 peak FLOP/s per chip, matched against ``jax.devices()[0].device_kind`` (lower case, first match wins).
PEAK_BF16 = (("h200", 989e12), ("h100", 989e12), ("a100", 312e12), ("l4", 121e12), ("v6", 918e12),
             ("v5p", 459e12), ("v5", 197e12), ("v4", 275e12))


def peak_flops(device_kind: str) -> float | None:
    kind = device_kind.lower()
    return next((peak for name, peak in PEAK_BF16 if name in kind), None)


def best(fn, repeats: int, clock) -> float:
    fn()  # warm-up / compile
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


def compiled_flops(model, inputs, last_only: bool, query_index=None, query_chunk: int | None = None) -> float:
    """FLOPs of one forward pass from XLA's cost analysis (all positions' logits, or the last position's; with
    ``query_index`` the last layer runs at those positions only, as our prefill does; ``query_chunk``: the decoder's
    causal query chunk, 0 for one full score matrix as transformers' masked attention computes)."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)

    def fn(state, inputs):
        m = nnx.merge(graphdef, state)
        hidden = m.forward_hidden(inputs, query_index=query_index)[0]
        return m.logits(hidden[:, -1:] if last_only else hidden)

    return _lowered_flops(jax.jit(fn), state, inputs, query_chunk=query_chunk)


def vision_flops(model, inputs) -> float:
    """FLOPs of the vision tower alone (XLA's cost analysis)."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)
    fn = jax.jit(lambda state, i: nnx.merge(graphdef, state).visual(i.pixel_values, i.vision_meta))
    return _lowered_flops(fn, state, inputs)


def _lowered_flops(fn, *args, query_chunk: int | None = None) -> float:
    """FLOPs of ``fn(*args)`` with the vision heads vectorised (XLA's cost analysis counts a loop's body once)."""
    from jaxdrive.models import decoder, vision_common

    saved = vision_common.SEQUENTIAL_HEADS, decoder.QUERY_CHUNK
    vision_common.SEQUENTIAL_HEADS = False
    decoder.QUERY_CHUNK = saved[1] if query_chunk is None else query_chunk
    try:
        return _flops(fn.lower(*args).compile())
    finally:
        vision_common.SEQUENTIAL_HEADS, decoder.QUERY_CHUNK = saved


def _flops(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", 0.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="qwen2_5_vl", choices=sorted(VISION), help="model family (default: qwen2_5_vl)")
    ap.add_argument("--batch", type=int, default=1, help="prompts per batch (default: 1)")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens generated in the decode row (default: 64)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per row after the warm-up; the best is "
                    "printed (default: 3)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="our compute/parameter dtype (transformers stays float32 on CPU)")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="wall: perf_counter; cpu: process CPU time (all threads)")
    ap.add_argument("--single-thread", action="store_true",
                    help="one compute thread for both frameworks (steadier figures on a shared machine)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the vision tower alone on both sides and split the prefill into vision and the "
                         "rest (decoder + last logits), with each part's FLOPs and achieved GFLOP/s")
    ap.add_argument("--rows", default="prefill,forward,decode",
                    help="comma-separated subset of prefill,forward,decode to measure (decode needs prefill)")
    args = ap.parse_args()
    rows = set(args.rows.split(","))
    if not rows or rows - {"prefill", "forward", "decode"}:
        ap.error(f"--rows: expected a comma-separated subset of prefill,forward,decode, got {args.rows!r}")
    if "decode" in rows:
        rows.add("prefill")
    if args.single_thread:  # must precede the first jax / torch import
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
    import jax
    import jax.numpy as jnp
    import torch

    from jaxdrive.models import from_pretrained
    from jaxdrive.models import testing as T
    from jaxdrive.models.generate import SamplingConfig, generate

    if args.single_thread:
        torch.set_num_threads(1)
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    tmp = tempfile.mkdtemp()
    hf = T.save_tiny_model(args.family, tmp, text=dict(TEXT, **TEXT_EXTRA[args.family]), vision=VISION[args.family])
    model = from_pretrained(tmp, dtype=getattr(jnp, args.dtype))
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
        return best(lambda: np.asarray(generate(model, ids, None, pv, grid, config=config).tokens), args.repeats,
                    clock)

    def hf_gen(n):
        return best(lambda: hf.generate(**tkw, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0),
                    args.repeats, clock)

    nan = float("nan")
    ours_forward = best(lambda: np.asarray(model(ids, None, pv, grid)), args.repeats, clock) if "forward" in rows else nan
    ours_prefill = ours_gen(1) if "prefill" in rows else nan
    ours_decode = ours_gen(args.new_tokens) - ours_prefill if "decode" in rows else nan  # same prefill: it cancels
    with torch.no_grad():
        hf_forward = best(lambda: hf(**tkw), args.repeats, clock) if "forward" in rows else nan
        hf_prefill = hf_gen(1) if "prefill" in rows else nan
        hf_decode = hf_gen(args.new_tokens) - hf_prefill if "decode" in rows else nan

    breakdown = None
    if args.breakdown:  # vision tower alone, both sides; the rest of the prefill by difference
        from jaxdrive.models.vlm import model_jit

        inputs = model.prepare_inputs(ids, None, pv, grid)
        vision = model_jit(lambda tower, i: tower(i.pixel_values, i.vision_meta))
        ours_vision = best(lambda: jax.block_until_ready(vision(model.visual, inputs)), args.repeats, clock)
        with torch.no_grad():
            hf_vision = best(lambda: hf.model.visual(tkw["pixel_values"], grid_thw=tkw["image_grid_thw"]),
                             args.repeats, clock)
        last = jnp.full((ids.shape[0], 1), ids.shape[1] - 1)
        v_flops = vision_flops(model, inputs)
        # ours runs the last layer at the last position only and skips causal score blocks; transformers runs the
        # last layer everywhere and computes the full masked score matrix
        ours_total = compiled_flops(model, inputs, True, query_index=last)
        hf_total = compiled_flops(model, inputs, True, query_chunk=0)
        breakdown = (ours_vision, hf_vision, v_flops, ours_total - v_flops, hf_total - v_flops)

    backend = jax.default_backend()
    print(f"{args.family}: text hidden 512 x 8 layers, vision depth 4, one 448x448 image ({int(g1.prod()) // 4} "
          f"image tokens), prompt {ids.shape[1]} tokens, batch {args.batch}, {args.new_tokens} new tokens, "
          f"ours {args.dtype} on {backend} ({jax.devices()[0].device_kind}), transformers float32 on torch "
          f"({torch.get_num_threads()} threads), {args.clock} clock")
    print(f"{'':10s}{'jaxdrive':>14s}{'transformers':>16s}{'ratio':>9s}")
    for name, ours, theirs, n in (("prefill", ours_prefill, hf_prefill, n_prompt),
                                  ("forward", ours_forward, hf_forward, n_prompt)):
        if name not in rows:
            continue
        print(f"{name:10s}{n / ours:>10.0f} t/s{n / theirs:>12.0f} t/s{theirs / ours:>8.2f}x")
    if "decode" not in rows:
        pass
    elif min(ours_decode, hf_decode) > 0:
        print(f"{'decode':10s}{n_new / ours_decode:>10.1f} t/s{n_new / hf_decode:>12.1f} t/s"
              f"{hf_decode / ours_decode:>8.2f}x")
    else:  # N tokens took less than 1 token: the machine's noise exceeds the decode time
        print(f"{'decode':10s} n/a (timing noise larger than {args.new_tokens - 1} decode steps; raise --new-tokens)")
    if breakdown is not None and "prefill" in rows:
        ours_vision, hf_vision, v_flops, ours_rest_flops, hf_rest_flops = breakdown
        print(f"{'prefill part':22s}{'jaxdrive':>22s}{'transformers':>22s}{'ratio':>8s}")
        for name, ours, theirs, f_ours, f_hf in (
                ("vision tower", ours_vision, hf_vision, v_flops, v_flops),
                ("decoder + logits", ours_prefill - ours_vision, hf_prefill - hf_vision, ours_rest_flops, hf_rest_flops)):
            print(f"{name:22s}{ours * 1e3:8.1f} ms {f_ours / ours / 1e9:6.1f} GF/s"
                  f"{theirs * 1e3:9.1f} ms {f_hf / theirs / 1e9:6.1f} GF/s{theirs / ours:7.2f}x")
        print(f"(FLOPs from XLA's cost analysis: vision {v_flops / 1e9:.2f} G, decoder + logits {ours_rest_flops / 1e9:.2f} G "
              f"ours / {hf_rest_flops / 1e9:.2f} G transformers' all-position last layer and full score matrices)")
    if backend != "cpu":
        inputs = model.prepare_inputs(ids, None, pv, grid)
        peak = peak_flops(jax.devices()[0].device_kind)
        for name, seconds, last_only in (("prefill", ours_prefill, True), ("forward", ours_forward, False)):
            if name not in rows:
                continue
            flops = compiled_flops(model, inputs, last_only)
            mfu = f", MFU {100 * flops / seconds / peak:.2f}% of dense bf16 peak" if peak else ""
            print(f"{name}: {flops / 1e9:.1f} GFLOP in {seconds * 1e3:.2f} ms = {flops / seconds / 1e12:.2f} "
                  f"TFLOP/s{mfu}")


if __name__ == "__main__":
    main()
