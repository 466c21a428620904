"""BEV previews: PNGs are written for synthetic and fixture scenes in every colouring mode; bad inputs fail clearly."""

from pathlib import Path

import numpy as np
import pytest

from jaxdrive.data.scene_json import read_scene
from jaxdrive.data.synthetic import generate_scene
from jaxdrive.viz import DERIVED_FIELDS, preview_main, proposal_values, render_scene
from conftest import EPDMS_FIXTURES

FIXTURE = EPDMS_FIXTURES / "scene_0000.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_ok(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 20_000


def test_render_family_values_and_derived(tmp_path):
    scene = generate_scene(3)
    assert _png_ok(render_scene(scene, tmp_path / "family.png", color_by="family"))
    assert _png_ok(render_scene(scene, tmp_path / "values.png", color_by="score",
                                values=np.linspace(0, 1, scene.num_proposals), title="scores"))
    assert _png_ok(render_scene(scene, tmp_path / "plain.png"))
    vals, label = proposal_values(scene, "max_speed")
    np.testing.assert_allclose(vals, scene.proposal_states[:, :, 3].max(1))
    assert "m/s" in label and set(DERIVED_FIELDS) >= {"final_speed", "max_speed", "distance"}


def test_preview_cli_on_fixture_coloured_by_expected_field(tmp_path, capsys):
    out = tmp_path / "fix.png"
    assert preview_main(["--scene", str(FIXTURE), "--color-by", "epdms", "--out", str(out)]) == 0
    assert _png_ok(out) and "wrote" in capsys.readouterr().out
    vals, _ = proposal_values(read_scene(FIXTURE), "epdms")
    assert vals.shape == (read_scene(FIXTURE).num_proposals,)


def test_preview_cli_synthetic(tmp_path):
    out = tmp_path / "sub" / "seed.png"
    assert preview_main(["--seed", "11", "--out", str(out), "--color-by", "final_speed"]) == 0
    assert _png_ok(out)


def test_bad_inputs_fail_clearly(tmp_path):
    scene = generate_scene(1)
    with pytest.raises(ValueError, match="--color-by: expected 'family', 'none' or one of"):
        render_scene(scene, tmp_path / "x.png", color_by="no_such_field")
    with pytest.raises(ValueError, match=r"values: expected shape \(16,\)"):
        render_scene(scene, tmp_path / "x.png", color_by="score", values=[1.0, 2.0])


def test_preview_out_is_checked_before_drawing_and_the_file_written_is_the_one_named(tmp_path, capsys):
    """``--out`` naming a directory wrote ``DIR.png`` beside it and said "wrote DIR"; a name without a suffix was
    written as ``NAME.png`` (reported as NAME); a folder below a file was a FileExistsError traceback; a suffix
    matplotlib cannot write failed (after any scoring) without naming the flag."""
    from jaxdrive.cli import main

    (tmp_path / "f").write_text("x")
    for out, says in ((tmp_path, "is a directory"), (tmp_path / "f" / "p.png", "is a file"),
                      (tmp_path / "p.txt", "'.txt'")):
        assert main(["scenes", "preview", "--num-proposals", "2", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}" in err and says in err and "Traceback" not in err, err
    assert not (tmp_path.parent / f"{tmp_path.name}.png").exists() and not (tmp_path / "p.txt").exists()
    assert main(["scenes", "preview", "--num-proposals", "2", "--out", str(tmp_path / "plain")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'plain'}"
    assert _png_ok(tmp_path / "plain") and not (tmp_path / "plain.png").exists()


@pytest.mark.parametrize("args, says", [
    (["--profile", "weird"], "--profile: expected one of ['default', 'hard', 'reference'], got 'weird'"),
    (["--num-proposals", "0"], "--num-proposals: expected >= 1, got 0"),
    (["--seed", "-1"], "--seed: expected a non-negative integer, got -1"),
])
def test_preview_names_the_flag_of_a_bad_synthetic_option(tmp_path, capsys, args, says):
    """Found by a walk-through: these said "profile: ...", "num_proposals: ...", "seed: ..." (generate_scene's
    arguments), naming no flag of `jaxdrive scenes preview`."""
    from jaxdrive.cli import main

    assert main(["scenes", "preview", *args, "--out", str(tmp_path / "p.png")]) == 2
    assert capsys.readouterr().err == f"jaxdrive scenes: {says}\n"
    assert not (tmp_path / "p.png").exists()
