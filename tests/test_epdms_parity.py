"""End-to-end NAVSIM parity of ``jaxdrive.rules.score`` on all 61 fixture scenes, padding robustness, one compile per
padded shape, and the aggregation formulas on hand-made arrays."""

import copy
import glob
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdrive.data.scene_json import read_scene
from jaxdrive.rules import SubScores, gated_score, human_filter, normalize_progress, score
from jaxdrive.rules.epdms import aggregate
from jaxdrive.scene import PadSpec, batch_scenes
from conftest import EPDMS_FIXTURES, PRODUCT_CODEGEN

FIXTURES = str(EPDMS_FIXTURES)
FILES = sorted(glob.glob(f"{FIXTURES}/*.json")) + sorted(glob.glob(f"{FIXTURES}/sanity/*.json"))
EXACT = {"nc": "no_at_fault_collisions", "dac": "drivable_area_compliance", "ddc": "driving_direction_compliance",
         "tlc": "traffic_light_compliance", "ttc": "time_to_collision_within_bound", "lk": "lane_keeping",
         "hc": "history_comfort", "ec": "two_frame_extended_comfort", "multiplier": "multiplicative_metrics_prod"}
CLOSE = {"ep": "ego_progress", "pdm_score": "pdm_score", "epdms": "epdms", "raw_progress": "raw_progress_m"}
STEPS = {"nc_step": "at_fault_collision_step", "ttc_step": "ttc_violation_step"}

TRACES = {"n": 0}


def _score(scene, proposals):
    TRACES["n"] += 1  # runs only while tracing
    return score(scene, proposals)


SCORE = jax.jit(_score, compiler_options=PRODUCT_CODEGEN)  # NAVSIM parity of the code users run


@pytest.fixture(scope="module")
def scored():
    """All fixtures scored in two batches of one padded shape (one compile), plus their expected blocks."""
    scenes = [read_scene(f) for f in FILES]
    expected = [json.load(open(f))["expected"] for f in FILES]
    spec = PadSpec.fit(scenes)
    half = (len(scenes) + 1) // 2
    parts = [scenes[:half], scenes[half:] + scenes[:1]]  # equal batch sizes -> equal shapes
    outs = []
    for part in parts:
        scene, props, _ = batch_scenes(part, spec)
        outs.append(jax.device_get(SCORE(scene, props)))
    cat = jax.tree.map(lambda a, b: np.concatenate([a, b])[:len(scenes)], *outs)
    return scenes, expected, spec, cat


def test_parity_with_navsim_on_every_fixture_proposal(scored):
    scenes, expected, _, out = scored
    rows = {m: [0, 0, 0.0] for m in list(EXACT) + list(CLOSE) + list(STEPS)}  # agree, total, worst |diff|
    failures = []
    for b, (sc, exp) in enumerate(zip(scenes, expected)):
        for k, want in enumerate(exp["proposals"]):
            diag = want["diagnostics"]
            for m, key in list(EXACT.items()) + list(CLOSE.items()) + list(STEPS.items()):
                if m in STEPS:
                    w = diag[key]
                    w = -1 if w is None else w
                elif key in diag:
                    w = diag[key]
                elif key in want:
                    w = want[key]
                else:
                    continue  # sanity files have no EC / epdms
                g = float(getattr(out, m)[b, k])
                diff = abs(g - w)
                ok = diff <= 1e-4 if m in CLOSE else diff == 0
                rows[m][0] += ok
                rows[m][1] += 1
                rows[m][2] = max(rows[m][2], diff)
                if not ok:
                    failures.append(f"{sc.id}/{sc.proposal_names[k]} {m}: got {g}, NAVSIM {w}")
    table = "\n".join(f"{m:14s} {a:5d}/{n:<5d} worst |diff| {d:.3g}" for m, (a, n, d) in rows.items())
    print("\nper-metric agreement with NAVSIM:\n" + table)
    assert not failures, "\n" + table + "\n" + "\n".join(failures[:30])
    assert rows["nc"][1] == sum(len(e["proposals"]) for e in expected) == 507  # every proposal was compared
    assert rows["ec"][1] == sum(len(e["proposals"]) for e in expected if "epdms" in e["proposals"][0]) == 479


def test_hc_checks_match_diagnostics(scored):
    from jaxdrive.rules.comfort import HC_CHECKS
    scenes, expected, _, out = scored
    for b, (sc, exp) in enumerate(zip(scenes, expected)):
        want = [[p["diagnostics"]["history_comfort_checks"][c] for c in HC_CHECKS] for p in exp["proposals"]]
        np.testing.assert_array_equal(out.hc_checks[b, :sc.num_proposals], want, err_msg=sc.id)


def test_no_nan_with_heavy_padding_zero_agents_zero_lanes_and_no_recompilation(scored):
    scenes, _, spec, _ = scored
    traces = TRACES["n"]
    stripped = []
    for sc in scenes[:31]:
        s = copy.copy(sc)
        s.agents, s.lanes, s.traffic_lights = [], [], {}
        s.proposal_states = sc.proposal_states[:1]  # one real proposal, the rest padding
        s.proposal_names, s.proposal_families = sc.proposal_names[:1], sc.proposal_families[:1]
        s.previous_states = None
        stripped.append(s)
    scene, props, _ = batch_scenes(stripped, spec)
    out = jax.device_get(SCORE(scene, props))
    assert TRACES["n"] == traces == 1, "score was traced again for a batch of the same padded shape"
    real = np.asarray(props.valid)
    assert real[:, 0].all() and not real[:, 1:].any()
    for name in SubScores.__dataclass_fields__:
        value = np.asarray(getattr(out, name))
        if name == "ec" or value.dtype.kind == "f":
            assert np.all(np.isnan(value[~real])), name  # padded proposals are masked, never a number
        if name == "ec":
            assert np.all(np.isnan(value))  # no previous frame: EC undefined, weight dropped
        else:
            assert not np.any(np.isnan(value[real])), name
    np.testing.assert_array_equal(out.nc[real], 1.0)  # no agents: nothing to hit
    np.testing.assert_array_equal(out.ttc[real], 1.0)
    lanes_gone = out.multiplier[:, 0] * (5 * out.ep[:, 0] + 5 * out.ttc[:, 0] + 2 * out.lk[:, 0] + 2 * out.hc[:, 0]) / 14
    np.testing.assert_allclose(out.epdms[:, 0], lanes_gone, atol=1e-6)  # EC NaN -> /14


# ----------------------------------------------------------------------------------------------------------------------
# Aggregation on arrays
# ----------------------------------------------------------------------------------------------------------------------


def _subscores(**values):
    shape = np.shape(next(iter(values.values())))
    base = {name: np.ones(shape, np.float32) for name in SubScores.__dataclass_fields__}
    base["hc_checks"] = np.ones(shape + (6,), bool)
    for name in ("nc_step", "dac_step", "ddc_step", "tlc_step", "ttc_step", "lk_step"):
        base[name] = np.full(shape, -1, np.int32)
    base.update({k: np.asarray(v, np.float32) for k, v in values.items()})
    return SubScores(**{k: jnp.asarray(v) for k, v in base.items()})


def test_normalize_progress_modes():
    raw = jnp.array([[20.0, 40.0, 80.0], [3.0, 4.0, 100.0]])
    mult = jnp.array([[1.0, 0.5, 0.0], [1.0, 1.0, 1.0]])
    valid = jnp.array([[True, True, True], [True, True, False]])
    scene = np.asarray(normalize_progress(raw, mult, valid, "scene"))
    # scene 0: D = max(20, 20, 0) = 20 -> clip(raw / 20); scene 1: D = 4 <= 5 m (invalid 100 ignored) -> EP = 1
    np.testing.assert_allclose(scene, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    raw2 = jnp.array([[10.0, 40.0, 30.0], [3.0, 4.0, 100.0]])
    mult2 = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    np.testing.assert_allclose(normalize_progress(raw2, mult2, valid, "scene"), [[0.25, 1.0, 0.75], [1, 1, 1]])
    np.testing.assert_allclose(normalize_progress(raw2, mult2, valid, "batch"), [[0.25, 1.0, 0.75], [0.075, 0.1, 1]])
    ref = np.asarray(normalize_progress(raw2, mult2, valid, "reference", jnp.array([20.0, 8.0])))
    # per proposal D = max(R, raw x M): [20, 40, 20] and [8, 8, 100]
    np.testing.assert_allclose(ref, [[0.5, 1.0, 1.0], [0.375, 0.5, 1.0]])
    with pytest.raises(ValueError, match="reference"):
        normalize_progress(raw2, mult2, valid, "reference")
    with pytest.raises(ValueError, match="mode"):
        normalize_progress(raw2, mult2, valid, "max")


def test_epdms_formula_and_ec_weight_drop():
    s = _subscores(nc=[1.0, 0.5, 1.0], ddc=[1.0, 1.0, 0.5], ep=[0.8, 0.8, 0.8], ttc=[1.0, 0.0, 1.0],
                   lk=[0.0, 1.0, 1.0], hc=[1.0, 1.0, 0.0], ec=[0.0, 1.0, np.nan])
    got = np.asarray(gated_score(s))
    np.testing.assert_allclose(got, [(4 + 5 + 0 + 2 + 0) / 16, 0.5 * (4 + 0 + 2 + 2 + 2) / 16,
                                     0.5 * (4 + 5 + 2 + 0) / 14], rtol=1e-6)
    agg = aggregate(s, jnp.ones((3,), bool)[None])
    np.testing.assert_allclose(agg.pdm_score, [(4 + 5 + 0 + 2) / 14, 0.5 * (4 + 0 + 2 + 2) / 14,
                                               0.5 * (4 + 5 + 2 + 0) / 14], rtol=1e-6)


def test_gated_score_is_drivejudge_eq14():
    s = _subscores(nc=[0.0], dac=[1.0], ddc=[0.5], tlc=[1.0], ep=[0.6], ttc=[0.0], lk=[1.0], hc=[1.0], ec=[0.0])
    g = np.ones((1, 9), bool)
    g[0, 0] = False  # NC gated off: counts as 1
    g[0, 5] = False  # TTC gated off: leaves the average
    np.testing.assert_allclose(gated_score(s, g), [0.5 * (3.0 + 2 + 2 + 0) / 11], rtol=1e-6)
    none = np.zeros((1, 9), bool)
    none[0, 2] = True  # only DDC on, no weighted metric: the product alone
    np.testing.assert_allclose(gated_score(s, none), [0.5])


def test_human_filter_rules():
    agent = _subscores(nc=[0.0, 0.0], dac=[0.0, 0.0], ddc=[0.5, 0.5], ttc=[0.0, 0.0], lk=[0.0, 0.0], ec=[0.0, 0.0],
                       pdm_score=[0.1, 0.1])
    human = _subscores(nc=[0.0, 0.5], dac=[0.0, 1.0], ddc=[0.0, 0.5], ttc=[1.0, 0.0], lk=[0.0, 1.0], ec=[0.0, 0.0])
    out = human_filter(agent, human)
    np.testing.assert_array_equal(out.nc, [1.0, 0.0])  # only exact zeros filter: human 0.5 does not
    np.testing.assert_array_equal(out.dac, [1.0, 0.0])
    np.testing.assert_array_equal(out.ddc, [1.0, 0.5])
    np.testing.assert_array_equal(out.ttc, [0.0, 1.0])
    np.testing.assert_array_equal(out.lk, [1.0, 0.0])
    np.testing.assert_array_equal(out.ec, [0.0, 0.0])  # EC is never filtered
    np.testing.assert_array_equal(out.multiplier, [1.0, 0.0])
    np.testing.assert_array_equal(out.pdm_score, agent.pdm_score)  # NAVSIM leaves pdm_score stale
    np.testing.assert_allclose(out.epdms, [(5 + 0 + 2 + 2 + 0) / 16, 0.0], rtol=1e-6)
    off = human_filter(agent, human, apply=jnp.array([False, False]))
    np.testing.assert_array_equal(off.nc, agent.nc)


def test_pdms_v11_formula():
    s = _subscores(nc=[1.0, 0.5], dac=[1.0, 1.0], ddc=[0.0, 0.0], tlc=[0.0, 1.0], raw_progress=[30.0, 40.0],
                   ttc=[1.0, 0.0], comfort_v1=[1.0, 0.0])
    out = aggregate(s, jnp.array([True, True]))
    # v1.1 ignores DDC/TLC; EP_v1 = raw*M1 / max(raw*M1) = [30/30, 20/30]
    np.testing.assert_allclose(out.pdms, [(5 + 5 + 2) / 12, 0.5 * (5 * 20 / 30) / 12], rtol=1e-6)
