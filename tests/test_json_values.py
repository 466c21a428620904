"""``is_finite_number``: the one test of "a finite JSON number" that the readers of files, configs and tool calls
share (each had its own copy; those on ``math.isfinite`` raised OverflowError on a 400-digit JSON integer)."""
import numpy as np
import pytest

from jaxdrive.json_values import is_finite_number


@pytest.mark.parametrize("value", [0, -3, 1.5, 10 ** 300, np.float64(2.0)])
def test_finite_numbers(value):
    assert is_finite_number(value) and is_finite_number(value, numpy_scalars=True)


@pytest.mark.parametrize("value", [10 ** 400, -10 ** 400, float("nan"), float("inf"), True, False, "1", None, [1],
                                   np.bool_(True), np.float32("nan"), np.complex128(1)])
def test_not_finite_numbers(value):
    assert not is_finite_number(value) and not is_finite_number(value, numpy_scalars=True)


@pytest.mark.parametrize("value", [np.float32(2.0), np.int64(3), np.uint8(1)])
def test_numpy_scalars_only_when_asked(value):
    assert not is_finite_number(value) and is_finite_number(value, numpy_scalars=True)
