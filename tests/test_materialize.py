"""``jaxdrive.materialize``: every bit unchanged, and on CPU a value read by several fusions is computed once."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdrive.materialize import materialize


def test_every_bit_unchanged_under_jit_and_vmap():
    x = np.array([[0.0, -0.0, 1.5, np.nan], [np.inf, -np.inf, 1e-45, -3.25]], np.float32)
    for fn in (jax.jit(materialize), jax.jit(jax.vmap(materialize))):
        got = np.asarray(fn(x))
        np.testing.assert_array_equal(got.view(np.uint32), x.view(np.uint32))
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(jax.jit(materialize)(ints)), ints)


def _cosines_in_fusions(fn, *args) -> int:
    """cos instructions in the compiled CPU program, counted once per fused computation that evaluates one."""
    return len(re.findall(r" cosine\(", jax.jit(fn).lower(*args).compile().as_text()))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the XLA:CPU fusion behaviour this guards")
def test_a_materialized_cosine_is_evaluated_by_one_fusion():
    """Four box coordinates reduced separately read one heading's cos: left to XLA:CPU (jaxlib 0.10: also behind an
    optimization barrier, removed before fusion), each coordinate's fusion evaluates it again; materialized, one
    fusion does (fails if ``materialize`` became a no-op while XLA still duplicates the cos)."""
    def boxes(heading, x, keep):
        c = keep(jnp.cos(heading))
        coords = [x + 2.0 * c, x - 2.0 * c, jnp.abs(3.0 * c) + x, x * c]
        return jnp.stack([v.reshape(-1, 8).min(-1) if i % 2 else v.reshape(-1, 8).max(-1)
                          for i, v in enumerate(coords)])

    heading, x = jnp.linspace(0.0, 3.0, 4096), jnp.linspace(-1.0, 1.0, 4096)
    fused = _cosines_in_fusions(lambda h, x: boxes(h, x, lambda v: v), heading, x)
    barrier = _cosines_in_fusions(lambda h, x: boxes(h, x, jax.lax.optimization_barrier), heading, x)
    once = _cosines_in_fusions(lambda h, x: boxes(h, x, materialize), heading, x)
    assert once == 1 and fused >= once, (once, fused, barrier)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda h, x: boxes(h, x, materialize))(heading, x)),
                                  np.asarray(jax.jit(lambda h, x: boxes(h, x, lambda v: v))(heading, x)))
