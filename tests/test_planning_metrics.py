"""Open-loop planning metrics (UniAD L2 / GT-filtered box collision): known answers in both conventions with
asymmetric occupancies, GT-collision filtering, masked steps, footprints leaving the grid, a loop reference with
UniAD's truncation, and parity with UniAD's own outputs (``fixtures/planning``)."""
import json

import numpy as np
import pytest
from conftest import SHARED

from jaxdrive.eval import planning as P
from jaxdrive.eval.planning import planning_metrics

FIXTURE = SHARED / "fixtures" / "planning" / "uniad_public.npz"


def cell(x: float, y: float) -> tuple[int, int]:
    """(row, col) of the cell whose centre is nearest (x right, y forward)."""
    return int(round((y + 49.75) / 0.5)), int(round((x + 49.75) / 0.5))


def straight(n: int = 1, speed: float = 4.0) -> np.ndarray:
    """[n, 6, 2] straight ahead at ``speed`` m/s."""
    t = 0.5 * np.arange(1, 7)
    return np.tile(np.stack([np.zeros(6), speed * t], -1)[None], (n, 1, 1)).astype(np.float32)


def empty(n: int = 1) -> np.ndarray:
    return np.zeros((n, 6, 200, 200), bool)


def reference_box_collision(traj: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Loop reference of UniAD's box lookup: footprint rows 97..104 x cols 98..101, index = astype(int32)(2 v + px)
    (truncation toward zero, in float64), clipped to [0, 199] before reading."""
    rr, cc = np.meshgrid(np.arange(97, 105), np.arange(98, 102), indexing="ij")
    out = np.zeros(len(traj), bool)
    for t, (x, y) in enumerate(np.asarray(traj, np.float64)):
        r = np.clip((2 * y + rr.reshape(-1)).astype(np.int32), 0, 199)
        c = np.clip((2 * x + cc.reshape(-1)).astype(np.int32), 0, 199)
        out[t] = seg[t, r, c].any()
    return out


def test_footprint_is_uniads_32_pixels():
    fp = P.FOOTPRINT
    assert fp.shape == (32, 2)
    assert (fp[:, 0].min(), fp[:, 0].max(), fp[:, 1].min(), fp[:, 1].max()) == (97, 104, 98, 101)


def test_obstacle_on_the_left_catches_a_mirrored_axis():
    """An obstacle 3 m left (x = -3) and 10 m ahead: swerving left collides, swerving right does not."""
    occ = empty(2)
    r, c = cell(-3.0, 10.0)
    assert c < 100
    occ[:, :, r - 2 : r + 3, c - 1 : c + 2] = True
    pred = np.zeros((2, 6, 2), np.float32)
    pred[0, :, 0], pred[1, :, 0] = -3.0, 3.0  # left / right
    pred[:, :, 1] = 10.0
    gt = np.zeros((2, 6, 2), np.float32)  # standing still at the origin: no GT collision
    out = planning_metrics(pred, gt, occ)
    np.testing.assert_array_equal(out["collision_count"], [1] * 6)
    np.testing.assert_allclose(out["collision"], [0.5] * 6)
    sample_hits = [planning_metrics(pred[i : i + 1], gt[i : i + 1], occ[i : i + 1])["collision_count"].sum() for i in (0, 1)]
    assert sample_hits == [6, 0]


def test_gt_collision_filter_and_denominator():
    """Steps where the GT box collides are not counted; the denominator stays N."""
    occ = empty(4)
    r, c = cell(0.0, 8.0)
    occ[:, :, r, c] = True  # an obstacle on the lane centre 8 m ahead, every step
    gt = straight(4, speed=0.0)  # GT stays at the origin: no GT collision
    gt[1, :3, 1] = 8.0  # sample 1: GT itself sits on the obstacle for steps 0..2
    pred = straight(4, speed=0.0)
    pred[:2, :, 1] = 8.0  # samples 0 and 1 drive into it at every step
    out = planning_metrics(pred, gt, occ)
    np.testing.assert_array_equal(out["collision_count"], [1, 1, 1, 2, 2, 2])
    np.testing.assert_allclose(out["collision"], np.array([1, 1, 1, 2, 2, 2]) / 4)


def test_masked_steps_drop_from_l2_but_not_from_collisions():
    occ = empty(2)
    r, c = cell(0.0, 8.0)
    occ[:, :, r, c] = True
    gt = straight(2, speed=0.0)
    pred = gt.copy()
    pred[:, :, 1] = 8.0  # 8 m off and on the obstacle
    mask = np.ones((2, 6), np.float32)
    mask[1, 3:] = 0
    out = planning_metrics(pred, gt, occ, gt_mask=mask)
    np.testing.assert_allclose(out["l2"], [8, 8, 8, 4, 4, 4], atol=1e-5)
    np.testing.assert_array_equal(out["collision_count"], [2] * 6)
    unmasked = planning_metrics(pred, gt, occ)
    np.testing.assert_allclose(unmasked["l2"], [8] * 6, atol=1e-5)
    stp3_own = planning_metrics(pred, gt, occ, gt_mask=mask, convention="stp3", l2_masked=False)  # no mask in ST-P3
    np.testing.assert_allclose(stp3_own["l2"], [8] * 6, atol=1e-5)
    np.testing.assert_array_equal(stp3_own["collision_count"], out["collision_count"])


def test_cli_l2_unmasked_ignores_the_gt_mask(tmp_path, capsys):
    """``--l2-unmasked``: ST-P3's own L2 (no mask) from the same GT file; the default masks as UniAD."""
    from jaxdrive.cli import main

    occ = empty(2)
    gt = straight(2, speed=0.0)
    pred = gt.copy()
    pred[:, :, 1] = 8.0
    mask = np.ones((2, 6), np.float32)
    mask[1, 3:] = 0
    np.savez(tmp_path / "gt.npz", gt=gt, gt_mask=mask, occupancy=occ)
    np.savez(tmp_path / "pred.npz", pred=pred)
    args = ["eval", "planning", "--predictions", str(tmp_path / "pred.npz"), "--gt", str(tmp_path / "gt.npz"),
            "--json", str(tmp_path / "m.json")]
    assert main(args) == 0
    assert json.loads((tmp_path / "m.json").read_text())["stp3"]["l2"] == pytest.approx([8, 8, 8, 4, 4, 4])
    assert main([*args, "--l2-unmasked"]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["stp3"]["l2"] == pytest.approx([8] * 6)


def test_footprint_leaving_the_grid_is_tested_against_border_cells():
    """60 m ahead is off the grid: UniAD clips the indices, so an obstacle in the last row (and only there) counts;
    8 m behind the grid's rear edge the first row counts."""
    occ = empty(2)
    occ[0, :, 199, 98:102] = True  # forward border only
    occ[1, :, 0, 98:102] = True  # rear border only
    pred = np.zeros((2, 6, 2), np.float32)
    pred[0, :, 1] = 60.0
    pred[1, :, 1] = -58.0
    pred[1, :3, 1] = -40.0  # still on the grid for steps 0..2: no contact with row 0
    gt = np.zeros((2, 6, 2), np.float32)
    out = planning_metrics(pred, gt, occ)
    np.testing.assert_array_equal(out["collision_count"], [1, 1, 1, 2, 2, 2])
    # sideways off the grid: column clipped to 199
    occ = empty(1)
    occ[0, :, 97:105, 199] = True
    side = np.zeros((1, 6, 2), np.float32)
    side[0, :, 0] = 70.0
    assert planning_metrics(side, np.zeros_like(side), occ)["collision_count"].tolist() == [1] * 6


def test_conventions_uniad_at_and_stp3_mean_up_to():
    gt = straight(3, speed=0.0)
    pred = gt.copy()
    pred[:, :, 0] = np.arange(1, 7)  # lateral error t + 1 m at step t
    occ = empty(3)
    u = planning_metrics(pred, gt, occ, convention="uniad")
    s = planning_metrics(pred, gt, occ, convention="stp3")
    np.testing.assert_allclose(u["l2"], np.arange(1, 7), atol=1e-5)
    assert [u["l2_1s"], u["l2_2s"], u["l2_3s"]] == pytest.approx([2, 4, 6], abs=1e-5)
    assert [s["l2_1s"], s["l2_2s"], s["l2_3s"]] == pytest.approx([1.5, 2.5, 3.5], abs=1e-5)
    with pytest.raises(ValueError, match="convention"):
        planning_metrics(pred, gt, occ, convention="average")


def test_matches_a_loop_reference_with_truncation_on_random_inputs():
    """Random points across the whole grid and beyond it (negative sums included) and random sparse occupancy."""
    rng = np.random.default_rng(0)
    n = 40
    occ = rng.random((n, 6, 200, 200)) < 0.02
    pred = rng.uniform(-60, 60, (n, 6, 2)).astype(np.float32)
    pred[:10] = np.round(pred[:10] * 2) / 2  # points on cell edges: truncation vs floor must agree
    gt = rng.uniform(-60, 60, (n, 6, 2)).astype(np.float32)
    out = planning_metrics(pred, gt, occ, chunk=16)
    expect = np.zeros(6, int)
    for i in range(n):
        expect += reference_box_collision(pred[i], occ[i]) & ~reference_box_collision(gt[i], occ[i])
    np.testing.assert_array_equal(out["collision_count"], expect)
    assert expect.sum() > 10
    l2 = np.sqrt(((pred.astype(np.float64) - gt) ** 2).sum(-1)).sum(0) / n
    np.testing.assert_allclose(out["l2"], l2, atol=1e-5)


def test_parity_with_uniads_own_planning_metric():
    d = np.load(FIXTURE)
    out = planning_metrics(d["pred"], d["gt"], d["occupancy"], gt_mask=d["gt_mask"], convention="uniad")
    np.testing.assert_array_equal(out["collision_count"], d["collision_count"])
    np.testing.assert_allclose(out["collision"], d["collision"], atol=1e-7)
    np.testing.assert_allclose(out["l2"], d["l2"], atol=1e-5)
    assert out["l2_2s"] == pytest.approx(d["l2"][3], abs=1e-5)
    stp3 = planning_metrics(d["pred"], d["gt"], d["occupancy"], gt_mask=d["gt_mask"], convention="stp3")
    assert stp3["collision_3s"] == pytest.approx(d["collision"].mean(), abs=1e-7)
    # the fixture's obstacles are only on the left: a mirrored lateral axis changes the counts
    flip = np.array([-1.0, 1.0], np.float32)
    mirrored = planning_metrics(d["pred"] * flip, d["gt"] * flip, d["occupancy"], gt_mask=d["gt_mask"])
    assert not np.array_equal(mirrored["collision_count"], d["collision_count"])


def test_validation_names_the_field():
    gt = straight(2)
    with pytest.raises(ValueError, match="occupancy"):
        planning_metrics(gt, gt, np.zeros((2, 6, 100, 100), bool))
    with pytest.raises(ValueError, match="gt_mask"):
        planning_metrics(gt, gt, empty(2), gt_mask=np.ones((2, 5)))
    with pytest.raises(ValueError, match="gt:"):
        planning_metrics(gt, gt[:1], empty(2))
    bad = gt.copy()
    bad[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="pred: non-finite"):
        planning_metrics(bad, gt, empty(2))


def test_bad_options_and_non_numeric_points_name_the_argument():
    """``chunk=-1`` returned L2 0 and no collision (no chunk was scored); ``chunk=0`` failed in ``range()``; a
    footprint not [P, 2] failed inside JAX's indexing; a float footprint was truncated silently; string points failed
    in ``np.isfinite``."""
    gt = straight(2)
    for kwargs, needle in (({"chunk": -1}, r"chunk: expected a positive number .* got -1"),
                           ({"chunk": 0}, r"chunk: .* got 0"), ({"chunk": 1.5}, r"chunk: .* got 1.5"),
                           ({"footprint": np.zeros(3, np.int32)}, r"footprint: expected \[P >= 1, 2\] .* shape \(3,\)"),
                           ({"footprint": [[0.5, 1.5]]}, "footprint: expected integer pixel offsets, got dtype float")):
        with pytest.raises(ValueError, match=needle):
            planning_metrics(gt, gt, empty(2), **kwargs)
    with pytest.raises(ValueError, match="pred: expected float coordinates"):
        planning_metrics(np.full(gt.shape, "a"), gt, empty(2))
    assert planning_metrics(gt, gt, empty(2), chunk=1, footprint=[[0, 0]])["num_samples"] == 2


def test_obstacle_variants_and_frame_converters():
    veh, ped = empty(1), empty(1)
    r, c = cell(-3.0, 10.0)
    ped[0, :, r, c] = True
    pred = np.zeros((1, 6, 2), np.float32)
    pred[0, :, :] = (-3.0, 10.0)
    layers = {"vehicle": veh, "pedestrian": ped}
    only_veh = planning_metrics(pred, np.zeros_like(pred), P.obstacle_occupancy(layers, "vehicle"))
    with_ped = planning_metrics(pred, np.zeros_like(pred), P.obstacle_occupancy(layers, "vehicle+pedestrian"))
    assert only_veh["collision_count"].sum() == 0 and with_ped["collision_count"].sum() == 6
    with pytest.raises(ValueError, match="pedestrian"):
        P.obstacle_occupancy({"vehicle": veh}, "vehicle+pedestrian")
    # text frame (x forward, y left): 10 m ahead and 3 m left is (-3, 10) in the metric frame, and back
    text = np.array([[10.0, 3.0]])
    np.testing.assert_array_equal(P.text_to_lidar(text), [[-3.0, 10.0]])
    np.testing.assert_array_equal(P.lidar_to_text(P.text_to_lidar(text)), text)


def openread_box_collision(traj: np.ndarray, stored: np.ndarray, flip_rows: bool) -> np.ndarray:
    """Loop reference of OpenREAD's lookup: the stored occupancy flipped as its evaluation does (last axis; both axes
    for ``vad_gt_seg``), then the ST-P3 metric variant (eval_share ``metric.py``): x negated, swapped to (y, x),
    ``astype(int32)`` of 2 v + the footprint pixel, clipped to [0, 199]."""
    seg = stored[..., ::-1]
    seg = seg[..., ::-1, :] if flip_rows else seg
    return reference_box_collision(np.asarray(traj, np.float64) * [-1.0, 1.0], seg)


@pytest.mark.parametrize("layout,flip_rows", [("openread_vehicle", False), ("openread_vad", True)])
def test_openread_layouts_give_openreads_collision_counts(layout, flip_rows):
    """``in_layout`` + ``planning_metrics`` equal OpenREAD's own pipeline on its stored layouts, point by point. Its
    flip and its negated x do not cancel (truncation of -2x + col is one column off the mirror of 2x + col), which
    the old flip-only table missed: 15 collisions where OpenREAD counts 26 at 0.5 s, say (reviewer's data)."""
    rng = np.random.default_rng(0)
    n = 200
    pred = np.stack([np.stack([rng.normal(0, 1.5, 6), np.cumsum(rng.uniform(0.5, 3, 6))], -1) for _ in range(n)])
    pred = pred.astype(np.float32)
    gt = (pred + rng.normal(0, 0.8, pred.shape)).astype(np.float32)
    stored = np.zeros((n, 6, 200, 200), bool)
    for i in range(n):
        for t in range(6):
            stored[i, t, rng.integers(95, 130, 6), rng.integers(90, 110, 6)] = True
    want = np.zeros(6, int)
    for i in range(n):
        want += openread_box_collision(pred[i], stored[i], flip_rows) & ~openread_box_collision(gt[i], stored[i],
                                                                                               flip_rows)
    got = planning_metrics(*P.in_layout(pred, gt, stored, layout))
    np.testing.assert_array_equal(got["collision_count"], want)
    assert want.sum() > 10
    np.testing.assert_allclose(got["l2"], planning_metrics(pred, gt, stored)["l2"])  # L2 does not see the layout
    with pytest.raises(ValueError, match="occupancy layout"):
        P.in_layout(pred, gt, stored, "vad")


def test_empty_or_short_inputs_are_errors():
    """N = 0 printed perfect scores (a division by max(n, 1)); 4 steps raised an IndexError deep inside."""
    with pytest.raises(ValueError, match="no samples"):
        planning_metrics(np.zeros((0, 6, 2)), np.zeros((0, 6, 2)), np.zeros((0, 6, 200, 200), bool))
    with pytest.raises(ValueError, match="expected 6 steps"):
        planning_metrics(np.zeros((1, 4, 2)), np.zeros((1, 4, 2)), np.zeros((1, 4, 200, 200), bool))


def test_cli_refuses_repeated_tokens_and_reports_every_mismatch_once(tmp_path, capsys):
    """Tokens repeated in the GT (a sample scored against another's prediction) or in the predictions (the later
    silently won) are errors; a prediction for a token not in the GT is reported; a GT sample whose answer is
    unparsable is reported once (it was counted twice); a ragged JSON trajectory is that token's problem, not the
    run's; --obstacles with a combined occupancy array is an error (it was ignored)."""
    from jaxdrive.cli import main

    d = np.load(FIXTURE)
    n = len(d["gt"])
    tokens = np.array([f"tok{i}" for i in range(n)])
    gt_path = tmp_path / "gt.npz"
    np.savez(gt_path, gt=d["gt"], gt_mask=d["gt_mask"], occupancy=d["occupancy"], tokens=tokens)
    dup = tokens.copy()
    dup[5] = dup[4]
    np.savez(tmp_path / "gt_dup.npz", gt=d["gt"], occupancy=d["occupancy"], tokens=dup)
    np.savez(tmp_path / "pred.npz", pred=d["pred"], tokens=tokens)
    np.savez(tmp_path / "pred_dup.npz", pred=d["pred"], tokens=dup)
    run = lambda pred, gt=gt_path, *extra: main(["eval", "planning", "--predictions", str(tmp_path / pred), "--gt",
                                                 str(gt), *extra])
    assert run("pred.npz", tmp_path / "gt_dup.npz") == 2
    assert "'tok4'" in capsys.readouterr().err
    assert run("pred_dup.npz") == 2
    assert "'tok4'" in capsys.readouterr().err
    answers = {str(t): p.tolist() for t, p in zip(tokens, d["pred"])}
    answers["tok3"] = "(1, 2), garbage"
    answers["tok7"] = [[0, 1], [2]]  # ragged
    answers["zzz_extra"] = d["pred"][0].tolist()
    (tmp_path / "p.json").write_text(json.dumps(answers))
    assert run("p.json") == 3
    captured = capsys.readouterr()
    assert f"samples: {n - 2} (2 of the GT's left out" in captured.out
    err = captured.err.splitlines()
    assert sum("tok3" in e for e in err) == 1 and sum("tok7" in e for e in err) == 1, err
    assert any("zzz_extra" in e and "not in --gt" in e for e in err), err
    (tmp_path / "p2.json").write_text('{"tok0": ' + json.dumps(answers["tok0"]) + ', "tok0": [[0, 0]]}')
    assert run("p2.json") == 2
    assert "tok0" in capsys.readouterr().err
    assert run("pred.npz", gt_path, "--obstacles", "vehicle+pedestrian") == 2
    assert "combined 'occupancy'" in capsys.readouterr().err


def test_cli_prints_both_conventions_and_reads_text_answers(tmp_path, capsys):
    """``jaxdrive eval planning`` on the UniAD fixture: npz predictions, then JSON text answers keyed by token with one
    unparsable answer (exit 3, scored on the rest)."""
    from jaxdrive.cli import main
    from jaxdrive.eval.trajectory_text import format_trajectory

    d = np.load(FIXTURE)
    tokens = np.array([f"tok{i}" for i in range(len(d["gt"]))])
    gt_path, pred_path = tmp_path / "gt.npz", tmp_path / "pred.npz"
    np.savez(gt_path, gt=d["gt"], gt_mask=d["gt_mask"], occupancy=d["occupancy"], tokens=tokens)
    np.savez(pred_path, pred=d["pred"])
    out_json = tmp_path / "m.json"
    assert main(["eval", "planning", "--predictions", str(pred_path), "--gt", str(gt_path), "--json", str(out_json)]) == 0
    table = capsys.readouterr().out
    assert "uniad" in table and "stp3" in table and "Col% avg" in table
    saved = json.loads(out_json.read_text())
    assert saved["uniad"]["collision_count"] == d["collision_count"].tolist()
    assert saved["stp3"]["l2_1s"] == pytest.approx(d["l2"][:2].mean(), abs=1e-5)
    # text answers (x forward, y left; 2 decimals), one garbage answer
    answers = {t: f"<think>ok</think><answer>{format_trajectory(P.lidar_to_text(p))}</answer>"
               for t, p in zip(tokens, d["pred"])}
    answers["tok3"] = "<answer>turn left</answer>"
    js = tmp_path / "pred.json"
    js.write_text(json.dumps(answers))
    assert main(["eval", "planning", "--predictions", str(js), "--gt", str(gt_path), "--json", str(out_json)]) == 3
    err = capsys.readouterr().err
    assert "tok3" in err
    text_metrics = json.loads(out_json.read_text())["uniad"]
    assert text_metrics["num_samples"] == len(tokens) - 1
    # bad inputs: exit 2 with the flag named
    assert main(["eval", "planning", "--predictions", str(tmp_path / "nope.npz"), "--gt", str(gt_path)]) == 2
    assert "--predictions" in capsys.readouterr().err


def test_vad_convention_averages_over_complete_samples_only():
    """VAD (``nuscenes_vad_dataset.py``) averages over the samples with ``fut_valid_flag`` (every future step
    present) only: the others leave the numerator and the denominator. It was not a convention here."""
    pred, gt = straight(2), straight(2)
    pred[:, :, 0] += 1.0  # 1 m lateral error at every step
    occ = empty(2)
    occ[1, 0][cell(1.5, 2.0)] = True  # the incomplete sample's prediction (x = 1) collides at step 0, its GT not
    mask = np.ones((2, 6), np.float32)
    mask[1, 5] = 0
    vad = planning_metrics(pred, gt, occ, gt_mask=mask, convention="vad")
    stp3 = planning_metrics(pred, gt, occ, gt_mask=mask, convention="stp3")
    assert vad["num_samples"] == 1 and vad["num_excluded"] == 1 and stp3["num_excluded"] == 0
    assert [vad[f"l2_{s}s"] for s in (1, 2, 3)] == pytest.approx([1.0, 1.0, 1.0])
    assert [vad[f"collision_{s}s"] for s in (1, 2, 3)] == [0.0, 0.0, 0.0]
    assert stp3["l2_3s"] == pytest.approx(11 / 12) and stp3["collision_1s"] == pytest.approx(0.25)
    complete = planning_metrics(pred[:1], gt[:1], occ[:1], convention="stp3")
    assert {k: vad[k] for k in complete if k.endswith("s")} == pytest.approx(
        {k: complete[k] for k in complete if k.endswith("s")})
    d = np.load(FIXTURE)
    full = planning_metrics(d["pred"], d["gt"], d["occupancy"], convention="vad")
    assert full["l2_2s"] == pytest.approx(planning_metrics(d["pred"], d["gt"], d["occupancy"], convention="stp3")[
        "l2_2s"])  # without a mask every sample is complete: VAD's average is ST-P3's
    with pytest.raises(ValueError, match="no sample has a complete GT future"):
        planning_metrics(pred, gt, occ, gt_mask=np.zeros((2, 6)), convention="vad")


def test_gt_mask_must_be_0_1_and_points_2d():
    """A NaN mask made every L2 NaN (printed as 'nan', exit 0); a [N, 6, 1] trajectory broadcast to (x, x) in
    ``in_layout`` and was scored."""
    gt = straight(2)
    mask = np.ones((2, 6))
    mask[0, 3] = np.nan
    with pytest.raises(ValueError, match="gt_mask: expected 0/1"):
        planning_metrics(gt, gt, empty(2), gt_mask=mask)
    with pytest.raises(ValueError, match=r"pred: expected \[\.\.\., 2\]"):
        P.in_layout(gt[..., :1], gt, empty(2), "uniad")


def test_cli_malformed_arrays_are_usage_errors_naming_file_and_field(tmp_path, capsys):
    """GT arrays of another length (gt_mask, occupancy, tokens) raised IndexError tracebacks, a 0-d 'gt' a TypeError,
    a [N, 6, 1] 'pred' was broadcast and scored (exit 0), a NaN gt_mask printed nan (exit 0)."""
    from jaxdrive.cli import main

    n = 3
    gt, occ = straight(n), empty(n)
    good = dict(gt=gt, gt_mask=np.ones((n, 6), np.float32), occupancy=occ)
    np.savez(tmp_path / "pred.npz", pred=gt)
    nan_mask = np.ones((n, 6), np.float32)
    nan_mask[1, 1] = np.nan
    cases = {
        "gt_mask": dict(good, gt_mask=np.ones((n - 1, 6), np.float32)),
        "occupancy": dict(good, occupancy=occ[: n - 1]),
        "tokens": dict(good, tokens=np.array(["a", "b"])),
        "'gt'": dict(good, gt=np.float32(1.0)),
        "gt_mask: expected 0/1": dict(good, gt_mask=nan_mask),
    }
    for field, arrays in cases.items():
        np.savez(tmp_path / "g.npz", **arrays)
        assert main(["eval", "planning", "--predictions", str(tmp_path / "pred.npz"), "--gt",
                     str(tmp_path / "g.npz")]) == 2, field
        err = capsys.readouterr().err
        assert "g.npz" in err and field in err, err
    np.savez(tmp_path / "g.npz", **good)
    for bad in (gt[..., :1], gt.reshape(n, 12), np.array(["x"] * n)):
        np.savez(tmp_path / "p.npz", pred=bad)
        assert main(["eval", "planning", "--predictions", str(tmp_path / "p.npz"), "--gt",
                     str(tmp_path / "g.npz")]) == 2
        err = capsys.readouterr().err
        assert "p.npz" in err and "'pred'" in err, err
    assert main(["eval", "planning", "--predictions", str(tmp_path / "pred.npz"), "--gt", str(tmp_path / "g.npz")]) == 0
    assert "vad " in capsys.readouterr().out
