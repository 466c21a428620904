"""OpenREAD trajectory text: emit/parse round trips and the public parser's failure cases (signs, exponents)."""
import re

import numpy as np
import pytest

from jaxdrive.eval.trajectory_text import format_trajectory, parse_trajectory


def public_str_to_numpy(text: str) -> np.ndarray:
    """OpenREAD's published parser (regex over all numbers, reshape to (6, 2)), for contrast."""
    return np.asarray([float(v) for v in re.findall(r"[-+]?\d*\.\d+|\d+", text)]).reshape(6, 2)


def test_round_trip_two_decimals_and_negative_zero():
    pts = np.array([[1.234, -0.004], [2.5, 0.1], [3.75, -0.26], [5.0, -0.5], [6.25, -1.0], [7.5, -1.55]])
    text = format_trajectory(pts)
    assert text.startswith("(1.23, 0.00), (2.50, 0.10), ")
    assert text.count("(") == 6 and "-0.00" not in text
    np.testing.assert_allclose(parse_trajectory(text), np.round(pts, 2) + 0.0)


def test_signs_of_integers_and_exponents_where_the_public_parser_fails():
    text = "(6.2, -3), (7, +1), (1e-2, -2.5E1), (-.5, 4.), (8, 0), (−1.5, 2)"
    expect = [[6.2, -3], [7, 1], [0.01, -25], [-0.5, 4], [8, 0], [-1.5, 2]]
    np.testing.assert_allclose(parse_trajectory(text), expect)
    assert public_str_to_numpy("(6.2, -3), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1)")[0, 1] == 3  # sign lost
    with pytest.raises(ValueError):  # 1e-2 read as two numbers: 13 values
        public_str_to_numpy("(1e-2, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1)")


def test_answer_span_and_brackets():
    think = "<think>Go straight; the car at (3.0, 1.0) is parked.</think>"
    answer = "<answer> [1, 0], [2, 0], [3, 0.1], [4, 0.2], [5, 0.3], [6, 0.4] </answer>"
    np.testing.assert_allclose(parse_trajectory(think + answer)[:, 0], [1, 2, 3, 4, 5, 6])


@pytest.mark.parametrize("text", [
    None, "", "go straight", "(1, 2), (3, 4)",  # too few
    ", ".join(["(1, 2)"] * 7),  # too many
    "(1.2.3, 4), (1, 2), (1, 2), (1, 2), (1, 2), (1, 2)",  # malformed number
    "(1e999, 4), (1, 2), (1, 2), (1, 2), (1, 2), (1, 2)",  # overflow -> inf
    "(nan, 4), (1, 2), (1, 2), (1, 2), (1, 2), (1, 2)",
    "<answer></answer> (1, 2), (1, 2), (1, 2), (1, 2), (1, 2), (1, 2)",  # empty answer span
])
def test_unparsable_is_none_never_an_exception(text):
    assert parse_trajectory(text) is None


def test_format_rejects_bad_shapes():
    with pytest.raises(ValueError, match="points"):
        format_trajectory(np.zeros((6, 3)))
