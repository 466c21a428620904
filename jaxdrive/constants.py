"""NAVSIM's horizon, vehicle and rule constants, defined once (every module that needs one imports it from here).

Horizon: 41 rear-axle states at 0.1 s (0.0 .. 4.0 s). Vehicle: the Chrysler Pacifica of nuPlan's
``get_pacifica_parameters`` (metres). Rules: TTC projects the ego box forward over offsets of 0, 3, 6, 9 steps
(0 .. 0.9 s) from ego steps 0..31; NC walks every step; LK measures the ego centre's distance to the centreline
against 0.5 m. Quantities derived from these (the broad phase's culling reaches) are derived, not restated.
"""

NUM_STEPS = 41  # states 0.0 .. 4.0 s
DT = 0.1  # s between states

EGO_LENGTH = 5.176
EGO_WIDTH = 2.297
EGO_HEIGHT = 1.777
EGO_FRONT_LENGTH = 4.049  # rear axle to front bumper
EGO_REAR_LENGTH = 1.127  # rear axle to rear bumper
EGO_WHEEL_BASE = 3.089
EGO_REAR_AXLE_TO_CENTER = 1.461

TTC_OFFSETS = (0, 3, 6, 9)  # projection steps: np.arange(0, int(1.0 * 10), 3)
TTC_FRAMES_AHEAD = TTC_OFFSETS[-1]
TTC_LAST_EGO_STEP = NUM_STEPS - 1 - TTC_FRAMES_AHEAD  # 31
TTC_STEPS = TTC_LAST_EGO_STEP + 1  # ego steps TTC tests
TTC_HORIZON_S = TTC_FRAMES_AHEAD * DT  # the ego box moves forward by up to speed x 0.9 s
NC_STEPS = NUM_STEPS  # NC tests ego steps 0..40 against object frames 0..40
LK_DEVIATION_M = 0.5  # LK counts steps whose centre is more than this from the centreline
