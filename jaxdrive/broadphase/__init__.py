"""Exact broad phase: which map edges and agents each proposal can touch, packed for the rule kernels.

* ``host``: the numpy packer (``pack_batch``) of a padded host batch, sized by a ``PackSpec``, and ``needs``
  (the sizes a batch needs, for choosing capacities);
* ``device``: the same packing inside a jitted program at fixed capacities (``pack_on_device``), with an overflow
  flag (``jaxdrive.scorer`` falls back on the unculled kernels when it is set);
* ``tiles``: point-in-polygon and box-polygon contact over the packed edge tiles;
* ``contacts``: NC's and TTC's shared plumbing over the packed (proposal, agent, chunk) triples.

The structures (``EdgeTiles``, ``PackedMap``, ``ContactPairs``, ``PackedAgents``) and the constants are re-exported
here; the packers' results are identical whichever side builds them (tested).
"""

from jaxdrive.broadphase.host import (AGENT_MULTIPLE, CENTERLINE_REACH_M, CONTACT_MULTIPLE, CONTACT_STEPS,
                                      EGO_RADIUS_M, MAP_CHUNK_STEPS, MARGIN_M, NC_STEPS, SEGMENT_MULTIPLE,
                                      TILE_EDGES, TILE_MULTIPLE, TTC_FRAMES_AHEAD, TTC_HORIZON_S, TTC_STEPS,
                                      ContactPairs, EdgeTiles, PackedAgents, PackedMap, PackSpec, agent_bboxes,
                                      agent_chunk_bboxes, contact_pairs, cull_agents, ego_chunk_bboxes, group_rows,
                                      near_segments, overlaps, pack_batch, pack_map, polygon_bboxes, swept_bboxes)

__all__ = [
    "AGENT_MULTIPLE", "CENTERLINE_REACH_M", "CONTACT_MULTIPLE", "CONTACT_STEPS", "EGO_RADIUS_M", "MAP_CHUNK_STEPS",
    "MARGIN_M", "NC_STEPS", "SEGMENT_MULTIPLE", "TILE_EDGES", "TILE_MULTIPLE", "TTC_FRAMES_AHEAD", "TTC_HORIZON_S",
    "TTC_STEPS", "ContactPairs", "EdgeTiles", "PackedAgents", "PackedMap", "PackSpec", "agent_bboxes",
    "agent_chunk_bboxes", "contact_pairs", "cull_agents", "ego_chunk_bboxes", "group_rows", "near_segments",
    "overlaps", "pack_batch", "pack_map", "polygon_bboxes", "swept_bboxes",
]
