"""Host entry point for tracking a dense 0.1 s reference (PDM-Closed plans, vocabulary trajectories) with NAVSIM's
LQR tracker + bicycle: ``PDMSimulator.simulate_proposals`` on [B, 41] poses (the submitted-pose path is ``host.py``).

Re-centred on each initial rear axle and run in float64 (scoped x64), like ``simulate_trajectories``.
"""
import jax
import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.sim import constants as C
from jaxdrive.sim.host import as_float_array
from jaxdrive.sim.simulate import track_reference

_track_jit = jax.jit(jax.vmap(lambda s, p: track_reference(s, p)[0]))


def track_poses(initial_states, reference_poses) -> np.ndarray:
    """Simulated states [B, 41, 11] (global frame, float64) tracking ``reference_poses`` [B, 41, 3] (x, y, heading,
    global) from ``initial_states`` [B, 11] (``StateIndex`` layout). Only the reference poses matter (NAVSIM).

    Raises:
      ValueError: naming the argument, on a wrong shape or a non-finite value (NaN would propagate silently).
    """
    init = as_float_array("initial_states", initial_states, (C.NUM_STATE_FIELDS,))
    ref = as_float_array("reference_poses", reference_poses, (3,))
    if init.ndim != 2 or init.shape[1] != C.NUM_STATE_FIELDS:
        raise UserInputError(f"initial_states: expected shape [B, {C.NUM_STATE_FIELDS}], got {list(init.shape)}")
    if ref.shape != (init.shape[0], C.NUM_STATES, 3):
        raise UserInputError(f"reference_poses: expected shape [{init.shape[0]}, {C.NUM_STATES}, 3], got {list(ref.shape)}")
    origin = init[:, None, :2]
    local_init = init.copy()
    local_init[:, :2] = 0.0
    local_ref = ref.copy()
    local_ref[..., :2] -= origin
    with jax.enable_x64(True):
        out = np.array(_track_jit(local_init, local_ref), np.float64)
    out[..., :2] += origin
    return out
