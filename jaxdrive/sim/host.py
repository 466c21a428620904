"""Host entry point: validate, re-centre on the initial pose in float64, simulate in float64, shift back.

Shapes: the batch is flattened and zero-padded to a power-of-two bucket (at least 8), so ragged batch sizes
reuse a handful of compiled programs.

Precision choice (spec/tracker-json.md §5): x and y are re-centred on each initial rear axle on the host in float64
and the jitted core runs in float64 (inside a `jax.enable_x64(True)` context, so the process-wide setting is left
alone). That reproduces NAVSIM to its stored rounding (≤ 5e-5 m on the fixtures). The same core in float32 on the
re-centred arrays stays within ~6e-5 m and ~6e-6 rad; that is the path for `simulate_local` inside the float32
scoring jit.
"""
import jax
import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.sim import constants as C
from jaxdrive.sim.simulate import simulate_local
from jaxdrive.sim.times import knot_and_query_offsets_us

_simulate_jit = jax.jit(simulate_local)
_MIN_BUCKET = 8


def _bucket_size(count: int) -> int:
    """Flat batch size the core is compiled for: the next power of two, at least 8 (few compiles, ≤ 2x padding)."""
    return max(_MIN_BUCKET, 1 << max(count - 1, 0).bit_length())


def as_float_array(name: str, value, trailing: tuple[int, ...]) -> np.ndarray:
    """`value` as float64 with the given trailing shape and finite entries, or a ValueError naming `name`."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise UserInputError(f"{name}: expected a real numeric array, got {type(value).__name__} ({err})") from None
    expected = "[..., " + ", ".join(map(str, trailing)) + "]"
    if array.ndim < len(trailing) or array.shape[array.ndim - len(trailing):] != trailing:
        raise UserInputError(f"{name}: expected shape {expected}, got {list(array.shape)}")
    if not np.all(np.isfinite(array)):
        bad = np.argwhere(~np.isfinite(array))[0]
        raise UserInputError(f"{name}: expected finite values, got {array[tuple(bad)]} at index {tuple(bad.tolist())}")
    return array


def simulate_trajectories(initial_states, poses, t0_us=0) -> np.ndarray:
    """NAVSIM's simulation of submitted trajectories: interpolation to 0.1 s, LQR tracking, kinematic bicycle.

    Args:
      initial_states: [*b, 11] initial ego states in NAVSIM's `StateIndex` layout at the rear axle, x, y, heading
        in the global frame (UTM-scale coordinates are fine) [SI units, rad].
      poses: [*b, 8, 3] submitted (x, y, heading) at 0.5, 1.0, ..., 4.0 s in each initial rear-axle frame
        [m, m, rad]. The batch prefixes of the two arguments must broadcast.
      t0_us: integer timestamp(s) of the initial states [µs], broadcastable to the batch; only its µs truncation
        jitter matters (≤ 3e-5 m). Default 0: the exact 0.1 s grid.

    Returns:
      [*b, 41, 11] float64 simulated states in the global frame; row 0 is the initial state.

    Raises:
      ValueError: naming the argument, on a wrong shape, non-finite values or non-integer / unbroadcastable t0_us.
    """
    initial = as_float_array("initial_states", initial_states, (C.NUM_STATE_FIELDS,))
    relative = as_float_array("poses", poses, (C.NUM_SUBMITTED_POSES, 3))
    t0 = np.asarray(t0_us)
    if not (np.issubdtype(t0.dtype, np.integer) or (np.issubdtype(t0.dtype, np.floating) and np.all(t0 == np.round(t0)))):
        raise UserInputError(f"t0_us: expected integer microseconds, got {t0_us!r}")
    try:
        batch = np.broadcast_shapes(initial.shape[:-1], relative.shape[:-2], t0.shape)
    except ValueError:
        raise UserInputError(
            f"initial_states {list(initial.shape)}, poses {list(relative.shape)} and t0_us {list(t0.shape)}: "
            "expected batch prefixes that broadcast"
        ) from None
    initial = np.broadcast_to(initial, batch + initial.shape[-1:])
    relative = np.broadcast_to(relative, batch + relative.shape[-2:])
    knots, queries = knot_and_query_offsets_us(np.broadcast_to(t0.astype(np.int64), batch))

    count = int(np.prod(batch, dtype=np.int64))
    pad = _bucket_size(count) - count

    def flat(array: np.ndarray) -> np.ndarray:
        rows = array.reshape((count,) + array.shape[len(batch):])
        return np.pad(rows, [(0, pad)] + [(0, 0)] * (rows.ndim - 1))

    local = flat(initial)
    local[:, :2] = 0.0  # re-centre on each initial rear axle; padding rows are a parked ego at the origin
    with jax.enable_x64(True):
        states = np.array(
            _simulate_jit(local, flat(relative), flat(knots).astype(np.float64), flat(queries).astype(np.float64)),
            dtype=np.float64,
        )
    states = states[:count].reshape(batch + states.shape[1:])
    states[..., :2] += initial[..., None, :2]
    return states
