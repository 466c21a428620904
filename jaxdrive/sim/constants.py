"""NAVSIM's configured constants for the simulation step (spec/tracker-json.md §3.1).

Values are those of NAVSIM's default-constructed objects (`index.json` -> `constants` in the tracker fixtures).
"""
import math

from jaxdrive.constants import EGO_WHEEL_BASE
from jaxdrive.constants import NUM_STEPS as _NUM_STEPS

NUM_SUBMITTED_POSES = 8
"""Poses of a submitted trajectory, at 0.5 s intervals over 4 s."""
SUBMITTED_INTERVAL_US = 500_000
NUM_KNOTS = NUM_SUBMITTED_POSES + 1
"""Interpolation knots: the initial state plus the submitted poses."""

NUM_STATES = _NUM_STEPS
"""Simulated states at 0.1 s, including the initial one (horizon 4.0 s)."""
NUM_STEPS = NUM_STATES - 1
STATE_INTERVAL_US = 100_000
NUM_STATE_FIELDS = 11
"""Fields of NAVSIM's `StateIndex` layout (see `jaxdrive.sim.state`)."""

TRACKER_DT = 0.1
"""Tracker discretisation time [s] (exactly the float 0.1)."""
MOTION_MODEL_DT = 100_000 * 1e-6
"""Motion-model step [s]: `TimePoint(100000).time_s` = 0.09999999999999999."""

TRACKING_HORIZON = 10
Q_LONGITUDINAL = 10.0
R_LONGITUDINAL = 1.0
Q_LATERAL = (1.0, 10.0, 0.0)
"""Weights of (lateral error, heading error, steering angle)."""
R_LATERAL = 1.0
JERK_PENALTY = 1e-4
"""Weight of NAVSIM's (mis-built) acceleration regulariser in the speed fit (see `lqr.banded_difference_matrix`)."""
CURVATURE_RATE_PENALTY = 1e-2
INITIAL_CURVATURE_PENALTY = 1e-10
STOPPING_PROPORTIONAL_GAIN = 0.5
STOPPING_VELOCITY = 0.2
"""[m/s] The stopping controller runs when both the speed and the reference speed are at most this."""

WHEEL_BASE = EGO_WHEEL_BASE
"""Chrysler Pacifica wheel base [m], used by both the tracker and the motion model."""
MAX_STEERING_ANGLE = math.pi / 3
ACCEL_TIME_CONSTANT = 0.2
STEERING_ANGLE_TIME_CONSTANT = 0.05
