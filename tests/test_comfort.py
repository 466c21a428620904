"""HC / EC kernels and the Savitzky-Golay matrices: scipy equivalence, NAVSIM fixture parity, hand-made cases."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.signal import savgol_filter

from jaxdrive.data.scene_json import read_scene
from jaxdrive.rules.comfort import (HC_CHECKS, extended_comfort, extended_comfort_rms, history_comfort,
                                    history_comfort_signals)
from jaxdrive.rules.savgol import savgol_matrix
from jaxdrive.scene import StateIndex as S, batch_scenes, pad_history
from reference_collision import comfort_signals, extended_comfort_ref, extended_comfort_rms_ref, history_comfort_ref
from conftest import EPDMS_FIXTURES

FIXTURES = str(EPDMS_FIXTURES)
FILES = sorted(glob.glob(os.path.join(FIXTURES, "*.json"))) + sorted(glob.glob(os.path.join(FIXTURES, "sanity", "*.json")))
CONFIGS = [(8, 2, 0), (15, 2, 1), (5, 2, 1), (5, 3, 2), (5, 2, 2), (41, 2, 0), (41, 2, 1)]


@pytest.mark.parametrize("length", [36, 41, 55])
def test_savgol_matrix_equals_scipy_on_identity_and_random_signals(length):
    rng = np.random.default_rng(length)
    x = rng.normal(size=(7, length)) * rng.uniform(0.1, 10, size=(7, 1))
    for window, order, deriv in CONFIGS:
        if window > length:
            continue
        r = savgol_matrix(length, window, order, deriv, 0.1)
        ident = savgol_filter(np.eye(length), window, order, deriv=deriv, delta=0.1, mode="interp", axis=0)
        assert np.abs(r - ident).max() < 1e-11 * max(1.0, np.abs(ident).max()), (window, order, deriv)
        want = savgol_filter(x, window, order, deriv=deriv, delta=0.1, mode="interp", axis=-1)
        np.testing.assert_allclose(x @ r.T, want, rtol=1e-10, atol=1e-10)


def test_savgol_even_window_half_sample_shift():
    """Window 8: interior output i uses inputs i-3 .. i+4 (scipy's pos = 3.5)."""
    r = savgol_matrix(41, 8, 2)
    row = r[20]
    assert np.all(row[17:25] != 0) and np.all(row[:17] == 0) and np.all(row[25:] == 0)
    ramp = np.arange(41.0)
    assert np.isclose((r @ ramp)[20], 20.5)  # a line is reproduced half a sample ahead


@pytest.fixture(scope="module")
def fixture_batch():
    scenes = [read_scene(f) for f in FILES]
    raw = [json.load(open(f))["expected"] for f in FILES]
    scene, props, info = batch_scenes(scenes)
    return scenes, raw, scene, props, info


def test_history_padding_matches_fixture():
    for f in FILES[::7]:
        sc, raw = read_scene(f), json.load(open(f))
        np.testing.assert_allclose(pad_history(sc.history_states), raw["expected"]["history_padded_states"], atol=1e-9)


def test_hc_and_ec_parity_with_navsim_fixtures(fixture_batch):
    scenes, raw, scene, props, info = fixture_batch
    hc_fn = jax.jit(jax.vmap(history_comfort))
    ec_fn = jax.jit(jax.vmap(extended_comfort))
    hc, checks = map(np.asarray, hc_fn(scene.history_padded, props.states))
    ec = np.asarray(ec_fn(props.states, props.previous, props.has_previous))
    n_hc = n_ec = 0
    for b, (sc, exp) in enumerate(zip(scenes, raw)):
        k = sc.num_proposals
        want = np.array([[p["diagnostics"]["history_comfort_checks"][c] for c in HC_CHECKS] for p in exp["proposals"]])
        np.testing.assert_array_equal(checks[b, :k], want, err_msg=sc.id)
        np.testing.assert_array_equal(hc[b, :k], [p["history_comfort"] for p in exp["proposals"]], err_msg=sc.id)
        n_hc += k
        if sc.previous_states is not None:
            np.testing.assert_array_equal(ec[b, :k], [p["two_frame_extended_comfort"] for p in exp["proposals"]],
                                          err_msg=sc.id)
            n_ec += k
        else:
            assert np.all(np.isnan(ec[b]))
    assert n_hc > 500 and n_ec > 400
    assert not np.any(np.isnan(hc)) and not np.any(np.isnan(ec[np.asarray(props.has_previous)]))


def test_float32_signals_close_to_scipy_and_float32_mode_agrees(fixture_batch):
    scenes, raw, scene, props, info = fixture_batch
    sig = jax.jit(jax.vmap(history_comfort_signals))
    with jax.enable_x64(True):
        got = np.asarray(sig(scene.history_padded, props.states))
    assert got.dtype == np.float64
    worst = 0.0
    for b, sc in enumerate(scenes):
        seq = np.concatenate([np.broadcast_to(pad_history(sc.history_states), (sc.num_proposals, 14, 11)),
                              sc.proposal_states], axis=1)
        ref = comfort_signals(seq)
        ref = np.stack([ref[c] for c in HC_CHECKS], axis=1)
        worst = max(worst, np.abs(got[b, :sc.num_proposals] - ref).max())
    assert worst < 5e-4, worst  # float32 inputs: heading error ~1e-7 rad, x 1/0.07 for yaw acceleration
    hc32 = jax.jit(jax.vmap(lambda h, s: history_comfort(h, s, precision="float32")))(scene.history_padded, props.states)
    hc64 = jax.jit(jax.vmap(history_comfort))(scene.history_padded, props.states)
    np.testing.assert_array_equal(np.asarray(hc32[1]), np.asarray(hc64[1]))


def test_float64_inputs_follow_navsim_exactly_including_a_tie():
    """With float64 inputs the signals equal scipy's to 1e-12 except at exact 8-decimal rounding midpoints (common for
    the window-8 smoothing of 4-decimal data: its weights have power-of-two denominators), where the summation order
    decides the rounding direction: one unit of the 8th decimal (two for a jerk, which inherits it). The exact tie of
    scene_0039 (yaw acceleration == 1.93, strictly out of bounds) is reproduced."""
    sc = read_scene(os.path.join(FIXTURES, "scene_0039.json"))
    hist = pad_history(sc.history_states)
    seq = np.concatenate([np.broadcast_to(hist, (sc.num_proposals, 14, 11)), sc.proposal_states], axis=1)
    ref = comfort_signals(seq)
    ref = np.stack([ref[c] for c in HC_CHECKS], axis=1)
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(history_comfort_signals)(jnp.asarray(hist), jnp.asarray(sc.proposal_states)))
        rms = np.asarray(extended_comfort_rms(jnp.asarray(sc.proposal_states), jnp.asarray(sc.previous_states)))
    diff = np.abs(got - ref)
    assert diff.max() <= 2.01e-8
    yaw = [HC_CHECKS.index("yaw_acceleration"), HC_CHECKS.index("yaw_rate")]
    assert diff[:, yaw].max() < 1e-12  # heading derivatives have no midpoints here: exact
    k = sc.proposal_names.index("wrong_way")
    yaw_acc = HC_CHECKS.index("yaw_acceleration")
    assert ref[k, yaw_acc, 40] == 1.93 and got[k, yaw_acc, 40] == 1.93
    np.testing.assert_allclose(rms, extended_comfort_rms_ref(sc.proposal_states, sc.previous_states), atol=1e-9)


def _cruise(v=10.0, n=41, heading=0.3):
    s = np.zeros((n, 11))
    t = np.arange(n) * 0.1
    s[:, S.X] = v * t * np.cos(heading)
    s[:, S.Y] = v * t * np.sin(heading)
    s[:, S.HEADING] = heading
    s[:, S.VELOCITY_X] = v
    return s


def _hist(v=10.0, heading=0.3):
    h = np.zeros((14, 11))
    h[:, S.HEADING] = heading
    h[:, S.VELOCITY_X] = v
    return h


def test_jerk_spike_fails_only_the_lon_jerk_check():
    """Acceleration flips from +1.5 to -3.3 m/s^2 within 0.1 s: accelerations stay in bounds after smoothing, the
    longitudinal jerk (~ -4.8 m/s^3) does not; the jerk *magnitude* passes (|a| is rectified: 1.5 -> 0 -> 3.3)."""
    hist = _hist()
    hist[:, S.ACCELERATION_X] = 1.5
    smooth = _cruise()
    smooth[:, S.ACCELERATION_X] = 1.5 - np.clip(np.arange(41) - 10, 0, 30) * 0.01  # jerk -0.1 m/s^3
    spike = _cruise()
    spike[:20, S.ACCELERATION_X] = 1.5
    spike[20:, S.ACCELERATION_X] = -3.3
    states = np.stack([smooth, spike])
    hc, checks = map(np.asarray, jax.jit(history_comfort)(jnp.asarray(hist, jnp.float32),
                                                           jnp.asarray(states, jnp.float32)))
    np.testing.assert_array_equal(hc, [1.0, 0.0])
    assert [name for name, ok in zip(HC_CHECKS, checks[1]) if not ok] == ["lon_jerk"]
    np.testing.assert_array_equal(checks, history_comfort_ref(hist, states))


def test_hc_bounds_are_strict_on_an_exact_constant():
    """A constant deceleration of exactly -4.05 m/s^2 fails (strict bound); -4.04 passes."""
    at, inside = _cruise(), _cruise()
    at[:, S.ACCELERATION_X] = -4.05
    inside[:, S.ACCELERATION_X] = -4.04
    hist_at, hist_in = _hist(), _hist()
    hist_at[:, S.ACCELERATION_X] = -4.05
    hist_in[:, S.ACCELERATION_X] = -4.04
    with jax.enable_x64(True):
        f = jax.jit(history_comfort)
        assert float(f(jnp.asarray(hist_at), jnp.asarray(at[None]))[0][0]) == 0.0
        assert float(f(jnp.asarray(hist_in), jnp.asarray(inside[None]))[0][0]) == 1.0


def test_extended_comfort_cases():
    cur = _cruise()
    prev = np.concatenate([_cruise()[:5], cur[:36]])  # previous plan = the same motion, 0.5 s earlier
    yawing = cur.copy()
    yawing[:, S.HEADING] = 0.3 + 0.05 * np.sin(np.arange(41) * 0.5)  # wobbling heading: yaw-rate difference
    braking = cur.copy()
    braking[:, S.ACCELERATION_X] = -2.0  # acceleration magnitude differs by 2 m/s^2
    states = np.stack([cur, yawing, braking, cur])
    previous = np.stack([prev, prev, prev, prev])
    has_prev = np.array([True, True, True, False])
    ec = np.asarray(jax.jit(extended_comfort)(jnp.asarray(states, jnp.float32), jnp.asarray(previous, jnp.float32),
                                              jnp.asarray(has_prev)))
    assert ec[0] == 1.0 and ec[1] == 0.0 and ec[2] == 0.0 and np.isnan(ec[3])
    np.testing.assert_array_equal(ec[:3], extended_comfort_ref(states[:3], previous[:3]))
    rms = np.asarray(extended_comfort_rms(jnp.asarray(states, jnp.float32), jnp.asarray(previous, jnp.float32)))
    assert np.all(rms[0] == 0.0)


def test_random_states_agree_with_scipy_reference():
    rng = np.random.default_rng(0)
    k = 64
    states = np.zeros((k, 41, 11))
    scale = rng.uniform(0.2, 2.0, (k, 1))  # from calm to harsh
    states[..., S.ACCELERATION_X] = np.cumsum(rng.normal(0, 0.1, (k, 41)), axis=1) * scale
    states[..., S.ACCELERATION_Y] = rng.normal(0, 0.5, (k, 41)) * scale
    states[..., S.ANGULAR_VELOCITY] = rng.normal(0, 0.1, (k, 41)) * scale
    states[..., S.ANGULAR_ACCELERATION] = rng.normal(0, 0.1, (k, 41)) * scale
    heading = np.cumsum(rng.normal(0, 0.003, (k, 41)) * scale, axis=1) + 3.1
    states[..., S.HEADING] = (heading + np.pi) % (2 * np.pi) - np.pi  # wrapped: exercises the unwrap
    hist = _hist(heading=3.1)
    previous = states + rng.normal(0, 0.02, states.shape)
    with jax.enable_x64(True):
        sig = np.asarray(jax.jit(history_comfort_signals)(jnp.asarray(hist), jnp.asarray(states)))
        rms = np.asarray(jax.jit(extended_comfort_rms)(jnp.asarray(states), jnp.asarray(previous)))
    seq = np.concatenate([np.broadcast_to(hist, (k, 14, 11)), states], axis=1)
    ref = comfort_signals(seq)
    np.testing.assert_allclose(sig, np.stack([ref[c] for c in HC_CHECKS], axis=1), atol=3e-8, rtol=0)
    np.testing.assert_allclose(rms, extended_comfort_rms_ref(states, previous), atol=1e-7)
    hc = np.asarray(jax.jit(history_comfort)(jnp.asarray(hist, jnp.float32), jnp.asarray(states, jnp.float32))[1])
    assert np.mean(hc == history_comfort_ref(hist, states)) == 1.0
    assert 0 < hc.all(axis=-1).sum() < k  # the random set has both outcomes
