"""Parity of jaxdrive.sim with NAVSIM's simulation step on shared/fixtures/tracker (spec/tracker-json.md).

Tolerances are the spec's §5 table: the fixtures store simulated x, y to 1e-4 m and other values to 6 significant
digits, so float64 results must agree to that rounding.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdrive.sim import constants as C
from jaxdrive.sim import host, simulate_local, simulate_trajectories, track_reference
from jaxdrive.sim.interpolate import reference_states
from jaxdrive.sim.lqr import banded_difference_matrix
from jaxdrive.sim.state import FIELD_NAMES
from jaxdrive.sim.times import knot_and_query_offsets_us
from conftest import SHARED

FIXTURES = SHARED / "fixtures" / "tracker"


@pytest.fixture(scope="module")
def cases():
    index = json.loads((FIXTURES / "index.json").read_text())
    loaded = [json.loads((FIXTURES / f"{row['case_id']}.json").read_text()) for row in index["cases"]]
    assert len(loaded) == 30
    stack = lambda key: np.array([c[key] for c in loaded], dtype=np.float64)  # noqa: E731
    return {
        "index": index,
        "cases": loaded,
        "initial": stack("initial_ego_state"),
        "poses": stack("submitted_poses"),
        "t0": np.array([c["t0_us"] for c in loaded], dtype=np.int64),
        "reference": stack("reference_states"),
        "simulated": stack("simulated_states"),
        "far": np.array([c["scenario"]["far_origin"] for c in loaded]),
    }


def _report(label, got, want, fields, atol, rtol=0.0, angular=False):
    """Assert |got − want| <= atol + rtol·|want| on state fields `fields`; print the worst case per field.

    With `angular`, differences are wrapped into (−π, π] first (−π and π − ε are the same heading).
    """
    diff = got[..., fields] - want[..., fields]
    err = np.abs(np.arctan2(np.sin(diff), np.cos(diff)) if angular else diff)
    excess = err - (atol + rtol * np.abs(want[..., fields]))
    for i, f in enumerate(fields):
        worst = np.unravel_index(np.argmax(err[..., i]), err.shape[:-1])
        print(f"{label} {FIELD_NAMES[f]}: worst |error| {err[..., i].max():.3g} (case {worst[0]}, state {worst[-1]})")
    at = np.unravel_index(np.argmax(excess), excess.shape)
    assert excess.max() <= 0, f"{label}: {err[at]:.3g} at {at} exceeds atol {atol} + rtol {rtol}·|want|"


XY, HEADING, OTHER = [0, 1], [2], list(range(3, 11))


def _local(cases):
    initial = cases["initial"].copy()
    initial[:, :2] = 0.0
    return initial, cases["initial"][:, :2]


def test_constants_match_navsim_objects(cases):
    k = cases["index"]["constants"]
    assert k["tracker"]["discretization_time"] == C.TRACKER_DT
    assert k["tracker"]["tracking_horizon"] == C.TRACKING_HORIZON
    assert tuple(k["tracker"]["q_lateral"]) == C.Q_LATERAL
    assert k["tracker"]["jerk_penalty"] == C.JERK_PENALTY
    assert k["tracker"]["initial_curvature_penalty"] == C.INITIAL_CURVATURE_PENALTY
    assert k["tracker"]["curvature_rate_penalty"] == C.CURVATURE_RATE_PENALTY
    assert k["tracker"]["stopping_velocity"] == C.STOPPING_VELOCITY
    assert k["tracker"]["wheel_base"] == k["motion_model"]["wheel_base"] == C.WHEEL_BASE
    assert k["motion_model"]["max_steering_angle"] == C.MAX_STEERING_ANGLE
    assert k["motion_model"]["accel_time_constant"] == C.ACCEL_TIME_CONSTANT
    assert k["motion_model"]["steering_angle_time_constant"] == C.STEERING_ANGLE_TIME_CONSTANT
    assert C.MOTION_MODEL_DT == 0.09999999999999999


def test_banded_matrix_is_navsims_acceleration_ridge():
    r = np.concatenate([np.zeros((38, 1)), banded_difference_matrix(38)], axis=1)
    z = np.random.default_rng(0).normal(size=40)
    a = z[1:]
    np.testing.assert_array_equal(r @ z, np.concatenate([-a[:37], [a[38] - a[37]]]))


def test_time_grids_match_fixtures(cases):
    knots, queries = knot_and_query_offsets_us(cases["t0"])
    np.testing.assert_array_equal(knots, [c["knot_offsets_us"] for c in cases["cases"]])
    np.testing.assert_array_equal(queries, [c["query_offsets_us"] for c in cases["cases"]])
    assert (queries != knot_and_query_offsets_us(0)[1]).any(axis=-1).sum() == 22  # µs jitter is exercised


def test_reference_parity(cases):
    initial, origin = _local(cases)
    knots, queries = knot_and_query_offsets_us(cases["t0"])
    with jax.enable_x64(True):
        ref = np.array(jax.jit(jax.vmap(reference_states))(initial, cases["poses"], knots * 1.0, queries * 1.0))
    ref[..., :2] += origin[:, None]
    want = cases["reference"]
    _report("reference", ref, want, XY, atol=1e-8)
    _report("reference", ref, want, HEADING, atol=1e-10)
    _report("reference", ref, want, OTHER, atol=1e-6, rtol=1e-5)
    assert (ref[..., 2] >= -np.pi).all() and (ref[..., 2] < np.pi).all()


def test_tracker_intermediates_parity(cases):
    """Profile fits and per-step commands on NAVSIM's own (stored, full-precision) reference."""
    initial, origin = _local(cases)
    reference = cases["reference"][..., :3].copy()
    reference[..., :2] -= origin[:, None]
    with jax.enable_x64(True):
        states, trace = jax.jit(jax.vmap(track_reference))(initial, reference)
        trace = jax.tree.map(np.asarray, trace)
    debug = lambda key: np.array([c["tracker_debug"][key] for c in cases["cases"]])  # noqa: E731
    pairs = {
        "velocity_profile": trace.profiles.velocity,
        "acceleration_profile": trace.profiles.acceleration,
        "curvature_profile": trace.profiles.curvature,
        "curvature_rate_profile": trace.profiles.curvature_rate,
        "reference_velocity": trace.commands.reference_velocity,
        "accel_cmd": trace.commands.accel,
        "steering_rate_cmd": trace.commands.steering_rate,
        "lateral_state": trace.commands.lateral_state,
    }
    for key, got in pairs.items():
        want = debug(key)
        assert got.shape == want.shape, key
        err = np.abs(got - want) - (1e-6 + 1e-5 * np.abs(want))
        assert err.max() <= 0, f"{key}: worst excess {err.max():.3g}"
    np.testing.assert_array_equal(trace.commands.stopping, debug("stopping"))
    assert debug("stopping").any() and not debug("stopping").all()
    sim = np.array(states)
    sim[..., :2] += origin[:, None]
    _report("tracker-only", sim, cases["simulated"], XY, atol=1e-4)
    _report("tracker-only", sim, cases["simulated"], HEADING, atol=1e-5, angular=True)


def test_simulated_parity_float64_host(cases):
    """The public entry point, all 30 cases in one batch, global (incl. UTM-scale) coordinates."""
    assert cases["far"].sum() >= 10 and (~cases["far"]).sum() >= 5
    got = simulate_trajectories(cases["initial"], cases["poses"], cases["t0"])
    want = cases["simulated"]
    assert got.dtype == np.float64 and got.shape == (30, 41, 11)
    _report("float64", got, want, XY, atol=1e-4)
    _report("float64", got, want, HEADING, atol=1e-5, angular=True)
    _report("float64", got, want, OTHER, atol=1e-6, rtol=1e-5)
    far = cases["far"]
    assert np.abs(got[far, :, :2] - want[far, :, :2]).max() < 1e-4
    assert (want[..., 3] < 0).any() and (got[..., 3] < 0).any()  # negative speeds are reproduced, not clamped
    assert np.isclose(np.abs(got[..., 7]).max(), C.MAX_STEERING_ANGLE)  # the steering clip is exercised


def test_simulated_parity_float32_device(cases):
    """The jittable device path in float32 on re-centred inputs (what the scoring pipeline runs)."""
    initial, origin = _local(cases)
    knots, queries = knot_and_query_offsets_us(cases["t0"])
    got = jax.jit(simulate_local)(
        jnp.asarray(initial, jnp.float32), jnp.asarray(cases["poses"], jnp.float32), knots, queries
    )
    assert got.dtype == jnp.float32
    got = np.asarray(got, np.float64)
    got[..., :2] += origin[:, None]
    want = cases["simulated"]
    _report("float32", got, want, XY, atol=2e-4)
    _report("float32", got, want, HEADING, atol=2e-5, angular=True)
    _report("float32", got, want, OTHER, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_batch_prefixes(cases, batch):
    n = int(np.prod(batch, dtype=int))
    initial = cases["initial"][:n].reshape(batch + (11,))
    poses = cases["poses"][:n].reshape(batch + (8, 3))
    t0 = cases["t0"][:n].reshape(batch)
    got = simulate_trajectories(initial, poses, t0)
    assert got.shape == batch + (41, 11) and got.dtype == np.float64
    np.testing.assert_allclose(
        got.reshape(n, 41, 11), cases["simulated"][:n], atol=1e-4, rtol=1e-5
    )


def test_one_initial_state_broadcasts_over_proposals(cases):
    initial = cases["initial"][:2, None]  # [B=2, 1, 11]
    poses = np.stack([cases["poses"][:2], cases["poses"][2:4]], axis=1)  # [2, K=2, 8, 3]
    got = simulate_trajectories(initial, poses)
    assert got.shape == (2, 2, 41, 11)
    for b in range(2):
        for k in range(2):
            single = simulate_trajectories(initial[b, 0], poses[b, k])
            np.testing.assert_allclose(got[b, k], single, rtol=1e-12, atol=1e-12)


def test_jit_compiles_once_per_shape(cases):
    traces = []

    @jax.jit
    def counted(initial, poses):
        traces.append(1)
        return simulate_local(initial, poses)

    initial, _ = _local(cases)
    first = jnp.asarray(initial[:4].reshape(2, 2, 11), jnp.float32)
    poses = jnp.asarray(cases["poses"], jnp.float32)
    counted(first, poses[:4].reshape(2, 2, 8, 3)).block_until_ready()
    assert len(traces) == 1
    again = counted(first + 1.0, poses[4:8].reshape(2, 2, 8, 3))
    assert len(traces) == 1 and np.isfinite(np.asarray(again)).all()

    # Host entry point: ragged batch sizes within one bucket reuse one compiled program.
    simulate_trajectories(cases["initial"][:5], cases["poses"][:5], cases["t0"][:5])
    compiled = host._simulate_jit._cache_size()
    simulate_trajectories(cases["initial"][5:12].reshape(7, 11), cases["poses"][5:12], cases["t0"][5:12])
    simulate_trajectories(cases["initial"][12], cases["poses"][12], cases["t0"][12])
    assert host._simulate_jit._cache_size() == compiled


@pytest.mark.parametrize(
    "initial_shape, poses_shape, match",
    [
        ((10,), (8, 3), r"initial_states: expected shape \[\.\.\., 11\], got \[10\]"),
        ((11,), (7, 3), r"poses: expected shape \[\.\.\., 8, 3\], got \[7, 3\]"),
        ((11,), (3,), r"poses: expected shape \[\.\.\., 8, 3\], got \[3\]"),
        ((3, 11), (2, 8, 3), r"initial_states \[3, 11\], poses \[2, 8, 3\].*broadcast"),
    ],
)
def test_bad_shapes_are_named(initial_shape, poses_shape, match):
    with pytest.raises(ValueError, match=match):
        simulate_trajectories(np.zeros(initial_shape), np.zeros(poses_shape))


def test_bad_values_are_named():
    good_initial, good_poses = np.zeros(11), np.zeros((8, 3))
    bad_poses = good_poses.copy()
    bad_poses[4, 2] = np.nan
    with pytest.raises(ValueError, match=r"poses: expected finite values, got nan at index \(4, 2\)"):
        simulate_trajectories(good_initial, bad_poses)
    bad_initial = good_initial.copy()
    bad_initial[0] = np.inf
    with pytest.raises(ValueError, match=r"initial_states: expected finite values, got inf"):
        simulate_trajectories(bad_initial, good_poses)
    with pytest.raises(ValueError, match=r"initial_states: expected a real numeric array"):
        simulate_trajectories(["a"] * 11, good_poses)
    with pytest.raises(ValueError, match=r"t0_us: expected integer microseconds"):
        simulate_trajectories(good_initial, good_poses, t0_us=0.5)



def test_dense_reference_tracking_refuses_non_finite_input():
    """``track_poses`` (the dense 0.1 s path of PDM-Closed, vocabularies and cached references) names a NaN in its
    inputs; it used to return NaN states silently, which the scorer then turned into arbitrary sub-scores."""
    from jaxdrive.sim.reference import track_poses

    reference = np.zeros((2, C.NUM_STATES, 3))
    reference[:, :, 0] = np.arange(C.NUM_STATES) * 0.5
    assert np.all(np.isfinite(track_poses(np.zeros((2, 11)), reference)))
    bad = reference.copy()
    bad[1, 7, 2] = np.nan
    with pytest.raises(ValueError, match=r"reference_poses: expected finite values, got nan at index \(1, 7, 2\)"):
        track_poses(np.zeros((2, 11)), bad)
    initial = np.zeros((2, 11))
    initial[0, 3] = np.inf
    with pytest.raises(ValueError, match=r"initial_states: expected finite values, got inf"):
        track_poses(initial, reference)

def test_parked_ego_creeps_and_stops_controller(cases):
    """All-zero poses: the stopping controller decays the speed; no NaN from the singular-looking fits."""
    parked = [i for i, c in enumerate(cases["cases"]) if not np.any(c["submitted_poses"])]
    assert parked
    got = simulate_trajectories(cases["initial"][parked], cases["poses"][parked])
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[..., :2], cases["simulated"][parked][..., :2], atol=1e-4)
