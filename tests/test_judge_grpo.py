"""GRPO over gate combinations (``jaxdrive.judge.grpo``): the rollout temperature (sampling statistics, the slot
probabilities it tempers, more reward variance per group) and dynamic sampling (groups with reward variance are
trained on first). Fast: no model, a stub forward where one is needed."""
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jaxdrive.judge import grpo as G
from jaxdrive.judge import recipes
from jaxdrive.train.rewards import Reward


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def tempered(probs, temperature: float):
    """Gate probabilities at ``temperature``: sigmoid(logit(p) / temperature), the tempering ``grpo._slot_probs``
    applies to the slot logits, applied to probabilities (1 returns ``probs``)."""
    p = jnp.clip(jnp.asarray(probs, jnp.float32), 1e-7, 1.0 - 1e-7)
    return jax.nn.sigmoid((jnp.log(p) - jnp.log1p(-p)) / temperature)


def test_tempered_sampling_statistics():
    """Bernoulli samples at temperature T have mean sigmoid(logit(p) / T): T = 2 moves a 0.97 slot to ~0.85 (far
    outside the sampling error of 40,000 draws), T = 1 leaves p unchanged."""
    p = np.array([0.97, 0.6, 0.1, 0.5, 0.999], np.float32)
    np.testing.assert_allclose(np.asarray(tempered(p, 1.0)), p, atol=1e-6)
    want = _sigmoid(np.log(p / (1 - p)) / 2.0)
    n = 40_000
    draws = np.asarray(jax.random.bernoulli(jax.random.key(0), tempered(p, 2.0), (n, p.size)))
    mean, se = draws.mean(0), np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(mean - want) < 4 * se), (mean, want)
    assert abs(mean[0] - p[0]) > 20 * se[0] and abs(mean[2] - p[2]) > 20 * se[2]
    assert mean[3] == pytest.approx(0.5, abs=4 * float(se[3]))  # an undecided slot stays undecided
    with pytest.raises(ValueError, match="temperature"):
        G.GateRollouts([{}] * 4, [], (1, 2), ml_collections.ConfigDict(dict(
            group_size=2, prompts_per_step=1, seed=0, temperature=0.0)))


class _StubModel:
    """forward_hidden -> (hidden [B, L, H],); lm_head_weight [H, V]: the two methods ``_slot_probs`` reads."""

    def __init__(self, hidden, w):
        self.hidden, self.w = hidden, w

    def forward_hidden(self, inputs):
        del inputs
        return (self.hidden,)

    def lm_head_weight(self):
        return self.w


def test_slot_probs_temperature_divides_the_yes_no_margin():
    rng = np.random.default_rng(0)
    hidden, w = jnp.asarray(rng.normal(size=(2, 12, 6)), jnp.float32), jnp.asarray(rng.normal(size=(6, 5)) * 2)
    model, pos, yes_no = _StubModel(hidden, w), jnp.asarray(rng.integers(0, 12, (2, 7))), jnp.asarray([3, 1])
    h = np.take_along_axis(np.asarray(hidden), np.asarray(pos)[..., None], axis=1)
    margin = h @ np.asarray(w)[:, 3] - h @ np.asarray(w)[:, 1]
    for t in (1.0, 0.5, 3.0):
        got = np.asarray(G._slot_probs(model, None, pos, yes_no, t))
        np.testing.assert_allclose(got, _sigmoid(margin / t), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, np.asarray(tempered(G._slot_probs(model, None, pos, yes_no), t)),
                                   atol=1e-5)


def _confident_pairs(n):
    """n pairs: A (preferred) breaks nothing; B breaks NC (its gate decides the order); the judge is confident and
    right (every gate 0.97 on): only a sampled NC-off for B (or rarely other slot patterns) ties the pair."""
    sub = np.ones((n, 2, 9), np.float32)
    sub[:, 1, 0] = 0.0  # B's NC = 0 -> gated score 0 when NC is on
    probs = np.full((n, 2, 7), 0.97, np.float32)
    return sub, probs


def test_temperature_gives_groups_reward_variance():
    """Eq. 12 rewards of 8-rollout groups of confident, right pairs: most groups are all-1 at T = 1 (no GRPO
    signal); at T = 3 most groups vary."""
    n, g = 400, 8
    sub, probs = _confident_pairs(n)
    fracs = {}
    for t in (1.0, 3.0):
        p = jnp.repeat(tempered(probs.reshape(n, 14), t), g, axis=0)
        gates = jax.random.bernoulli(jax.random.key(1), p)
        r = recipes.preference_reward(gates, None, {"subscores": np.repeat(sub, g, 0),
                                                    "preferred": np.zeros(n * g, np.int32)})
        fracs[t] = float(G.grpo.zero_std_fraction(r, g))
    # P(group all right) = (1 - 0.03)^8 = 0.78 at T = 1; at T = 3 the NC slot is on with p = 0.76: 0.76^8 = 0.11
    assert fracs[1.0] > 0.65 and fracs[3.0] < 0.25, fracs


def test_margin_reward_known_answers_and_expectation():
    """``judge_margin``: the preferred trajectory's gated score minus the other's. Known answers on the confident
    pairs (B breaks NC): +1 with every gate on, 0 with B's NC gate off, -1 when B is the preferred one; on random
    sub-scores and gate probabilities the mean over 20,000 sampled rollouts per pair is the expected-score margin
    of Eq. 14 (``gates.expected_score``) within 4 standard errors, and Eq. 12's mean is P(sampled order right)."""
    sub, _ = _confident_pairs(3)
    gates = np.ones((3, 14), np.float32)
    gates[1, 7 + 1] = 0.0  # B's NC off (rule order LK, NC, DAC, DDC, TTC, COMFORT, EP)
    batch = {"subscores": sub, "preferred": np.array([0, 0, 1], np.int32)}
    np.testing.assert_array_equal(np.asarray(recipes.margin_reward(gates, None, batch)), [1.0, 0.0, -1.0])
    np.testing.assert_array_equal(np.asarray(recipes.preference_reward(gates, None, batch)), [1.0, 0.0, 0.0])

    from jaxdrive.judge.gates import expected_score
    rng = np.random.default_rng(0)
    n, draws = 6, 20_000
    sub = rng.uniform(0.0, 1.0, (n, 2, 9)).astype(np.float32)
    sub[:, :, :3] = rng.uniform(0.0, 1.0, (n, 2, 3)) > 0.4  # NC, DAC, DDC mostly 0 / 1 as in EPDMS
    probs = rng.uniform(0.05, 0.95, (n, 2, 7)).astype(np.float32)
    pref = rng.integers(0, 2, n).astype(np.int32)
    gates = jax.random.bernoulli(jax.random.key(0), jnp.repeat(probs.reshape(n, 14), draws, axis=0))
    rep = {"subscores": np.repeat(sub, draws, 0), "preferred": np.repeat(pref, draws)}
    r = np.asarray(recipes.margin_reward(gates, None, rep)).reshape(n, draws)
    e = np.asarray(expected_score(recipes._subscores_from_array(jnp.asarray(sub)), probs))  # [n, 2]
    want = np.where(pref == 1, e[:, 1] - e[:, 0], e[:, 0] - e[:, 1])
    se = r.std(1) / np.sqrt(draws)
    assert np.all(np.abs(r.mean(1) - want) < 4 * se + 1e-6), (r.mean(1), want, se)
    assert np.all((r >= -1.0) & (r <= 1.0))
    right = np.asarray(recipes.preference_reward(gates, None, rep)).reshape(n, draws)
    np.testing.assert_array_equal(right, (r > 0).astype(np.float32))


def test_margin_reward_from_the_registry():
    from jaxdrive.train import jobs
    rewards = jobs.build_rewards(ml_collections.ConfigDict({"judge_margin": dict(weight=0.5)}))
    assert [(w.name, w.weight, w.kind) for w in rewards] == [("judge_margin", 0.5, "jnp")]


def test_select_groups_varied_first_then_fill():
    g = 4
    rewards = np.array([[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 1, 0]],
                       np.float32).reshape(-1)
    np.testing.assert_array_equal(G.select_groups(rewards, g, 3), [1, 3, 5])
    np.testing.assert_array_equal(G.select_groups(rewards, g, 5), [1, 3, 5, 0, 2])  # filled with zero-variance
    np.testing.assert_array_equal(G.select_groups(rewards[:8], g, 2), [1, 0])
    with pytest.raises(ValueError, match="candidate"):
        G.select_groups(rewards, g, 7)


class _StubRollouts(G.GateRollouts):
    """GateRollouts with the model forward replaced by fixed probabilities per example (``ex["probs"]`` [2, 7])."""

    def probs(self, trainer, rows, params=None, temperature=1.0):
        return tempered(np.concatenate([r["probs"] for r in rows]), temperature)

    def inputs(self, model, rows):
        return {"ids": np.array([r["id"] for r in rows])}, jnp.zeros((2 * len(rows), 7), jnp.int32)


def _rollouts(oversample, temperature=1.0, beta=0.0):
    """16 pairs: even ones confident and right (zero-variance groups at T = 1), odd ones undecided (p = 0.5)."""
    sub, probs = _confident_pairs(16)
    probs[1::2] = 0.5
    examples = [{"probs": probs[i], "subscores": sub[i], "preferred": np.int32(0), "id": i} for i in range(16)]
    cfg = ml_collections.ConfigDict(dict(group_size=8, prompts_per_step=4, seed=0, advantage="verl", beta=beta,
                                         temperature=temperature, oversample=oversample))
    reward = Reward(name="judge_preference", fn=recipes.preference_reward, weight=1.0, kind="jnp")
    return _StubRollouts(examples, [reward], (1, 2), cfg)


def test_dynamic_sampling_trains_on_groups_with_variance():
    trainer = SimpleNamespace(model=lambda: None, shard_batch=lambda x: x)
    plain, dyn = _rollouts(1), _rollouts(4)
    b1, m1 = plain(trainer, 1, jax.random.key(0))
    b4, m4 = dyn(trainer, 1, jax.random.key(0))
    for b in (b1, b4):  # one loss shape: prompts_per_step pairs x group_size rollouts
        assert b["samples"].shape == (32, 14) and b["advantages"].shape == (32,) and b["old_logp"].shape == (32, 14)
        assert len(b["inputs"]["ids"]) == 4
    # the 16 candidates of the oversampled step hold 8 undecided pairs: the 4 kept all vary and are undecided ones
    assert m4["batch_zero_std_frac"] == 0.0 and m4["zero_std_frac"] > 0.2
    assert all(i % 2 == 1 for i in b4["inputs"]["ids"])
    adv = np.asarray(b4["advantages"]).reshape(4, 8)
    assert np.all(np.abs(adv).max(-1) > 0.5)
    # the kept rows' old log-probs are those of the kept pairs' probabilities and samples
    probs = np.concatenate([dyn.examples[i]["probs"] for i in b4["inputs"]["ids"]])
    np.testing.assert_allclose(np.asarray(b4["old_logp"]),
                               np.asarray(G.rollout_logp(jnp.asarray(probs), b4["samples"], 8)), atol=1e-6)
    # without oversampling the batch is the drawn pairs, zero-variance groups included (advantage 0)
    assert m1["batch_zero_std_frac"] == m1["zero_std_frac"]


def test_group_reward_std_is_the_mean_of_the_pairs_sample_stds():
    """``group_reward_std`` (what TRL logs as ``reward_std``: ``grpo.mean_group_std``) of a gate GRPO step: a pair's
    G rollouts are G consecutive rows (``rollout`` repeats each pair's probabilities G times), and the metric is the
    mean over the step's candidate pairs (the pool, as ``reward_std``) of the sample std (ddof 1) of each pair's
    rewards, zero-variance pairs included. The reward adds 10 x the pair's ``preferred`` (0 or 1, as laid out by the
    rollout) to known values, so any other grouping of the rows would mix pairs and give another value."""
    g = 3
    pattern = np.array([0, 1, 3, 0, 0, 2, 5, 5, 5, 1, 2, 3], np.float32)  # sample stds sqrt(7/3), sqrt(4/3), 0, 1
    known = Reward(name="known", fn=lambda tokens, mask, batch: 10.0 * batch["preferred"] + pattern, kind="jnp")
    sub, probs = _confident_pairs(4)
    examples = [{"probs": probs[i], "subscores": sub[i], "preferred": np.int32(i % 2), "id": i} for i in range(4)]
    cfg = ml_collections.ConfigDict(dict(group_size=g, prompts_per_step=2, oversample=2, seed=0, beta=0.0))
    trainer = SimpleNamespace(model=lambda: None, shard_batch=lambda x: x)
    _, metrics = _StubRollouts(examples, [known], (1, 2), cfg)(trainer, 1, jax.random.key(0))
    want = (np.sqrt(7 / 3) + np.sqrt(4 / 3) + 0.0 + 1.0) / 4
    assert metrics["group_reward_std"] == pytest.approx(want, rel=1e-6)
    assert metrics["zero_std_frac"] == 0.25 and metrics["reward_std"] > 4.0  # the pool's std spans the pairs


def test_temperature_reaches_loss_and_reference():
    """At T = 2 the stored old log-probs are those of the tempered probabilities (the policy that sampled)."""
    trainer = SimpleNamespace(model=lambda: None, shard_batch=lambda x: x)
    ro = _rollouts(1, temperature=2.0)
    b, _ = ro(trainer, 1, jax.random.key(3))
    rows = [ro.examples[i] for i in b["inputs"]["ids"]]
    want = G.rollout_logp(tempered(np.concatenate([r["probs"] for r in rows]), 2.0), b["samples"], 8)
    np.testing.assert_allclose(np.asarray(b["old_logp"]), np.asarray(want), atol=1e-6)
    loss = G.gate_loss_fn(ml_collections.ConfigDict(dict(group_size=8, eps_low=0.2, eps_high=0.2, beta=0.0, kl="k3",
                                                         agg="seq-mean-token-mean", temperature=2.0)), (1, 2))
    assert loss.temperature == 2.0


def test_mcnemar_exact_known_answers_and_binomial():
    from scipy.stats import binomtest

    from jaxdrive.judge.significance import mcnemar_exact

    a = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 1], bool)
    b = np.array([1, 1, 0, 1, 1, 1, 1, 1, 1, 1], bool)  # b = 1 (A right, B wrong), c = 6
    r = mcnemar_exact(a, b)
    assert (r["n"], r["b"], r["c"]) == (10, 1, 6) and r["diff_pp"] == pytest.approx(50.0)
    assert r["p_value"] == pytest.approx(2 * (1 + 7) / 2 ** 7)  # 2 P(X <= 1), X ~ Bin(7, 1/2)
    assert r["p_value"] == pytest.approx(binomtest(6, 7, 0.5).pvalue)
    assert mcnemar_exact(a, a)["p_value"] == 1.0  # no discordant pair
    assert mcnemar_exact(np.zeros(6, bool), np.ones(6, bool))["p_value"] == pytest.approx(2 / 64)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.random(50) < 0.7, rng.random(50) < 0.8
        r = mcnemar_exact(x, y)
        if r["b"] + r["c"]:
            assert r["p_value"] == pytest.approx(binomtest(r["c"], r["b"] + r["c"], 0.5).pvalue)
    # more than 1,023 discordant pairs (2.0 ** m overflowed a float): still the binomial test's p-value
    x = np.arange(3000) % 2 == 0
    y = x.copy()
    y[:1300] = ~y[:1300]  # 650 pairs A right / B wrong, 650 the other way
    y[1300:1500:2] = False  # 100 more A right / B wrong
    r = mcnemar_exact(x, y)
    assert (r["b"], r["c"]) == (750, 650)
    assert r["p_value"] == pytest.approx(binomtest(650, 1400, 0.5).pvalue, rel=1e-9)
    with pytest.raises(ValueError):
        mcnemar_exact(a, b[:5])


def test_paired_bootstrap_interval():
    from jaxdrive.judge.significance import paired_bootstrap

    rng = np.random.default_rng(1)
    a = rng.random(400) < 0.85
    b = a.copy()
    b[np.flatnonzero(~a)[:30]] = True  # B fixes 30 of A's errors, breaks none: +7.5 pp
    r = paired_bootstrap(a, b, num=4000)
    assert r["diff_pp"] == pytest.approx(7.5) and 0.0 < r["ci_low"] < 7.5 < r["ci_high"] and r["frac_le_0"] == 0.0
    same = paired_bootstrap(a, a, num=500)
    assert same["ci_low"] == same["ci_high"] == 0.0 and same["frac_le_0"] == 1.0
    swap = a.copy()  # 10 of A's errors fixed, 10 of its right pairs broken: difference 0, the interval covers it
    swap[np.flatnonzero(~a)[:10]] = True
    swap[np.flatnonzero(a)[:10]] = False
    r = paired_bootstrap(a, swap, num=4000)
    assert r["diff_pp"] == 0.0 and r["ci_low"] < 0.0 < r["ci_high"] and 0.3 < r["frac_le_0"] < 0.8


def test_significance_refuses_scores_for_correctness_and_bootstraps_in_chunks(monkeypatch):
    """Scores passed as correctness were cast to bool (0.3 -> right) silently; the bootstrap drew all [num, n]
    indices at once (16 GB for 10k resamples of 100k pairs). Chunked, it gives the same numbers."""
    from jaxdrive.judge import significance

    with pytest.raises(ValueError, match="correct_a: expected per-pair correctness"):
        significance.mcnemar_exact([0.3, 0.9], [1, 0])
    with pytest.raises(ValueError, match="correct_b"):
        significance.paired_bootstrap([1, 0], [0.5, 1.0])
    rng = np.random.default_rng(3)
    a, b = rng.random(300) < 0.7, rng.random(300) < 0.8
    whole = significance.paired_bootstrap(a, b, num=1000)
    monkeypatch.setattr(significance, "_DRAWS_PER_CHUNK", 300 * 7)  # 7 resamples per chunk, a short last one
    assert significance.paired_bootstrap(a, b, num=1000) == whole
