"""Scene data model (``host``: HostScene and validation; ``device``: padded pytrees and padding): host scenes (ragged, float64, global frame) and padded device pytrees (float32, ego-centred).

Two representations:

* ``HostScene`` — one scene as read from a file or made by the generator: numpy float64 arrays in the global frame,
  ragged lists of polygons and agents. It round-trips losslessly through the ``epdms-scene/1`` JSON format.
* ``Scene`` / ``Proposals`` — frozen dataclass pytrees (``jaxdrive.pytree``) of fixed padded shapes, structure-of-arrays with one validity mask per
  ragged axis, re-centred on the ego rear axle at t = 0 (subtraction in float64 on the host, float32 afterwards). Batches
  of scenes are the same pytrees with leading dims; one compile serves every batch of one ``PadSpec``.

Padding conventions (the kernels rely on them, so masks are not needed inside the geometry loops):

* a polygon's padded vertices repeat its first vertex, so the extra edges are degenerate (zero length);
* padded polygons have every vertex at ``FAR`` (far outside the scene), and ``valid = False``;
* the centreline's padded points repeat its last point (zero-length segments add no arc length);
* padded agents are absent at every step and their boxes sit at ``FAR``.

State layout: NAVSIM's ``StateIndex`` (``StateIndex`` below), all ego states at the rear axle. Units SI, radians.
"""

from jaxdrive.scene.device import (FAR, Agents, BatchInfo, MapData, PadSpec, Polygons, Proposals, Scene, batch_scenes,
                                   grow_batch, pad_scene, validate_batch)
from jaxdrive.scene.host import (DT, HISTORY_TIMES, NUM_HISTORY, NUM_HISTORY_PADDED, NUM_STEPS, STATE_DIM, STATE_FIELDS,
                                 Agent, AgentType, Area, AreaKind, HostScene, Lane, LaneKind, SceneValidationError,
                                 StateIndex, pad_history, validate_host_scene, wrap_angle)

__all__ = [
    "DT", "FAR", "HISTORY_TIMES", "NUM_HISTORY", "NUM_HISTORY_PADDED", "NUM_STEPS", "STATE_DIM", "STATE_FIELDS",
    "Agent", "AgentType", "Agents", "Area", "AreaKind", "BatchInfo", "HostScene", "Lane", "LaneKind", "MapData",
    "PadSpec", "Polygons", "Proposals", "Scene", "SceneValidationError", "StateIndex", "batch_scenes", "grow_batch",
    "pad_history", "pad_scene", "validate_batch", "validate_host_scene", "wrap_angle",
]
