"""Exit 2 only for jaxdrive's own input checks (``jaxdrive.errors.UserInputError``), one line naming the input;
anything else is a bug: exit 1, the traceback, and a line asking for a report. Every subcommand is walked with a bad
input."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from jaxdrive.cli import EXIT_FAILURE, EXIT_USAGE, build_parser, main
from jaxdrive.errors import UserInputError


def _leaf_commands() -> set[str]:
    out = set()

    def walk(p, pre):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, child in a.choices.items():
                    if any(isinstance(x, argparse._SubParsersAction) for x in child._actions):
                        walk(child, pre + [name])
                    else:
                        out.add(" ".join(pre + [name]))
    walk(build_parser(), [])
    return out


def _bad_inputs(t) -> dict[str, tuple[list[str], str]]:
    """command -> (argv with a bad input, a regex the first stderr line matches after "jaxdrive <command>: ")."""
    garbage = t / "garbage.json"
    garbage.write_text("{not json")
    lines = t / "garbage.jsonl"
    lines.write_text("{not json\n")
    npz = t / "bad.npz"
    npz.write_bytes(b"not a zip file")
    nowhere = t / "nowhere"
    empty = t / "empty"
    empty.mkdir()
    return {
        "score": (["score", "--count", "1", "--gates", str(garbage), "--out", str(t / "o1")], r"--gates .*garbage"),
        "scenes generate": (["scenes", "generate", "--count", "0", "--out", str(t / "o2")], r"--count"),
        "scenes convert": (["scenes", "convert", str(nowhere), "--out", str(t / "o3")], r"JSON_DIR .*nowhere"),
        "scenes refresh": (["scenes", "refresh", str(empty)], r"STORE .*empty.*not a jaxdrive scene store"),
        "scenes preview": (["scenes", "preview", "--scene", str(garbage), "--out", str(t / "p.png")], r"garbage"),
        "scenes from-navsim": (["scenes", "from-navsim", str(empty), "--out", str(t / "o4")], r"empty"),
        "scenes add-pdm-closed": (["scenes", "add-pdm-closed", str(nowhere), "--out", str(t / "o5")], r"nowhere"),
        "vocab build": (["vocab", "build", "--size", "0", "--from-scenes", "4", "--out", str(t / "v.npy")],
                        r"--size"),
        "train sft": (["train", "sft", "--config", str(nowhere / "c.py")], r"nowhere"),
        "train grpo": (["train", "grpo", "--config", str(nowhere / "c.py")], r"nowhere"),
        "memory build": (["memory", "build", "--entries", str(lines), "--out", str(t / "m")], r"garbage\.jsonl"),
        "memory query": (["memory", "query", "--store", str(empty), "--question", "q"], r"empty"),
        "memory consolidate": (["memory", "consolidate", "--store", str(empty), "--trajectories", str(lines)],
                               r"empty|garbage"),
        "agent run": (["agent", "run", "--scenes", "1", "--seed", "-1", "--out", str(t / "t.jsonl")], r"--seed"),
        "agent convert": (["agent", "convert", "--trajectories", str(lines), "--phase", "1", "--out",
                           str(t / "c.jsonl")], r"garbage\.jsonl"),
        "eval dqc": (["eval", "dqc", "--no-plot", "--predictions", str(garbage)], r"garbage"),
        "eval tps": (["eval", "tps", "--predictions", str(garbage)], r"garbage"),
        "eval planning": (["eval", "planning", "--predictions", str(npz), "--gt", str(npz)], r"bad\.npz"),
        "eval vqa": (["eval", "vqa", "drivemllm", "--predictions", str(lines)], r"garbage\.jsonl"),
        "judge data": (["judge", "data", "--train", "-1", "--out", str(t / "j")], r"--train"),
        "judge baselines": (["judge", "baselines", "--data", str(nowhere), "--out", str(t / "b")], r"nowhere"),
        "judge run": (["judge", "run", "--model", str(nowhere), "--data", str(nowhere), "--out", str(t / "r")],
                      r"nowhere"),
        "data build": (["data", "build", "drivejudge", str(nowhere), "--out", str(t / "d")], r"nowhere"),
    }


def test_every_subcommand_refuses_a_bad_input_with_exit_2_and_one_line(tmp_path, capsys):
    cases = _bad_inputs(tmp_path)
    assert set(cases) == _leaf_commands()  # a new subcommand needs a case here
    import re

    for command, (argv, named) in cases.items():
        rc = main(argv)
        err = capsys.readouterr().err
        first = err.strip().splitlines()[0] if err.strip() else ""
        assert rc == EXIT_USAGE, (command, rc, err[-2000:])
        assert first.startswith(f"jaxdrive {argv[0]}: "), (command, first)
        assert re.search(named, first), (command, first)
        assert "Traceback" not in err, (command, err)


def test_a_bug_is_exit_1_with_the_traceback_and_a_request_to_report(tmp_path, capsys, monkeypatch):
    """A ValueError that no input check raised (here numpy's, as from a shape bug) is not "bad usage"."""
    import jaxdrive.cli as cli

    def broken(args):
        np.zeros((2, 3)) + np.zeros((4,))  # ValueError: operands could not be broadcast
    monkeypatch.setattr(cli, "_run_generate", broken)
    rc = main(["scenes", "generate", "--count", "1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == EXIT_FAILURE
    assert "Traceback" in err and "could not be broadcast" in err
    assert "bug in jaxdrive" in err.strip().splitlines()[-1] and "report" in err.strip().splitlines()[-1]

    def refused(args):
        raise UserInputError("--thing: expected a number, got 'x'")
    monkeypatch.setattr(cli, "_run_generate", refused)
    rc = main(["scenes", "generate", "--count", "1", "--out", str(tmp_path / "o")])
    assert rc == EXIT_USAGE
    assert capsys.readouterr().err == "jaxdrive scenes: --thing: expected a number, got 'x'\n"


@pytest.mark.parametrize("name", ["SceneFileError", "SceneValidationError", "CacheFileError", "StoppedAtScene",
                                  "DatasetSourceError", "EmptySplitError"])
def test_input_check_exceptions_are_user_input_errors(name):
    from jaxdrive.data.navsim_cache import CacheFileError
    from jaxdrive.data.scene_json import SceneFileError
    from jaxdrive.data.tfds_writer import EmptySplitError
    from jaxdrive.datasets.base import SourceError as DatasetSourceError
    from jaxdrive.scene import SceneValidationError
    from jaxdrive.scoring.runner import StoppedAtScene

    assert issubclass(locals()[name], UserInputError)
