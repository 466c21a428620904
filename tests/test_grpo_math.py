"""GRPO advantages and losses against the TRL / verl / Tunix / Dr.GRPO formulas (spec/eval-protocols.md §D),
re-written here in plain numpy, per group and per sequence, as those libraries write them."""
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdrive.train import grpo
from jaxdrive.train.rewards import Reward, combine_rewards, exact_match_reward

SANITY = np.array([1, 0, 0, 1, 1, 0, 0, 0], np.float32)


# ---------------------------------------------------------------- numpy references (loops, like the sources)
def ref_trl_adv(r, G, scale="group", eps=1e-4):
    """TRL sum_then_normalize: group mean; nanstd with Bessel (G=1 -> std 0); A=(r-mu)/(std+1e-4)."""
    r = np.asarray(r, np.float64)
    out = np.zeros_like(r)
    batch_std = np.std(r, ddof=1) if len(r) > 1 else 0.0
    for g in range(0, len(r), G):
        x = r[g : g + G]
        mu = x.mean()
        sd = np.std(x, ddof=1) if G > 1 else 0.0
        if scale == "group":
            out[g : g + G] = (x - mu) / (sd + eps)
        elif scale == "batch":
            out[g : g + G] = (x - mu) / (batch_std + eps)
        else:
            out[g : g + G] = x - mu
    return out


def ref_verl_adv(r, G, norm_by_std=True, eps=1e-6):
    """verl compute_grpo_outcome_advantage: size-1 group -> mu 0, sigma 1; else torch.std (Bessel)."""
    r = np.asarray(r, np.float64)
    out = np.zeros_like(r)
    for g in range(0, len(r), G):
        x = r[g : g + G]
        mu, sd = (0.0, 1.0) if G == 1 else (x.mean(), np.std(x, ddof=1))
        out[g : g + G] = (x - mu) / (sd + eps) if norm_by_std else x - mu
    return out


def ref_tunix_adv(r, G):
    r = np.asarray(r, np.float64).reshape(-1, G)
    return ((r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-6)).reshape(-1)


def ref_verl_loss(logp, old, adv, m, ref=None, eps_low=0.2, eps_high=0.2, clip_c=None, beta=0.0, agg="token-mean"):
    """verl compute_policy_loss_vanilla + low_var_kl + agg_loss."""
    delta = np.clip(logp - old, -20, 20)
    ratio = np.exp(delta)
    A = adv[:, None]
    pg1 = -A * ratio
    pg2 = -A * np.clip(ratio, 1 - eps_low, 1 + eps_high)
    pg = np.maximum(pg1, pg2)
    if clip_c is not None:
        pg = np.where(A < 0, np.minimum(pg, -A * clip_c), pg)
    l = pg
    if beta:
        x = np.clip(ref - logp, -20, 20)
        l = l + beta * np.clip(np.exp(x) - x - 1, -10, 10)
    if agg == "token-mean":
        return (l * m).sum() / m.sum()
    if agg == "seq-mean-token-mean":
        seq = (l * m).sum(1) / (m.sum(1) + 1e-8)
        return seq.sum() / (m.sum(1) > 0).sum()
    raise ValueError(agg)


def ref_trl_loss(logp, old, adv, m, ref=None, eps=0.2, eps_high=None, beta=0.0, loss_type="grpo", max_len=None):
    """TRL _compute_loss (token-level IS), k3 KL without clamp."""
    eps_high = eps if eps_high is None else eps_high
    ratio = np.exp(logp - old)
    A = adv[:, None]
    l = -np.minimum(ratio * A, np.clip(ratio, 1 - eps, 1 + eps_high) * A)
    if beta:
        l = l + beta * (np.exp(ref - logp) - (ref - logp) - 1)
    if loss_type == "grpo":
        return np.mean((l * m).sum(1) / np.maximum(m.sum(1), 1))
    if loss_type == "bnpo":
        return (l * m).sum() / max(m.sum(), 1)
    if loss_type == "dr_grpo":
        return (l * m).sum() / (l.shape[0] * max_len)
    raise ValueError(loss_type)


def ref_tunix_kl(logp, ref, kind):
    if kind == "kl":
        return logp - ref
    if kind == "mse_kl":
        return 0.5 * (logp - ref) ** 2
    x = np.clip(ref - logp, -20, 20)
    return np.clip(np.exp(x) - x - 1, -10, 10)


def random_batch(seed, n=8, t=7, spread=0.5):
    rng = np.random.default_rng(seed)
    logp = -rng.uniform(0.05, 3.0, (n, t))
    old = logp + rng.normal(0, spread, (n, t))
    ref = logp + rng.normal(0, spread, (n, t))
    adv = rng.normal(0, 1, n)
    lengths = rng.integers(1, t + 1, n)
    m = (np.arange(t)[None] < lengths[:, None]).astype(np.float64)
    return logp, old, ref, adv, m


# ---------------------------------------------------------------- advantages
def test_sanity_vector_table():
    a = np.asarray(grpo.group_advantages(jnp.asarray(SANITY), 8, **grpo.resolve_advantage_convention("trl")))
    np.testing.assert_allclose(a[SANITY == 1], 1.207381, atol=2e-6)
    np.testing.assert_allclose(a[SANITY == 0], -0.724429, atol=2e-6)
    for name in ("verl", "tunix"):
        a = np.asarray(grpo.group_advantages(jnp.asarray(SANITY), 8, **grpo.resolve_advantage_convention(name)))
        np.testing.assert_allclose(a[SANITY == 1], 1.207612, atol=2e-6)
        np.testing.assert_allclose(a[SANITY == 0], -0.724567, atol=2e-6)
    a = np.asarray(grpo.group_advantages(jnp.asarray(SANITY), 8, **grpo.resolve_advantage_convention("drgrpo")))
    np.testing.assert_allclose(a[SANITY == 1], 0.625, atol=1e-7)
    np.testing.assert_allclose(a[SANITY == 0], -0.375, atol=1e-7)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("G", [2, 4, 8])
def test_advantages_match_references(seed, G):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=4 * G).astype(np.float32)
    r[:G] = 0.7  # one all-equal group
    r[G : 2 * G] = rng.integers(0, 2, G)  # binary rewards
    rj = jnp.asarray(r)
    adv = lambda **kw: np.asarray(grpo.group_advantages(rj, G, **kw))
    np.testing.assert_allclose(adv(**grpo.resolve_advantage_convention("trl")), ref_trl_adv(r, G), atol=1e-5)
    np.testing.assert_allclose(adv(scale="batch", eps=1e-4), ref_trl_adv(r, G, "batch"), atol=1e-5)
    np.testing.assert_allclose(adv(scale="none"), ref_trl_adv(r, G, "none"), atol=1e-6)
    np.testing.assert_allclose(adv(**grpo.resolve_advantage_convention("verl")), ref_verl_adv(r, G), atol=1e-5)
    np.testing.assert_allclose(adv(**grpo.resolve_advantage_convention("tunix")), ref_tunix_adv(r, G), atol=1e-5)
    np.testing.assert_allclose(adv(**grpo.resolve_advantage_convention("drgrpo")), ref_verl_adv(r, G, False), atol=1e-6)
    # the all-equal group is exactly zero in every convention
    for name in grpo.ADVANTAGE_CONVENTIONS:
        assert np.all(adv(**grpo.resolve_advantage_convention(name))[:G] == 0.0)
    assert float(grpo.zero_std_fraction(rj, G)) == pytest.approx(0.25 if np.ptp(r[G : 2 * G]) > 0 else 0.5)


def test_group_of_one_is_explicit():
    r = jnp.asarray([0.3, 1.0, -2.0])
    np.testing.assert_array_equal(grpo.group_advantages(r, 1), np.zeros(3))  # TRL: no baseline, no signal
    np.testing.assert_allclose(ref_trl_adv(np.asarray(r), 1), np.zeros(3))
    np.testing.assert_allclose(grpo.group_advantages(r, 1, singleton="raw"), ref_verl_adv(np.asarray(r), 1), atol=1e-6)


def test_invalid_rows_are_left_out_of_the_baseline():
    r = np.array([1.0, np.nan, 0.0, 1.0, 0.5, 0.5, 2.0, 0.0], np.float32)
    valid = ~np.isnan(r)
    a = np.asarray(grpo.group_advantages(jnp.asarray(r), 4, valid=jnp.asarray(valid), eps=1e-4))
    x = np.array([1.0, 0.0, 1.0])  # TRL: nanmean / nanstd over the remaining rows, NaN row -> 0
    np.testing.assert_allclose(a[[0, 2, 3]], (x - x.mean()) / (x.std(ddof=1) + 1e-4), atol=1e-5)
    assert a[1] == 0.0 and np.isfinite(a).all()
    np.testing.assert_allclose(a[4:], ref_trl_adv(r[4:], 4), atol=1e-5)


def test_advantage_validation():
    with pytest.raises(ValueError, match="multiple of group_size"):
        grpo.group_advantages(jnp.zeros(6), 4)
    with pytest.raises(ValueError, match="scale"):
        grpo.group_advantages(jnp.zeros(4), 2, scale="std")
    with pytest.raises(ValueError, match="advantage convention"):
        grpo.resolve_advantage_convention("ppo")


# ---------------------------------------------------------------- policy loss
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_policy_loss_matches_verl(seed):
    logp, old, ref, adv, m = random_batch(seed)
    j = lambda x: jnp.asarray(x, jnp.float32)
    for agg in ("token-mean", "seq-mean-token-mean"):
        for kw in (dict(), dict(eps_low=0.1, eps_high=0.28), dict(dual_clip=3.0), dict(beta=0.04)):
            got, _ = grpo.policy_loss(j(logp), j(old), j(adv), j(m), ref_logp=j(ref), agg=agg, **kw)
            want = ref_verl_loss(logp, old, adv, m, ref, agg=agg,
                                 eps_low=kw.get("eps_low", 0.2), eps_high=kw.get("eps_high", 0.2),
                                 clip_c=kw.get("dual_clip"), beta=kw.get("beta", 0.0))
            np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_policy_loss_matches_trl(seed):
    logp, old, ref, adv, m = random_batch(seed, spread=0.3)
    j = lambda x: jnp.asarray(x, jnp.float32)
    cases = [("grpo", "seq-mean-token-mean"), ("bnpo", "token-mean"), ("dr_grpo", "seq-mean-token-sum-norm")]
    for loss_type, agg in cases:
        for beta in (0.0, 0.1):
            got, _ = grpo.policy_loss(j(logp), j(old), j(adv), j(m), ref_logp=j(ref), beta=beta, agg=agg,
                                      eps_high=0.28, max_len=9)
            want = ref_trl_loss(logp, old, adv, m, ref, eps_high=0.28, beta=beta, loss_type=loss_type, max_len=9)
            np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-6)


def test_kl_estimators_match_tunix_and_are_finite_at_extreme_gaps():
    logp, _, ref, _, _ = random_batch(5)
    for ours, theirs in (("k1", "kl"), ("k2", "mse_kl"), ("k3", "low_var_kl")):
        got = grpo.kl_penalty(jnp.asarray(logp, jnp.float32), jnp.asarray(ref, jnp.float32), ours)
        np.testing.assert_allclose(np.asarray(got), ref_tunix_kl(logp, ref, theirs), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got, grpo.kl_penalty(jnp.asarray(logp), jnp.asarray(ref), theirs))
    # extreme gaps: a token the reference finds impossible and one the policy finds impossible
    lp = jnp.asarray([[-1e-6, -200.0, -1e4, -0.1]], jnp.float32)
    rf = jnp.asarray([[-1e4, -1e-6, -1e-6, -3e38]], jnp.float32)
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.exp(np.float32(-1e-6) - np.float32(-1e4)))  # the unclamped k3 overflows
    k3 = grpo.kl_penalty(lp, rf, "k3")
    assert np.isfinite(np.asarray(k3)).all() and float(k3.max()) == pytest.approx(10.0)

    def loss(lp):
        return grpo.policy_loss(lp, lp, jnp.ones(1), jnp.ones((1, 4)), ref_logp=rf, beta=0.5, kl="k3")[0]

    val, g = jax.value_and_grad(loss)(lp)
    assert np.isfinite(float(val)) and np.isfinite(np.asarray(g)).all()


@pytest.mark.parametrize("agg", grpo.AGG_MODES)
def test_micro_batch_sums_give_the_full_batch_loss(agg):
    logp, old, ref, adv, m = [jnp.asarray(x, jnp.float32) for x in random_batch(7, n=8)]
    full = grpo.policy_loss_terms(logp, old, adv, m, ref_logp=ref, beta=0.1, agg=agg)
    parts = [grpo.policy_loss_terms(logp[s], old[s], adv[s], m[s], ref_logp=ref[s], beta=0.1, agg=agg)
             for s in (slice(0, 3), slice(3, 8))]
    total = sum(p[0] for p in parts) / sum(p[1] for p in parts)
    np.testing.assert_allclose(float(total), float(grpo.safe_ratio(full[0], full[1])), rtol=1e-6)
    metrics = grpo.token_metrics({k: sum(p[2][k] for p in parts) for k in full[2]})
    for k, v in grpo.token_metrics(full[2]).items():
        np.testing.assert_allclose(float(metrics[k]), float(v), rtol=1e-6)


def test_on_policy_gradient_and_metrics():
    """At ratio 1 (old = logp) the GRPO gradient is -A m / (|o_i| * #seqs) per token; clip fraction is 0."""
    logp, _, _, adv, m = random_batch(3)
    lp = jnp.asarray(logp, jnp.float32)
    f = lambda x: grpo.policy_loss(x, lp, jnp.asarray(adv, jnp.float32), jnp.asarray(m, jnp.float32))
    (loss, metrics), g = jax.value_and_grad(f, has_aux=True)(lp)
    want = -adv[:, None] * m / m.sum(1, keepdims=True) / len(adv)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-7)
    assert float(metrics["clip_frac"]) == 0.0 and float(metrics["ratio"]) == pytest.approx(1.0)
    np.testing.assert_allclose(float(metrics["entropy"]), -(logp * m).sum() / m.sum(), rtol=1e-5)
    # clip fraction counts exactly the tokens whose clipped term is active
    lo, old, _, adv, m = random_batch(4, spread=1.0)
    _, met = grpo.policy_loss(*(jnp.asarray(x, jnp.float32) for x in (lo, old, adv, m)))
    ratio, A = np.exp(lo - old), adv[:, None]
    active = (-A * np.clip(ratio, 0.8, 1.2) > -A * ratio) * m
    np.testing.assert_allclose(float(met["clip_frac"]), active.sum() / m.sum(), rtol=1e-6)


def test_all_equal_groups_give_zero_policy_gradient():
    r = jnp.asarray([1.0] * 4 + [0.0] * 4)
    adv = grpo.group_advantages(r, 4)
    logp, old, _, _, m = random_batch(9)
    g = jax.grad(lambda x: grpo.policy_loss(x, jnp.asarray(old), adv, jnp.asarray(m))[0])(jnp.asarray(logp))
    assert np.all(np.asarray(g) == 0.0)


def test_policy_loss_validation():
    z = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match="ref_logp"):
        grpo.policy_loss(z, z, jnp.zeros(2), z, beta=0.1)
    with pytest.raises(ValueError, match="agg"):
        grpo.policy_loss(z, z, jnp.zeros(2), z, agg="sum")
    with pytest.raises(ValueError, match="kl"):
        grpo.policy_loss(z, z, jnp.zeros(2), z, ref_logp=z, beta=0.1, kl="k4")


# ---------------------------------------------------------------- rewards
def test_nan_or_missing_reward_is_an_error_unless_allowed():
    comps, exs = ["yes", "no", "yes"], [{"answer": "yes"}, {"answer": "yes"}, {"answer": "no"}]
    total, valid, parts = combine_rewards([exact_match_reward()], comps, exs)
    np.testing.assert_array_equal(total, [1.0, 0.0, 0.0]) and valid.all()
    bad = Reward("flaky", lambda c, e: [1.0, float("nan"), None])
    with pytest.raises(ValueError, match=r"reward 'flaky': NaN/missing value at row 1"):
        combine_rewards([exact_match_reward(), bad], comps, exs)
    # allowed: TRL's nansum over the reward functions; a row is invalid only when no reward scored it
    total, valid, _ = combine_rewards([Reward("w", lambda c, e: [0.5] * 3, weight=2.0), bad], comps, exs,
                                      allow_missing=True)
    np.testing.assert_array_equal(valid, [True, True, True])
    np.testing.assert_allclose(total, [2.0, 1.0, 1.0])
    other = Reward("other", lambda c, e: [None, 0.25, float("nan")], weight=4.0)
    total, valid, _ = combine_rewards([bad, other], comps, exs, allow_missing=True)
    np.testing.assert_array_equal(valid, [True, True, False])
    np.testing.assert_allclose(total[:2], [1.0, 1.0])
    with pytest.raises(ValueError, match="expected 3 values"):
        combine_rewards([Reward("short", lambda c, e: [1.0])], comps, exs)
    with pytest.raises(ValueError, match="infinite"):
        combine_rewards([Reward("inf", lambda c, e: [1.0, np.inf, 0.0])], comps, exs, allow_missing=True)
    jnp_reward = Reward("len", lambda t, m, b: m.sum(-1), kind="jnp")
    total, _, _ = combine_rewards([jnp_reward], comps, exs, tokens=jnp.zeros((3, 2)), mask=jnp.asarray(
        [[1, 1], [1, 0], [0, 0]], jnp.float32))
    np.testing.assert_array_equal(total, [2, 1, 0])


def test_grpo_config_is_checked_before_anything_runs():
    """Found by an exploratory pass: grpo.group_size=1 trained with every advantage 0 (loss 0, no error),
    grpo.eps_low=1.5 clipped ratios below at -0.5, grpo.policy_epochs=0 was reported as a schedule error."""
    import importlib

    from jaxdrive.train.grpo_trainer import Rollouts, check_config

    cfg = importlib.import_module("jaxdrive.configs.grpo_tiny").get_config().grpo
    check_config(cfg)
    for field, value, match in (("group_size", 1, "grpo.group_size: expected >= 2"),
                                ("eps_low", 1.5, r"grpo.eps_low: expected in \[0, 1\)"),
                                ("policy_epochs", 0, "grpo.policy_epochs: expected >= 1"),
                                ("temperature", 0.0, "grpo.temperature"), ("kl", "k4", "grpo.kl"),
                                ("agg", "sum", "grpo.agg")):
        bad = cfg.copy_and_resolve_references()
        bad[field] = value
        with pytest.raises(ValueError, match=match):
            Rollouts([{"prompt": np.ones(3, np.int32)}] * 8, [exact_match_reward()], str, bad)


@pytest.mark.parametrize("field, value, match", [
    ("eps", -1.0, "grpo.eps: expected >= 0"), ("dual_clip", 0.5, r"grpo.dual_clip: expected > 1"),
    ("max_len", 0, "grpo.max_len: expected >= 1"), ("scale", "groups", "grpo.scale: expected 'group'"),
    ("advantage", "dapo", "grpo.advantage: expected one of"),
])
def test_advantage_and_loss_settings_are_checked_with_the_config(field, value, match):
    """Found by an exploratory pass: grpo.eps=-1.0 trained with every advantage's sign flipped (std + eps < 0),
    grpo.max_len=0 made the Dr.GRPO loss 0/0 = 0 (no gradient, no error); grpo.dual_clip=0.5 and grpo.scale='groups'
    failed only in the first step, after the step-0 evaluation, and grpo.advantage named no config field."""
    from jaxdrive.train.grpo_trainer import check_config

    cfg = importlib.import_module("jaxdrive.configs.grpo_tiny").get_config().grpo
    cfg[field] = value
    with pytest.raises(ValueError, match=match):
        check_config(cfg)


def test_missing_rewards_allowed_in_training_are_allowed_in_the_evaluation_and_its_metrics():
    """Found by an exploratory pass: with grpo.allow_missing_rewards=True a reward returning None trained, but the
    greedy evaluation (step 0, before any training) raised 'NaN/missing value'; and zero_std_frac counted a group
    whose valid rewards are all equal (no learning signal) as having spread, from the 0 put in the missing rows."""
    from jaxdrive.train.grpo_trainer import Rollouts

    cfg = importlib.import_module("jaxdrive.configs.grpo_tiny").get_config().grpo
    cfg.allow_missing_rewards = True
    odd = Reward("odd", lambda c, e: [2.0 if i % 2 else None for i in range(len(c))])
    rollouts = Rollouts([{"prompt": np.ones(3, np.int32)}] * 8, [odd], lambda t, m: "x", cfg)
    rollouts.generate = lambda trainer, rows, key: (np.ones((len(rows), 3), np.int32), np.ones((len(rows), 3)))
    assert rollouts.evaluate(None, [{"prompt": np.ones(3, np.int32)}] * 4) == {"reward_mean": 2.0}
    r = jnp.asarray([0.0, 2.0, 0.0, 2.0, 1.0, 0.0, 1.0, 1.0])
    valid = jnp.asarray([False, True, False, True, True, True, True, True])
    assert float(grpo.zero_std_fraction(r, 4, valid=valid)) == 0.5  # group 1: its valid rows are all 2.0
    assert float(grpo.zero_std_fraction(r, 4)) == 0.0
    assert float(grpo.zero_std_fraction(r, 2, valid=valid)) == 0.75  # two groups of one valid row, one equal pair


def test_group_reward_std_is_trls_reward_std():
    """TRL logs ``reward_std`` as the mean over groups of ``torch.std`` (ddof 1) of each group's rewards; ours is
    ``group_reward_std`` (``reward_std`` stays the whole batch's population std). Invalid rows are left out, and a
    group with fewer than two valid rows is no group of the mean."""
    import torch

    from jaxdrive.train.grpo_trainer import reward_metrics

    r = np.random.default_rng(0).normal(size=12).astype(np.float32)
    trl = float(torch.tensor(r).view(-1, 4).std(dim=1).mean())
    assert float(grpo.mean_group_std(jnp.asarray(r), 4)) == pytest.approx(trl, rel=1e-6)
    valid = np.ones(12, bool)
    valid[[1, 4, 5, 6]] = False  # group 0: 3 valid rows, group 1: 1 (left out), group 2: 4
    want = np.mean([np.std(r[[0, 2, 3]], ddof=1), np.std(r[8:], ddof=1)])
    metrics = reward_metrics(r, valid, 4)
    assert metrics["group_reward_std"] == pytest.approx(want, rel=1e-6)
    assert metrics["reward_std"] == pytest.approx(np.std(r[valid]), rel=1e-6)
    assert np.isnan(float(grpo.mean_group_std(jnp.asarray(r), 4, valid=jnp.asarray(np.arange(12) % 4 == 0))))
