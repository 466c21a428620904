"""Peak temporary memory and time: full [B, S, V] log_softmax vs jaxdrive's chunked token_logprobs.

Memory is XLA's compiled ``memory_analysis().temp_size_in_bytes`` (scratch beyond arguments and outputs), for the
forward pass and for forward+backward (gradients w.r.t. hidden and lm_head, what the trainer needs). Time is the median
wall time of ``--repeats`` runs after one warm-up.

    python benchmarks/logprobs_memory.py                      # B=2, S=1024, H=512, V=151936
    python benchmarks/logprobs_memory.py --S 256 --repeats 1  # quicker
"""
from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp

from jaxdrive.models.logprobs import token_logprobs


def full_logprobs(hidden, w, targets):
    logits = jnp.einsum("bsh,hv->bsv", hidden, w, preferred_element_type=jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def _grad(fn):
    return jax.grad(lambda h, w, t: fn(h, w, t).sum(), argnums=(0, 1))


def _measure(fn, args, repeats: int) -> tuple[float, float]:
    compiled = jax.jit(fn).lower(*args).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes / 2**20
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return temp, sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--B", type=int, default=2, help="batch size (default: 2)")
    p.add_argument("--S", type=int, default=1024, help="sequence length (default: 1024)")
    p.add_argument("--H", type=int, default=512, help="hidden size (default: 512)")
    p.add_argument("--V", type=int, default=151936, help="vocabulary size (default: 151936, Qwen's)")
    p.add_argument("--seq-chunk", type=int, default=512, help="positions per chunk of token_logprobs (default: 512)")
    p.add_argument("--vocab-chunk", type=int, default=16384,
                   help="vocabulary entries per chunk of token_logprobs (default: 16384)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs after the warm-up; the median is printed "
                   "(default: 3)")
    a = p.parse_args()

    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    hidden = jax.random.normal(k1, (a.B, a.S, a.H), jnp.float32)
    w = jax.random.normal(k2, (a.H, a.V), jnp.float32) * a.H ** -0.5
    targets = jax.random.randint(k3, (a.B, a.S), 0, a.V)
    args = (hidden, w, targets)
    chunked = functools.partial(token_logprobs, seq_chunk=a.seq_chunk, vocab_chunk=a.vocab_chunk)

    err = float(jnp.abs(jax.jit(full_logprobs)(*args) - chunked(*args)).max())
    print(f"devices: {jax.devices()[0].platform} x{jax.device_count()}  B={a.B} S={a.S} H={a.H} V={a.V}  "
          f"seq_chunk={a.seq_chunk} vocab_chunk={a.vocab_chunk}  full [B,S,V] f32 logits = "
          f"{a.B * a.S * a.V * 4 / 2**20:.0f} MiB  max|dlogp| = {err:.2e}")
    print(f"{'pass':<18}{'full temp MiB':>14}{'chunked MiB':>13}{'mem ratio':>11}{'full ms':>10}{'chunked ms':>12}"
          f"{'time ratio':>12}")
    for name, f_full, f_chunk in [("forward", full_logprobs, chunked),
                                  ("forward+backward", _grad(full_logprobs), _grad(chunked))]:
        m_full, t_full = _measure(f_full, args, a.repeats)
        m_chunk, t_chunk = _measure(f_chunk, args, a.repeats)
        print(f"{name:<18}{m_full:>14.1f}{m_chunk:>13.1f}{m_full / max(m_chunk, 1e-9):>10.1f}x"
              f"{t_full:>10.0f}{t_chunk:>12.0f}{t_chunk / t_full:>11.2f}x")


if __name__ == "__main__":
    main()
