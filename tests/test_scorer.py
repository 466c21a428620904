"""``jaxdrive.score``: the jittable scorer with the exact broad phase inside the program.

* all 61 NAVSIM fixtures scored inside a user-level ``jax.jit`` training-step-like function that uses the scorer as a
  reward agree with NAVSIM (the parity test's tolerances), through the culled branch (overflow flag False);
* forced tiny capacities overflow on device, fall back to the unculled kernels and give bit-identical rows;
* padded proposals and filler scenes score NaN and need no culling capacity;
* static shape errors name the argument; ``import jaxdrive`` stays light.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from jaxdrive.broadphase import PackSpec
from jaxdrive.broadphase.device import bit_words, compact, needs, nth_set_bit, pack_on_device, prefix_count
from jaxdrive.data.scene_json import read_scene
from jaxdrive.rules import epdms as epdms_rules
from jaxdrive.rules.epdms import SubScores
from jaxdrive.scene import PadSpec, batch_scenes
from jaxdrive.scorer import capacity_for, default_capacity, score_with_overflow
from conftest import EPDMS_FIXTURES

FILES = sorted(glob.glob(f"{EPDMS_FIXTURES}/*.json")) + sorted(glob.glob(f"{EPDMS_FIXTURES}/sanity/*.json"))
EXACT = {"nc": "no_at_fault_collisions", "dac": "drivable_area_compliance", "ddc": "driving_direction_compliance",
         "tlc": "traffic_light_compliance", "ttc": "time_to_collision_within_bound", "lk": "lane_keeping",
         "hc": "history_comfort", "ec": "two_frame_extended_comfort"}
CLOSE = {"ep": "ego_progress", "pdm_score": "pdm_score", "epdms": "epdms"}
FILLERS = 3  # filler scenes (no valid proposal) that round the batch up to 64


@pytest.fixture(scope="module")
def batch():
    scenes = [read_scene(f) for f in FILES]
    assert len(scenes) == 61
    sc, pr, _ = batch_scenes(scenes + scenes[:FILLERS], PadSpec.fit(scenes))
    pr = pr.replace(valid=pr.valid & (np.arange(len(scenes) + FILLERS) < len(scenes))[:, None])
    expected = [json.load(open(f))["expected"]["proposals"] for f in FILES]
    return scenes, expected, sc, pr, capacity_for(needs(sc, pr))


@pytest.fixture(scope="module")
def trained(batch):
    """The fixtures scored by a user's jitted step that takes the scorer's EPDMS as its reward."""
    _, _, sc, pr, capacity = batch

    @jax.jit
    def train_step(offset, scene, proposals):
        moved = proposals.replace(states=proposals.states.at[..., :2].add(offset))  # a policy's output
        out = jaxdrive.score(scene, moved, capacity=capacity, ep_mode="scene")
        reward = jnp.where(moved.valid, out.epdms, 0.0).sum() / moved.valid.sum()
        return -reward, out, pack_on_device(scene, moved, capacity)[1]

    loss, out, overflow = train_step(jnp.zeros(2, jnp.float32), sc, pr)
    return float(loss), jax.device_get(out), bool(overflow)


def test_fixtures_through_a_user_jitted_training_step_match_navsim(batch, trained):
    scenes, expected, _, pr, _ = batch
    loss, out, overflow = trained
    assert not overflow, "the fixtures must go through the culled branch"
    failures, compared = [], 0
    for b, (sc, exp) in enumerate(zip(scenes, expected)):
        for k, want in enumerate(exp):
            for m, key in list(EXACT.items()) + list(CLOSE.items()):
                w = want["diagnostics"].get(key, want.get(key))
                if w is None:
                    continue  # sanity files have no EC / epdms
                g = float(getattr(out, m)[b, k])
                compared += 1
                if not (abs(g - w) <= 1e-4 if m in CLOSE else g == w):
                    failures.append(f"{sc.id}/{k} {m}: got {g}, NAVSIM {w}")
    assert not failures, "\n".join(failures[:30])
    assert compared > 507 * 8
    valid = np.asarray(pr.valid)
    np.testing.assert_allclose(loss, -out.epdms[valid].mean(), rtol=1e-6)


def test_padded_proposals_and_filler_scenes_are_nan_and_need_no_capacity(batch, trained):
    scenes, _, sc, pr, _ = batch
    _, out, _ = trained
    valid = np.asarray(pr.valid)
    assert not valid[len(scenes):].any() and not valid.all()
    for name in SubScores.__dataclass_fields__:
        v = np.asarray(getattr(out, name))[~valid]
        if name == "hc_checks":
            assert not v.any()
        elif name.endswith("_step"):
            assert (v == -1).all(), name
        else:
            assert np.isnan(v).all(), name
    nothing = pr.replace(valid=np.zeros_like(valid))
    spent = needs(sc, nothing)
    assert all(getattr(spent, f.name) == 1 for f in dataclasses.fields(PackSpec) if f.name != "centerline"), spent


@pytest.mark.slow  # a second compile of the whole scorer
def test_forced_tiny_capacities_fall_back_on_device_with_identical_rows(batch, trained):
    _, _, sc, pr, capacity = batch
    _, culled, _ = trained
    tiny = dataclasses.replace(capacity, lane_tiles=1, ttc_pairs=1)
    out, overflow = jax.jit(lambda s, p: score_with_overflow(s, p, capacity=tiny))(sc, pr)
    assert bool(overflow)
    _same_rows(out, culled)  # the unculled branch: the same rows


def _same_rows(a: SubScores, b: SubScores) -> None:
    """Every rule decision identical; float32 aggregates to 1 ulp (two compiles may fuse the weighted sums
    differently)."""
    for name in SubScores.__dataclass_fields__:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        if name in ("ep", "raw_progress", "pdm_score", "epdms", "pdms", "comfort_v1"):
            np.testing.assert_allclose(x, y, rtol=2e-7, atol=1e-7, err_msg=name)
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.slow  # a compile of the scorer under x64
def test_the_scorer_with_jax_enable_x64_on_scores_as_without_it(batch, trained):
    """A user's process with ``jax_enable_x64`` on could not trace ``jaxdrive.score`` at all, even on a
    ``batch_scenes`` batch (int64 indices met int32 ones in a ``lax.concatenate`` of NC's contact windows). Now the
    kernels run with x64 off inside the scorer and float64 states are cast to float32: the fixtures' rows equal the
    x64-off run's."""
    _, _, sc, pr, capacity = batch
    with jax.enable_x64(True):
        states = np.asarray(pr.states, np.float64)  # e.g. a float64 policy's output
        step = jax.jit(lambda s, p: jaxdrive.score(s, p, capacity=capacity, ep_mode="scene"))
        out = jax.device_get(step(sc, pr.replace(states=states)))
    assert out.epdms.dtype == np.float32 and out.nc_step.dtype == np.int32
    _same_rows(out, trained[1])


@pytest.mark.slow  # a second compile of the whole scorer
def test_the_accelerator_loop_settings_score_the_fixtures_identically(batch, trained, monkeypatch):
    """Traced as for an accelerator (``jax.default_backend`` reads "gpu", on this CPU): loop blocks of a capacity /
    ``ACCELERATOR_TRIPS``, ``searchsorted`` and LK's run scan unrolled (``broadphase.blocks``). Every fixture row
    equals the CPU-traced scorer's, and the tile and contact loops take at most ``ACCELERATOR_TRIPS`` steps."""
    from jaxdrive.broadphase import blocks, contacts, group_rows, tiles

    _, _, sc, pr, capacity = batch
    _, culled, _ = trained
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert blocks.search_method() == "scan_unrolled" and not blocks.on_cpu()
    _same_rows(jax.device_get(jax.jit(lambda s, p: jaxdrive.score(s, p, capacity=capacity))(sc, pr)), culled)
    packed, _ = jax.jit(lambda s, p: pack_on_device(s, p, capacity))(sc, pr)
    group = lambda t: jax.tree_util.tree_map(lambda x: group_rows(x, 1), t)
    trips = [int(tiles.used_blocks(group(getattr(packed.map, n)))) for n in ("areas", "lanes")]
    trips += [int(contacts.used_blocks(group(getattr(packed.agents, n)))) for n in ("nc", "ttc")]
    assert all(1 <= t <= blocks.ACCELERATOR_TRIPS for t in trips), trips


@pytest.mark.slow  # a compile of the vmapped scorer
def test_the_scorer_vmapped_or_closed_over_in_user_code(batch, trained):
    """A user's ``jax.vmap`` over ``jaxdrive.score`` (a stack of batches; float64 comfort, whose scoped x64 must not
    sit inside the overflow ``lax.cond`` that vmap turns into a select) gives the fixtures' rows; a user's jitted
    loss that closes over a ``batch_scenes`` batch (numpy leaves, indexed by traced indices in the broad phase)
    traces, and so does its gradient."""
    _, _, sc, pr, capacity = batch
    _, culled, _ = trained
    stack = lambda t: jax.tree_util.tree_map(lambda x: np.asarray(x)[:4].reshape((2, 2) + x.shape[1:]), t)
    out = jax.jit(jax.vmap(lambda s, p: jaxdrive.score(s, p, capacity=capacity)))(stack(sc), stack(pr))
    _same_rows(jax.tree_util.tree_map(lambda x: np.asarray(x).reshape((4,) + x.shape[2:]), out),
               jax.tree_util.tree_map(lambda x: np.asarray(x)[:4], culled))
    one_scene, one, _ = batch_scenes([read_scene(FILES[0])])
    loss = lambda states: jnp.nansum(jaxdrive.score(one_scene, one.replace(states=states)).epdms)
    jax.jit(loss).lower(one.states)
    jax.jit(jax.grad(loss)).lower(one.states)


@pytest.mark.slow  # one compile of the scorer (two calls of one shape)
def test_a_proposal_with_nan_states_is_scored_as_padding_and_moves_no_other_row():
    """An RL policy's diverged sample (NaN in one proposal's last x) used to make the scene's EP normaliser NaN, so
    every EP of the scene (of the batch with ep_mode="batch") became 1 and the NaN proposal itself scored 0. Now its
    row is NaN (steps -1) and every other row equals the run with that proposal marked invalid."""
    sc, pr, _ = batch_scenes([read_scene(f) for f in FILES[:2]])
    step = jax.jit(lambda s, p: jaxdrive.score(s, p, ep_mode="batch"))
    nan = pr.replace(states=np.asarray(pr.states).copy())
    nan.states[0, 1, 40, 0] = np.nan
    masked = pr.replace(valid=np.asarray(pr.valid).copy())
    masked.valid[0, 1] = False
    got, want = jax.device_get(step(sc, nan)), jax.device_get(step(sc, masked))
    assert np.isnan(got.epdms[0, 1]) and np.isnan(got.ep[0, 1]) and got.nc_step[0, 1] == -1
    _same_rows(got, want)
    assert np.isfinite(np.asarray(got.epdms)[np.asarray(masked.valid)]).all()
    inf_previous = pr.replace(previous=np.asarray(pr.previous).copy(), has_previous=np.ones_like(pr.has_previous))
    inf_previous.previous[1, 0, 3, 5] = np.inf
    valid = np.asarray(epdms_rules.finite_proposals(inf_previous))
    assert not valid[1, 0] and valid.sum() == np.asarray(pr.valid).sum() - 1


def test_static_misuse_of_the_scorer_names_the_argument():
    sc, pr, _ = batch_scenes([read_scene(f) for f in FILES[:2]])
    b, k = pr.valid.shape
    for kwargs, needle in (({"gates": np.ones((b, 9), bool)}, "gates: expected shape"),
                           ({"gates": np.ones((k, 9), bool)}, "gates: expected shape"),
                           ({"reference_progress": np.ones(b, np.float32)}, "only with ep_mode='reference'"),
                           ({"ep_mode": "reference", "reference_progress": np.ones((b, k), np.float32)},
                            r"reference_progress: expected shape \(2,\)")):
        with pytest.raises(ValueError, match=needle):
            jaxdrive.score(sc, pr, **kwargs)
    with pytest.raises(ValueError, match="proposals.valid: expected booleans"):
        jaxdrive.score(sc, pr.replace(valid=np.asarray(pr.valid, np.int32)))
    with pytest.raises(ValueError, match="groups"):
        needs(sc, pr, groups=3)
    with pytest.raises(ValueError, match="outside jax.jit"):
        jax.jit(lambda: needs(sc, pr))()
    with pytest.raises(TypeError, match="list of HostScene"):
        batch_scenes(read_scene(FILES[0]))
    with pytest.raises(TypeError, match="HostScene items"):
        batch_scenes([FILES[0]])
    with pytest.raises(ValueError, match="agents: expected a positive integer"):
        PadSpec(agents=-1)
    # these failed deep inside the kernels with broadcasting / attribute errors that named no argument
    shape = lambda p, **kw: jax.eval_shape(lambda s, q: jaxdrive.score(s, q, **kw), sc, p)
    for bad, needle in ((pr.replace(previous=pr.previous[:, :3]), r"proposals.previous: expected shape \(2, 16, 41"),
                        (pr.replace(has_previous=pr.has_previous[:, :3]), r"proposals.has_previous: expected shape"),
                        (pr.replace(states=pr.states[:, :8], valid=pr.valid[:, :8]), "proposals.has_previous")):
        with pytest.raises(ValueError, match=needle):
            shape(bad)
    with pytest.raises(ValueError, match="capacity: expected a PackSpec"):
        shape(pr, capacity={"agents": 8})


def test_notebook_misuse_of_the_scorer_and_its_helpers_names_the_argument():
    """Mistakes from a notebook: an unknown option, an empty batch, a batch without its B axis, ``reference`` EP
    without the reference, ``needs`` / ``capacity_for`` of the wrong things, the README's ``rules.epdms.score`` of a
    scene without its batch axis. They failed inside the kernels (an IndexError, a vmap size mismatch, an
    AttributeError), named an internal function (``normalize_progress``), or (``needs`` of states with 5 fields,
    ``capacity_for`` with a headroom of 0) returned capacities of the wrong batch. States given as a nested list
    failed with "'list' object has no attribute 'ndim'"; they are taken as one array, like ``gates``."""
    sc, pr, _ = batch_scenes([read_scene(f) for f in FILES[:2]])
    shape = lambda s, p, **kw: jax.eval_shape(lambda a, b: jaxdrive.score(a, b, **kw), s, p)
    unbatched = lambda tree: jax.tree.map(lambda x: x[0], tree)
    for call, needle in (
            (lambda: shape(sc, pr, ep_mode="Scene"), r"jaxdrive.score: ep_mode: expected one of \('scene'"),
            (lambda: shape(sc, pr, comfort_precision="float16"), "jaxdrive.score: comfort_precision: expected one"),
            (lambda: shape(sc, pr, ep_mode="reference"), "jaxdrive.score: reference_progress: ep_mode='reference' "
                                                         "needs it"),
            (lambda: shape(*jax.tree.map(lambda x: x[:0], (sc, pr))), r"proposals.states: expected at least one "
                                                                      r"scene and one proposal \(B, K >= 1\)"),
            (lambda: shape(unbatched(sc), unbatched(pr)), r"jaxdrive.score: proposals.states: expected shape "
                                                          r"\(B, K, 41, 11\), got \(16, 41, 11\)"),
            (lambda: jax.eval_shape(epdms_rules.score, unbatched(sc), unbatched(pr)),
             r"score: proposals.states: expected shape \(B, K, 41, 11\)"),
            # the README's rules.epdms.score named normalize_progress and its argument `mode` for these
            (lambda: jax.eval_shape(lambda a, b: epdms_rules.score(a, b, ep_mode="Scene"), sc, pr),
             r"^ep_mode: expected one of \('scene', 'batch', 'reference'\), got 'Scene'"),
            (lambda: jax.eval_shape(lambda a, b: epdms_rules.score(a, b, ep_mode="reference"), sc, pr),
             r"^reference_progress: ep_mode='reference' needs it"),
            (lambda: needs(sc, pr.replace(states=pr.states[..., :5])), r"needs: proposals.states: expected shape"),
            (lambda: needs(unbatched(sc), unbatched(pr)), "needs: proposals.states: expected shape"),
            (lambda: capacity_for({"agents": 8}), "capacity_for: needed: expected a PackSpec"),
            (lambda: capacity_for(needs(sc, pr), 0), "capacity_for: headroom: expected a finite factor >= 1"),
            (lambda: capacity_for(needs(sc, pr), float("nan")), "capacity_for: headroom")):
        with pytest.raises(ValueError, match=needle):
            call()
    listed = shape(sc, pr.replace(states=np.asarray(pr.states).tolist()))
    assert listed.epdms.shape == pr.valid.shape


def test_the_scorer_takes_low_precision_states_and_gates_as_a_list():
    """A bfloat16 (or float16) policy's states failed to trace (a while_loop carry of the states' dtype met a float32
    update); they are now cast to float32, like integer states. Gates as a Python list raised "Cannot determine
    dtype". Traced only (``jax.eval_shape``): the rows are those of the float32 states (the cast is the only change)."""
    sc, pr, _ = batch_scenes([read_scene(f) for f in FILES[:2]])
    for dtype in (jnp.bfloat16, jnp.float16):
        out = jax.eval_shape(jaxdrive.score, sc, pr.replace(states=jnp.asarray(pr.states, dtype)))
        assert out.epdms.shape == pr.valid.shape and out.epdms.dtype == jnp.float32
    gated = jax.eval_shape(lambda s, p: jaxdrive.score(s, p, gates=[True] * 8 + [False]), sc, pr)
    assert gated.epdms.shape == pr.valid.shape


@pytest.mark.slow  # a compile of the scorer in a fresh interpreter
def test_the_scorer_first_imported_inside_a_users_jit_traces_again(tmp_path):
    """``jaxdrive.score`` is imported on first use: when that is inside a user's ``jax.jit``, no module-level array
    may be made then (it would be that trace's tracer, leaked into every later trace: a second batch size failed)."""
    code = f"""
import jax, jax.numpy as jnp, sys
import jaxdrive
from jaxdrive.data.scene_json import read_scene
from jaxdrive.scene import batch_scenes
assert "jaxdrive.scorer" not in sys.modules
reward = jax.jit(lambda scene, proposals: jnp.nanmean(jaxdrive.score(scene, proposals).epdms))
scene, proposals, _ = batch_scenes([read_scene(f) for f in {FILES[:1]!r}])
reward.lower(scene, proposals)  # the first trace imports the scorer
scene, proposals, _ = batch_scenes([read_scene(f) for f in {FILES[1:3]!r}])
print(float(reward(scene, proposals)))  # another batch size: a second trace, compiled and run
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert 0.0 <= float(run.stdout.split()[-1]) <= 1.0


def test_default_capacities_cover_the_fixtures_and_the_reference_mix(batch):
    """``jaxdrive.score`` without ``capacity`` must not fall back on the unculled kernels (~30x slower) on NAVSIM-like
    scenes: the defaults cover the needs of the 61 fixtures and of the synthetic reference mix at K = 16."""
    from jaxdrive.data.synthetic import generate_scene

    _, _, sc, pr, _ = batch
    mix = [generate_scene(seed, num_proposals=16, profile="reference") for seed in range(16)]
    mix_scene, mix_props, _ = batch_scenes(mix, validate=False)
    for name, need in (("fixtures", needs(sc, pr)), ("reference mix", needs(mix_scene, mix_props))):
        default = default_capacity(16)
        short = {f.name: (getattr(need, f.name), getattr(default, f.name)) for f in dataclasses.fields(PackSpec)
                 if getattr(need, f.name) > getattr(default, f.name)}
        assert not short, f"{name}: needs above the defaults (need, default): {short}"


def test_capacities_and_shape_errors():
    assert default_capacity(16).area_tiles == 16 * default_capacity(1).area_tiles
    need = PackSpec(area_pairs=9, area_tiles=17, lane_pairs=1, lane_tiles=1, red_pairs=1, red_tiles=1,
                    centerline=65, agents=3, near_segments=40, nc_pairs=1, ttc_pairs=1)
    cap = capacity_for(need)
    assert cap.area_tiles >= 17 * 1.25 and cap.area_tiles % 8 == 0 and cap.centerline % 64 == 0
    scene = read_scene(FILES[0])
    sc, pr, _ = batch_scenes([scene])
    with pytest.raises(ValueError, match="proposals.valid"):
        jaxdrive.score(sc, pr.replace(valid=pr.valid[:, :1]))
    with pytest.raises(ValueError, match="groups"):
        jaxdrive.score(sc, pr, groups=2)


@pytest.mark.parametrize("break_it,message", [
    (lambda sc: sc.replace(agents=sc.agents.replace(heading=sc.agents.heading[..., :40])),
     r"scene.agents.heading: expected shape \[\*b\[1\] N T\] with T = 41, got \[1, 8, 40\]"),
    (lambda sc: sc.replace(map=sc.map.replace(lane_red=sc.map.lane_red[..., :40])),
     r"scene.map.lane_red: .* with T = 41"),
    (lambda sc: sc.replace(agents=sc.agents.replace(center=sc.agents.center.astype(jnp.int32))),
     "scene.agents.center: expected a Float dtype, got int32"),
    (lambda sc: sc.replace(map=sc.map.replace(areas=sc.map.areas.replace(vertex_valid=sc.map.areas.vertex_valid[..., 1:]))),
     r"scene.map.areas.vertex_valid: expected shape \[\*b\[1\] P V\] with V = "),
    (lambda sc: sc.replace(map=sc.map.replace(lanes=jax.tree.map(lambda x: x[:, 1:], sc.map.lanes))),
     "scene.map.lanes: expected .* polygons \\(as scene.map.lane_kind\\)"),
    (lambda sc: jax.tree.map(lambda x: jnp.concatenate([x, x]), sc), r"scene.history: expected shape \[\*b\[1\] 4 11\]")])
def test_scene_leaves_of_other_shapes_are_named(break_it, message):
    """A Scene built or edited by hand (outside ``batch_scenes``) with one leaf of another shape or dtype: the scorer
    names the leaf and the size it expected before tracing, jitted or not (the kernels failed deep inside with a
    broadcasting error, or scored padding)."""
    sc, pr, _ = batch_scenes([read_scene(FILES[0])])
    with pytest.raises(ValueError, match="jaxdrive.score: " + message):
        jaxdrive.score(break_it(sc), pr)
    with pytest.raises(ValueError, match=message):
        jax.jit(jaxdrive.score)(break_it(sc), pr)


def test_import_jaxdrive_is_light():
    code = "import sys, jaxdrive; assert 'jax' not in sys.modules, 'jax imported'; print(jaxdrive.__version__)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_help_jaxdrive_lists_the_scorer():
    """``help(jaxdrive)`` shows ``score`` and its signature although the attribute is imported lazily."""
    import pydoc

    assert "score(scene" in pydoc.render_doc(jaxdrive, renderer=pydoc.plaintext)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 40, 64, 129])
def test_nth_set_bit_finds_every_flag_in_order(n):
    """The broad phase's n-th kept edge (``bit_words`` + ``nth_set_bit``) is the position of the n-th True of each row,
    across word boundaries, for sparse, dense, empty and full rows."""
    rng = np.random.default_rng(n)
    mask = rng.random((300, n)) < np.concatenate([rng.random((296, 1)), [[0.0], [1.0], [0.5], [0.02]]])
    rank = np.tile(np.arange(n, dtype=np.int32), (300, 1))
    got = np.asarray(jax.jit(lambda m, r: nth_set_bit(bit_words(m), r))(mask, rank))
    for row, flags in zip(got, mask):
        want = np.flatnonzero(flags)
        np.testing.assert_array_equal(row[:len(want)], want)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 70_001])
@pytest.mark.parametrize("density", [0.0, 0.001, 0.3, 1.0])
def test_compact_lists_the_first_flags_in_order(n, density):
    """``compact`` (16-bit words, the prefix sum of their popcounts, the bit within the word) lists the flagged
    indices in order and the fill after them, for sizes below, at and above the count (truncated when below), and
    counts every flag whatever the size."""
    rng = np.random.default_rng(n)
    flags = rng.random(n) < density
    want = np.flatnonzero(flags)
    for size in sorted({1, max(1, len(want) - 1), max(1, len(want)), len(want) + 3}):
        idx, count = jax.jit(compact, static_argnums=(1, 2))(flags, size, -7)
        assert int(count) == len(want)
        np.testing.assert_array_equal(np.asarray(idx),
                                      np.concatenate([want[:size], np.full(max(0, size - len(want)), -7)]))


@pytest.mark.parametrize("shape", [(1,), (7,), (256,), (257,), (3, 40), (2, 5000), (70_001,)])
def test_prefix_count_equals_cumsum_and_compact_finds_every_flag(shape):
    """The broad phase's integer prefix sums (triangular products per block of 128, then over block totals) equal
    numpy's cumsum exactly, across block boundaries and for counts up to 2 per entry; ``compact`` built on them lists
    the flagged indices in order."""
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(0, 3, shape).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(jax.jit(prefix_count)(x)), np.cumsum(x, axis=-1))
    flags = x[..., :] > 1 if len(shape) == 1 else None
    if flags is not None:
        want = np.flatnonzero(flags)
        idx, count = jax.jit(compact, static_argnums=(1, 2))(flags, len(want) + 3, -1)
        assert int(count) == len(want)
        np.testing.assert_array_equal(np.asarray(idx), np.concatenate([want, [-1, -1, -1]]))
