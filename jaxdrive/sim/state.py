"""NAVSIM's 11-field ego state layout at the rear axle, as plain ints for indexing (one source: ``scene.StateIndex``)."""
from jaxdrive.scene import STATE_FIELDS as FIELD_NAMES
from jaxdrive.scene import StateIndex

X = int(StateIndex.X)
Y = int(StateIndex.Y)
HEADING = int(StateIndex.HEADING)
VELOCITY_X = int(StateIndex.VELOCITY_X)
ACCELERATION_X = int(StateIndex.ACCELERATION_X)
STEERING_ANGLE = int(StateIndex.STEERING_ANGLE)
ANGULAR_VELOCITY = int(StateIndex.ANGULAR_VELOCITY)

__all__ = ["FIELD_NAMES", "X", "Y", "HEADING", "VELOCITY_X", "ACCELERATION_X", "STEERING_ANGLE", "ANGULAR_VELOCITY"]
