"""Long-term memory retrieval (paper Eq. 4, appendix A.2): score = cosine(query, entry) + lambda * normalised utility,
top-K with ``lax.top_k``, an exclusion mask (same-scene entries), optionally sharded over devices.

Shapes: Q queries, N entries, D embedding dims (384 for all-MiniLM-L6-v2), K results.

* ``retrieve(query, entries, utility, k=, lam=, exclude=)`` is the interface contract: unit-norm embeddings in, scores
  and indices [Q, K] out, sorted by descending score. With ``mesh=`` it runs sharded.
* ``MemoryIndex`` keeps the embedding matrix resident on the devices, sharded along N (per-device top-K, then one
  all-gather of the devices x K candidates and a global top-K), for stores of 10^6+ entries queried many times.

Utility normalisation (the paper's ``w-bar``): min-max over the whole store, ``(w - min w) / (max w - min w)`` in
[0, 1]; 0 for every entry when all utilities are equal. Excluded entries (and the padding of a sharded store) score
-inf; when fewer than K entries are eligible the missing slots come back with score -inf and index -1.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError

LAMBDA = 0.1  # weight of the normalised utility (the paper does not publish its value)
TOP_K = 4  # the paper retrieves the top 4 entries
_AXIS = "data"


def normalise_utility(utility: Float[Array, "N"], valid: Bool[Array, "N"] | None = None) -> Float[Array, "N"]:
    """Min-max normalised utility in [0, 1] over the ``valid`` entries (all when None); 0 when they are all equal."""
    u = jnp.asarray(utility, jnp.float32)
    v = jnp.ones(u.shape, bool) if valid is None else valid
    lo = jnp.min(jnp.where(v, u, jnp.inf))
    hi = jnp.max(jnp.where(v, u, -jnp.inf))
    span = hi - lo
    return jnp.where(v & (span > 0), (u - lo) / jnp.where(span > 0, span, 1.0), 0.0)


def _scores_one(query: Float[Array, "D"], entries: Float[Array, "N D"], ubar: Float[Array, "N"], lam: float,
                eligible: Bool[Array, "N"]) -> Float[Array, "N"]:
    """Eq. 4 for one query: cosine (dot of unit vectors) + lam * ubar, -inf where not eligible."""
    cos = jnp.dot(entries, query, precision=jax.lax.Precision.HIGHEST)
    return jnp.where(eligible, cos + lam * ubar, -jnp.inf)


def _top_k(scores: Float[Array, "Q N"], k: int) -> tuple[Float[Array, "Q k"], Int[Array, "Q k"]]:
    s, i = jax.lax.top_k(scores, k)
    return s, jnp.where(jnp.isfinite(s), i, -1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("k",))
def _retrieve_dense(query, entries, utility, lam, exclude, k: int):
    ubar = normalise_utility(utility)
    eligible = ~exclude
    scores = jax.vmap(_scores_one, in_axes=(0, None, None, None, 0))(query, entries, ubar, lam, eligible)
    return _top_k(scores, k)


def _local_top_k(query, entries, ubar, valid, exclude, lam, k: int):
    """Per-device body: top-k over the local slice of entries, local indices turned global, gathered, merged."""
    n_local = entries.shape[0]
    eligible = valid[None, :] & ~exclude
    scores = jax.vmap(_scores_one, in_axes=(0, None, None, None, 0))(query, entries, ubar, lam, eligible)
    s, i = jax.lax.top_k(scores, min(k, n_local))
    i = i + jax.lax.axis_index(_AXIS) * n_local
    s_all = jax.lax.all_gather(s, _AXIS, axis=1, tiled=True)  # [Q, devices * k], device-major (ascending indices)
    i_all = jax.lax.all_gather(i, _AXIS, axis=1, tiled=True)
    s_top, pos = jax.lax.top_k(s_all, k)
    i_top = jnp.take_along_axis(i_all, pos, axis=1)
    return s_top, jnp.where(jnp.isfinite(s_top), i_top, -1).astype(jnp.int32)


def entry_mesh(devices: int | None = None) -> Mesh:
    """A 1-D mesh (axis ``data``) over the first ``devices`` local devices (all when None) for sharded retrieval."""
    devs = jax.devices()
    n = len(devs) if devices is None else devices
    if not 1 <= n <= len(devs):
        raise UserInputError(f"devices: expected 1..{len(devs)} (available devices), got {n}")
    return Mesh(np.asarray(devs[:n], dtype=object), (_AXIS,))


def _check(query, entries, utility, k: int, exclude) -> None:
    if query.ndim != 2 or entries.ndim != 2 or query.shape[1] != entries.shape[1]:
        raise UserInputError(f"query/entries: expected [Q, D] and [N, D] with the same D, got {query.shape} and "
                         f"{entries.shape}")
    n = entries.shape[0]
    if utility.shape != (n,):
        raise UserInputError(f"utility: expected shape ({n},) (one per entry), got {utility.shape}")
    _check_finite_utility(utility)
    if not 1 <= k <= n:
        raise UserInputError(f"k: expected 1 <= k <= {n} (the number of entries), got {k}")
    if exclude is not None and exclude.shape != (query.shape[0], n):
        raise UserInputError(f"exclude: expected a bool mask of shape {(query.shape[0], n)}, got {exclude.shape}")


def _check_finite_utility(utility) -> None:
    """A NaN utility made min-max normalisation NaN, which zeroed every entry's utility term; an infinite one made
    scores NaN."""
    u = np.asarray(utility, np.float32)
    bad = np.flatnonzero(~np.isfinite(u))
    if bad.size:
        raise UserInputError(f"utility: expected finite values (float32), entry {int(bad[0])} has {float(u[bad[0]])}")


def _check_lam(lam: float) -> None:
    if not np.isfinite(np.float32(lam)):
        raise UserInputError(f"lam: expected a finite utility weight (float32), got {lam}")


def _check_unit(name: str, x) -> None:
    norms = np.linalg.norm(np.asarray(x[: min(len(x), 4096)], np.float64), axis=-1)
    if norms.size and not np.allclose(norms, 1.0, atol=1e-3):
        bad = int(np.argmax(np.abs(norms - 1.0)))
        raise UserInputError(f"{name}: expected unit-norm rows (normalised embeddings), row {bad} has norm "
                         f"{norms[bad]:.4f}")


def retrieve(query: Float[Array, "Q D"], entries: Float[Array, "N D"], utility: Float[Array, "N"], *, k: int = TOP_K,
             lam: float = LAMBDA, exclude: Bool[Array, "Q N"] | None = None,
             mesh: Mesh | None = None) -> tuple[Float[Array, "Q k"], Int[Array, "Q k"]]:
    """Top-``k`` long-term-memory entries per query by cosine + ``lam`` * normalised utility.

    Args:
      query: [Q, D] unit-norm query embeddings (question + short-term memory, ``embed.compose_query``).
      entries: [N, D] unit-norm entry embeddings.
      utility: [N] raw utilities w_i (min-max normalised inside).
      k: entries per query (1 <= k <= N).
      lam: weight of the normalised utility.
      exclude: [Q, N] bool, True = never return entry n for query q (same-scene exclusion), or None.
      mesh: a 1-D ``entry_mesh``: shard the entries over its devices (per-device top-k, then a global merge).
    Returns:
      (scores [Q, k] float32, indices [Q, k] int32), descending by score; -inf / -1 where nothing is eligible.
    Raises:
      ValueError naming the argument on a shape mismatch, a bad k, a non-finite utility or lam, or non-unit rows
      (first 4096 checked).
    """
    query = jnp.asarray(query, jnp.float32)
    entries = entries if isinstance(entries, jax.Array) else jnp.asarray(entries, jnp.float32)
    utility = jnp.asarray(utility, jnp.float32)
    exclude_arr = None if exclude is None else jnp.asarray(exclude, bool)
    _check(query, entries, utility, k, exclude_arr)
    _check_lam(lam)
    _check_unit("query", query)
    _check_unit("entries", entries)
    if exclude_arr is None:
        exclude_arr = jnp.zeros((query.shape[0], entries.shape[0]), bool)
    if mesh is None:
        return _retrieve_dense(query, entries, utility, jnp.float32(lam), exclude_arr, k=k)
    index = MemoryIndex(entries, utility, mesh=mesh)
    return index.search(query, k=k, lam=lam, exclude=exclude_arr)


class MemoryIndex:
    """Entry embeddings and utilities resident on the devices of ``mesh``, sharded along N (padded to a multiple of
    the device count with ineligible rows), for repeated sharded retrieval.

    Args:
      entries: [N, D] unit-norm embeddings (numpy or jax).
      utility: [N] raw utilities.
      mesh: a 1-D ``entry_mesh`` (default: all local devices).
      groups: [N] int group id per entry (the scene it came from) for group exclusion without a [Q, N] mask.
    """

    def __init__(self, entries, utility, *, mesh: Mesh | None = None, groups=None):
        self.mesh = mesh or entry_mesh()
        d = self.mesh.size
        n, dim = entries.shape
        if np.shape(utility) != (n,):
            raise UserInputError(f"utility: expected shape ({n},) (one per entry), got {np.shape(utility)}")
        _check_finite_utility(utility)
        self.n, self.dim = n, dim
        pad = (-n) % d
        row = NamedSharding(self.mesh, P(_AXIS))
        e = np.asarray(entries, np.float32)
        _check_unit("entries", e)
        if pad:
            e = np.concatenate([e, np.zeros((pad, dim), np.float32)])
        self.entries = jax.device_put(e, NamedSharding(self.mesh, P(_AXIS, None)))
        self.utility = jax.device_put(np.pad(np.asarray(utility, np.float32), (0, pad)), row)
        self.valid = jax.device_put(np.arange(n + pad) < n, row)
        g = np.full((n + pad,), -1, np.int32) if groups is None else np.pad(np.asarray(groups, np.int32), (0, pad),
                                                                            constant_values=-1)
        if g.shape != (n + pad,):
            raise UserInputError(f"groups: expected shape ({n},) (one per entry), got {np.shape(groups)}")
        self.groups = jax.device_put(g, row)

    def search(self, query: Float[Array, "Q D"], *, k: int = TOP_K, lam: float = LAMBDA,
               exclude: Bool[Array, "Q N"] | None = None, query_groups: Int[Array, "Q"] | None = None,
               batch: int = 256) -> tuple[Float[Array, "Q k"], Int[Array, "Q k"]]:
        """(scores [Q, k], indices [Q, k]) as ``retrieve``; ``query_groups`` [Q] excludes entries of the same group
        (combined with ``exclude``). Queries go ``batch`` at a time (bounded [batch, N] score memory)."""
        query = np.asarray(query, np.float32)
        if query.ndim != 2 or query.shape[1] != self.dim:
            raise UserInputError(f"query: expected [Q, {self.dim}], got {query.shape}")
        if not 1 <= k <= self.n:
            raise UserInputError(f"k: expected 1 <= k <= {self.n} (the number of entries), got {k}")
        _check_lam(lam)
        _check_unit("query", query)
        q_n = query.shape[0]
        if exclude is not None and np.shape(exclude) != (q_n, self.n):
            raise UserInputError(f"exclude: expected a bool mask of shape {(q_n, self.n)}, got {np.shape(exclude)}")
        if query_groups is not None and np.shape(query_groups) != (q_n,):
            raise UserInputError(f"query_groups: expected shape ({q_n},), got {np.shape(query_groups)}")
        out_s, out_i = [], []
        for start in range(0, q_n, batch):
            stop = min(q_n, start + batch)
            q = query[start:stop]
            if exclude is not None:
                x = np.pad(np.asarray(exclude[start:stop], bool), ((0, 0), (0, self.entries.shape[0] - self.n)))
                x = jax.device_put(x, NamedSharding(self.mesh, P(None, _AXIS)))
            else:
                x = None
            qg = None if query_groups is None else np.asarray(query_groups[start:stop], np.int32)
            s, i = _search(q, self.entries, self.utility, self.valid, self.groups, jnp.float32(lam), x, qg, k=k,
                           mesh=self.mesh)
            out_s.append(s)
            out_i.append(i)
        return jnp.concatenate(out_s), jnp.concatenate(out_i)


@functools.partial(jax.jit, static_argnames=("k", "mesh"))
def _search(query, entries, utility, valid, groups, lam, exclude, query_groups, k: int, mesh: Mesh):
    """Sharded search with an optional [q, N] mask and optional group exclusion, built per shard."""
    ubar = normalise_utility(utility, valid)
    has_x, has_g = exclude is not None, query_groups is not None

    def body(q, e, u, v, g, l, *extra):
        extra = list(extra)
        x = extra.pop(0) if has_x else jnp.zeros((q.shape[0], e.shape[0]), bool)
        if has_g:
            qg = extra.pop(0)
            x = x | ((qg[:, None] == g[None, :]) & (qg[:, None] >= 0))
        return _local_top_k(q, e, u, v, x, l, k=k)

    args = [query, entries, ubar, valid, groups, lam]
    specs = [P(), P(_AXIS, None), P(_AXIS), P(_AXIS), P(_AXIS), P()]
    if has_x:
        args.append(exclude)
        specs.append(P(None, _AXIS))
    if has_g:
        args.append(query_groups)
        specs.append(P())
    fn = jax.shard_map(body, mesh=mesh, in_specs=tuple(specs), out_specs=(P(), P()), check_vma=False)
    return fn(*args)
