"""NAVSIM's 11-field ego state layout (`StateIndex`), at the rear axle; x, y, heading global."""
X = 0
Y = 1
HEADING = 2
VELOCITY_X = 3
VELOCITY_Y = 4
ACCELERATION_X = 5
ACCELERATION_Y = 6
STEERING_ANGLE = 7
STEERING_RATE = 8
ANGULAR_VELOCITY = 9
ANGULAR_ACCELERATION = 10

FIELD_NAMES = (
    "x",
    "y",
    "heading",
    "velocity_x",
    "velocity_y",
    "acceleration_x",
    "acceleration_y",
    "steering_angle",
    "steering_rate",
    "angular_velocity",
    "angular_acceleration",
)
