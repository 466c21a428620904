"""Long-term memory retrieval: jnp top-K == brute-force numpy == sentence-transformers semantic_search (utility and
exclusion applied to all), and sharded over 8 forced CPU devices == one device."""
import jax
import numpy as np
import pytest
import torch
from sentence_transformers import util

from jaxdrive.agent.memory import MemoryIndex, entry_mesh, normalise_utility, retrieve

N, D, Q, K, LAM = 100_000, 384, 16, 4, 0.3


def _unit(rng, n, d=D):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def store():
    rng = np.random.default_rng(0)
    entries = _unit(rng, N)
    # queries close to some entries so the top-K is well separated from the rest
    query = _unit(rng, Q) * 0.5 + entries[rng.integers(0, N, Q)] * 0.5
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    utility = rng.uniform(0.0, 5.0, N).astype(np.float32)
    exclude = np.zeros((Q, N), bool)
    exclude[:, rng.integers(0, N, 500)] = True
    groups = rng.integers(0, 1000, N)
    return entries, query, utility, exclude, groups


def _numpy_scores(entries, query, utility, exclude):
    u = (utility.astype(np.float64) - utility.min()) / (utility.max() - utility.min())
    s = query.astype(np.float64) @ entries.astype(np.float64).T + LAM * u[None]
    return np.where(exclude, -np.inf, s)


def test_normalise_utility_min_max():
    np.testing.assert_allclose(normalise_utility(np.array([2.0, 4.0, 3.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(normalise_utility(np.array([3.0, 3.0])), [0.0, 0.0])


def test_topk_matches_numpy_and_semantic_search(store):
    entries, query, utility, exclude, _ = store
    # the exclusion hits the best plain-cosine entry of query 0, so it changes the answer
    best0 = int(np.argmax(entries @ query[0]))
    exclude = exclude.copy()
    exclude[0, best0] = True
    scores, idx = retrieve(query, entries, utility, k=K, lam=LAM, exclude=exclude)
    scores, idx = np.asarray(scores), np.asarray(idx)
    ref = _numpy_scores(entries, query, utility, exclude)
    ref_idx = np.argsort(-ref, axis=1, kind="stable")[:, :K]
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(scores, np.take_along_axis(ref, ref_idx, 1), atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0)
    assert best0 not in idx[0]

    u = torch.tensor((utility - utility.min()) / (utility.max() - utility.min()))
    x = torch.tensor(exclude)

    def score_fn(a, b):  # one chunk holds all queries and all entries (chunk sizes below)
        return (util.cos_sim(a, b) + LAM * u[None]).masked_fill(x, float("-inf"))

    hits = util.semantic_search(torch.tensor(query), torch.tensor(entries), query_chunk_size=Q, corpus_chunk_size=N,
                                top_k=K, score_function=score_fn)
    st_idx = np.array([[h["corpus_id"] for h in row] for row in hits])
    np.testing.assert_array_equal(idx, st_idx)
    # utility matters: without it (lam = 0) the answer is the plain cosine top-K, which differs here
    _, idx0 = retrieve(query, entries, utility, k=K, lam=0.0, exclude=exclude)
    assert not np.array_equal(np.asarray(idx0), idx)


def test_sharded_eight_devices_equals_one(store):
    entries, query, utility, exclude, groups = store
    assert len(jax.devices()) == 8, "tests/conftest.py forces 8 host devices"
    one = retrieve(query, entries, utility, k=K, lam=LAM, exclude=exclude)
    eight = retrieve(query, entries, utility, k=K, lam=LAM, exclude=exclude, mesh=entry_mesh(8))
    np.testing.assert_array_equal(np.asarray(one[1]), np.asarray(eight[1]))
    np.testing.assert_allclose(np.asarray(one[0]), np.asarray(eight[0]), atol=1e-6)
    # N not a multiple of the device count (padded rows never returned), group exclusion == the equivalent mask
    n = N - 3
    qg = groups[np.asarray(one[1])[:, 0]]
    mask = qg[:, None] == groups[None, :n]
    ref = retrieve(query, entries[:n], utility[:n], k=K, lam=LAM, exclude=mask)
    index = MemoryIndex(entries[:n], utility[:n], mesh=entry_mesh(8), groups=groups[:n])
    got = index.search(query, k=K, lam=LAM, query_groups=qg, batch=5)
    np.testing.assert_array_equal(np.asarray(ref[1]), np.asarray(got[1]))
    assert np.asarray(got[1]).max() < n


def test_fewer_eligible_than_k_and_bad_inputs():
    rng = np.random.default_rng(1)
    e, q = _unit(rng, 6, 8), _unit(rng, 2, 8)
    x = np.ones((2, 6), bool)
    x[0, 2] = False
    s, i = retrieve(q, e, np.zeros(6), k=3, exclude=x)
    assert np.asarray(i).tolist() == [[2, -1, -1], [-1, -1, -1]]
    assert np.isneginf(np.asarray(s)[0, 1:]).all()
    s8, i8 = retrieve(q, e, np.zeros(6), k=3, exclude=x, mesh=entry_mesh(8))
    assert np.asarray(i8).tolist() == [[2, -1, -1], [-1, -1, -1]]
    with pytest.raises(ValueError, match="k: expected"):
        retrieve(q, e, np.zeros(6), k=7)
    with pytest.raises(ValueError, match="utility"):
        retrieve(q, e, np.zeros(5))
    with pytest.raises(ValueError, match="unit-norm"):
        retrieve(q * 2, e, np.zeros(6))
    with pytest.raises(ValueError, match="exclude"):
        retrieve(q, e, np.zeros(6), exclude=np.zeros((2, 5), bool))


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e39])
def test_non_finite_utility_or_lam_refused(bad):
    """A NaN utility made the min-max normalisation NaN, which silently zeroed every entry's utility term (an inf
    one made scores NaN): refused, naming the entry, as is a non-finite lam."""
    rng = np.random.default_rng(2)
    e, q = _unit(rng, 4, 8), _unit(rng, 1, 8)
    u = np.array([0.0, 1.0, bad, 2.0])
    with pytest.raises(ValueError, match="utility: expected finite values.* entry 2"):
        retrieve(q, e, u, k=2)
    with pytest.raises(ValueError, match="utility: expected finite"):
        MemoryIndex(e, u, mesh=entry_mesh(1))
    with pytest.raises(ValueError, match="lam: expected a finite"):
        retrieve(q, e, np.zeros(4), k=2, lam=bad)
