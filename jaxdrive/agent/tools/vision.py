"""Camera tools (paper appendix A.3: open-vocabulary grounding and 3-D geometry) with pluggable vision models.

Vision models are interfaces: ``Detector2D.detect(ctx, camera, words) -> [Detection]`` and
``DepthEstimator.depth(ctx, camera, u, v) -> metres | None``. The implementations here are annotation-backed: they
project the scene's 3-D object boxes through the camera calibration (``ToolContext.cameras``), so every answer is exact
and known; a real detector (YOLO-World, UniDepth...) plugs in through ``ToolContext.detector`` / ``depth_model``.
Only ``detect_2d`` (the detector) and ``depth_monocular`` (the depth model) use plugged-in models: the target-based
3-D tools (location, depth, pairwise distance, depth order) and ``select_referred_instance`` resolve their target
among the annotated boxes and read its annotated 3-D centre, whatever detector is plugged in.

Camera frame: x right, y down, z forward (metres); pixels (u, v) from the top-left corner. 3-D tools resolve a target
``{"object": word}`` (exactly one detection of that class in the view, else an error listing the candidates: use
``select_referred_instance``) or ``{"box": [x0, y0, x1, y1]}`` (the detection with IoU >= 0.5).
"""
from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from jaxdrive.agent.tools.context import Camera, ToolContext
from jaxdrive.agent.tools.registry import Tool, ToolError

SYNONYMS = {
    "vehicle": ("car", "vehicle", "truck", "lorry", "bus", "van", "suv", "taxi", "automobile"),
    "pedestrian": ("pedestrian", "person", "people", "man", "woman", "child", "walker"),
    "bicycle": ("bicycle", "bike", "cyclist", "bicyclist", "rider"),
    "traffic_cone": ("cone", "traffic cone", "traffic_cone"),
    "barrier": ("barrier", "fence", "barricade"),
    "czone_sign": ("sign", "construction sign", "czone_sign"),
    "generic_object": ("object", "debris", "obstacle", "generic_object"),
}
# plurals the suffix rules of ``singular`` get wrong (and the uncountable "debris", which ends in "s")
IRREGULAR_PLURALS = {"people": "person", "men": "man", "women": "woman", "children": "child", "busses": "bus",
                     "debris": "debris"}
MATCH_IOU = 0.5


@dataclasses.dataclass
class Detection:
    label: str
    box: list[float]  # [x0, y0, x1, y1] px
    confidence: float
    index: int = -1  # object index in the context (annotation-backed detectors only)

    def public(self) -> dict:
        x0, y0, x1, y1 = self.box
        return {"label": self.label, "box": [round(v, 1) for v in self.box],
                "center": [round((x0 + x1) / 2, 1), round((y0 + y1) / 2, 1)], "confidence": round(self.confidence, 3)}


class Detector2D(Protocol):
    def detect(self, ctx: ToolContext, camera: str, words: list[str]) -> list[Detection]: ...


class DepthEstimator(Protocol):
    def depth(self, ctx: ToolContext, camera: str, u: float, v: float) -> float | None: ...


def _singular_word(w: str) -> str:
    """One lower-case English word in the singular: ``IRREGULAR_PLURALS``; "-ies" -> "-y" (lorries); "-es" dropped
    after s, x, z, ch, sh (buses, boxes, benches); a final "s" dropped (cars, fences) unless the word ends in "ss" or
    "us" (glass, bus). Enough for the object vocabulary (``SYNONYMS``), not for every English noun ("horses")."""
    if w in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[w]
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith("es") and w[:-2].endswith(("s", "x", "z", "ch", "sh")):
        return w[:-2]
    if w.endswith("s") and not w.endswith(("ss", "us")):
        return w[:-1]
    return w


def singular(phrase: str) -> str:
    """``phrase`` with its last word (after a space or underscore) in the singular: "traffic cones" -> "traffic
    cone"."""
    i = max(phrase.rfind(" "), phrase.rfind("_")) + 1
    return phrase[:i] + _singular_word(phrase[i:])


def _labels_for(words: list[str]) -> set[str]:
    """The detection labels the object words name, singular or plural, case-insensitive."""
    out = set()
    for w in words:
        w = w.strip().lower()
        for label, syn in SYNONYMS.items():
            if w in syn or singular(w) in syn:
                out.add(label)
    return out


def object_corners_3d(ctx: ToolContext, i: int, step: int = 0) -> np.ndarray:
    """[8, 3] corners of object i's 3-D box in the ego frame (x right, y forward, z up)."""
    o = ctx.objects
    (x, y), h = o.xy[i, step], o.heading[i, step]
    length, width, height = o.size[i]
    d = np.array([-np.sin(h), np.cos(h)])
    n = np.array([np.cos(h), np.sin(h)])
    foot = [np.array([x, y]) + a * length / 2 * d + b * width / 2 * n for a, b in ((1, 1), (-1, 1), (-1, -1), (1, -1))]
    return np.array([[p[0], p[1], z] for z in (0.0, height) for p in foot])


def to_camera(cam: Camera, pts: np.ndarray) -> np.ndarray:
    """Ego-frame points [n, 3] -> camera frame [n, 3]."""
    return pts @ cam.ego_to_camera[:3, :3].T + cam.ego_to_camera[:3, 3]


def project(cam: Camera, pts_cam: np.ndarray) -> np.ndarray:
    """Camera-frame points [n, 3] (z > 0) -> pixels [n, 2]."""
    uvw = pts_cam @ cam.K.T
    return uvw[:, :2] / uvw[:, 2:3]


def object_center_camera(ctx: ToolContext, cam: Camera, i: int) -> np.ndarray:
    return to_camera(cam, object_corners_3d(ctx, i)).mean(axis=0)


class AnnotationDetector:
    """2-D detections from the annotated 3-D boxes: boxes fully in front of the camera, projected, clipped to the
    image."""

    def boxes(self, ctx: ToolContext, camera: str) -> list[Detection]:
        cam = _camera(ctx, camera)
        out = []
        for i in np.flatnonzero(ctx.objects.present[:, 0]):
            pc = to_camera(cam, object_corners_3d(ctx, int(i)))
            if np.any(pc[:, 2] <= 0.1):
                continue
            uv = project(cam, pc)
            x0, y0 = np.clip(uv.min(0), 0, [cam.width, cam.height])
            x1, y1 = np.clip(uv.max(0), 0, [cam.width, cam.height])
            if x1 - x0 > 1.0 and y1 - y0 > 1.0:
                out.append(Detection(ctx.objects.labels[i], [float(x0), float(y0), float(x1), float(y1)], 1.0, int(i)))
        return out

    def detect(self, ctx: ToolContext, camera: str, words: list[str]) -> list[Detection]:
        labels = _labels_for(words)
        return [d for d in self.boxes(ctx, camera) if d.label in labels]


class AnnotationDepth:
    """Depth at a pixel: camera depth (z) of the nearest annotated object whose projected box contains the pixel."""

    def depth(self, ctx: ToolContext, camera: str, u: float, v: float) -> float | None:
        cam = _camera(ctx, camera)
        best = None
        for d in AnnotationDetector().boxes(ctx, camera):
            x0, y0, x1, y1 = d.box
            if x0 <= u <= x1 and y0 <= v <= y1:
                z = float(object_center_camera(ctx, cam, d.index)[2])
                best = z if best is None else min(best, z)
        return best


def _camera(ctx: ToolContext, name: str) -> Camera:
    if name not in ctx.cameras:
        raise ToolError(f"unknown camera {name!r} (cameras: {', '.join(ctx.cameras)})")
    return ctx.cameras[name]


def _detector(ctx: ToolContext) -> Detector2D:
    return ctx.detector or AnnotationDetector()


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _resolve(ctx: ToolContext, camera: str, target: dict) -> Detection:
    """The annotated detection a target names (see the module docstring)."""
    all_boxes = AnnotationDetector().boxes(ctx, camera)
    if "box" in target:
        box = target["box"]
        if box[2] <= box[0] or box[3] <= box[1]:
            raise ToolError(f"box {box}: expected [x0, y0, x1, y1] with x1 > x0 and y1 > y0")
        scored = sorted(((iou(box, d.box), k) for k, d in enumerate(all_boxes)), reverse=True)
        if not scored or scored[0][0] < MATCH_IOU:
            raise ToolError(f"no object found at box {box} in {camera}")
        return all_boxes[scored[0][1]]
    labels = _labels_for([target["object"]])
    cands = [d for d in all_boxes if d.label in labels]
    if not cands:
        raise ToolError(f"no {target['object']!r} visible in {camera} (inconclusive: it may be occluded or elsewhere)")
    if len(cands) > 1:
        boxes = [d.public()["box"] for d in cands]
        raise ToolError(f"{len(cands)} candidates for {target['object']!r} in {camera}: {boxes}; pass one as "
                        "{\"box\": [...]} (select_referred_instance)")
    return cands[0]


def _band(z: float) -> str:
    return "near" if z < 10.0 else "medium" if z < 30.0 else "far"


def detect_2d(ctx: ToolContext, camera, objects):
    _camera(ctx, camera)
    return [d.public() for d in _detector(ctx).detect(ctx, camera, objects)]


def select_instance(ctx: ToolContext, camera, description, box):
    d = _resolve(ctx, camera, {"box": box})
    return {"description": description, **{k: v for k, v in d.public().items() if k in ("box", "center", "label")}}


def location_3d(ctx: ToolContext, camera, target):
    cam = _camera(ctx, camera)
    d = _resolve(ctx, camera, target)
    p = object_center_camera(ctx, cam, d.index)
    return {"label": d.label, "xyz_m": [round(float(v), 2) for v in p],
            "distance_m": round(float(np.linalg.norm(p)), 2)}


def depth(ctx: ToolContext, camera, target):
    cam = _camera(ctx, camera)
    d = _resolve(ctx, camera, target)
    p = object_center_camera(ctx, cam, d.index)
    return {"label": d.label, "depth_m": round(float(p[2]), 2), "distance_m": round(float(np.linalg.norm(p)), 2),
            "band": _band(float(p[2]))}


def pairwise(ctx: ToolContext, camera, target_a, target_b):
    cam = _camera(ctx, camera)
    a, b = _resolve(ctx, camera, target_a), _resolve(ctx, camera, target_b)
    if a.index == b.index:
        raise ToolError("target_a and target_b resolve to the same object")
    pa, pb = object_center_camera(ctx, cam, a.index), object_center_camera(ctx, cam, b.index)
    return {"lateral_gap_m": round(float(abs(pa[0] - pb[0])), 2),
            "distance_m": round(float(np.linalg.norm(pa - pb)), 2)}


def depth_order(ctx: ToolContext, camera, target_a, target_b):
    cam = _camera(ctx, camera)
    a, b = _resolve(ctx, camera, target_a), _resolve(ctx, camera, target_b)
    if a.index == b.index:
        raise ToolError("target_a and target_b resolve to the same object")
    za, zb = (float(object_center_camera(ctx, cam, x.index)[2]) for x in (a, b))
    gap = abs(za - zb)
    return {"closer": "target_a" if za < zb else "target_b", "depth_a_m": round(za, 2), "depth_b_m": round(zb, 2),
            "confidence": "high" if gap > 2.0 else "medium" if gap > 0.5 else "low"}


def depth_monocular(ctx: ToolContext, camera, box):
    _camera(ctx, camera)
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ToolError(f"box {box}: expected [x0, y0, x1, y1] with x1 > x0 and y1 > y0")
    u, v = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    z = (ctx.depth_model or AnnotationDepth()).depth(ctx, camera, u, v)
    if z is None:
        raise ToolError(f"no depth estimate at pixel ({u:.1f}, {v:.1f}) in {camera}")
    return {"pixel": [round(u, 1), round(v, 1)], "depth_m": round(float(z), 2), "band": _band(z), "approximate": True}


CAMERA = {"type": "string"}
BOX = {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4}
TARGET = {"oneOf": [
    {"type": "object", "additionalProperties": False, "required": ["object"],
     "properties": {"object": {"type": "string"}}},
    {"type": "object", "additionalProperties": False, "required": ["box"], "properties": {"box": BOX}}]}


def _obj(required: list[str], **props) -> dict:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": props}


TOOLS = [
    Tool("detect_objects_2d_open_vocab", "Open-vocabulary 2-D detection of the listed object words in one camera "
         "view: boxes [x0, y0, x1, y1] px, centres, confidences. An empty result is inconclusive, not absence.",
         _obj(["camera", "objects"], camera=CAMERA, objects={"type": "array", "items": {"type": "string"},
                                                             "minItems": 1, "maxItems": 8}), detect_2d),
    Tool("select_referred_instance", "Confirm the referred instance among same-class candidates: camera, textual "
         "description and the chosen box -> confirmed box and pixel centre.",
         _obj(["camera", "description", "box"], camera=CAMERA, description={"type": "string"}, box=BOX),
         select_instance),
    Tool("estimate_object_3d_location_camera", "Metric camera-frame (x right, y down, z forward) location of a target "
         "and its straight-line distance (m).", _obj(["camera", "target"], camera=CAMERA, target=TARGET), location_3d),
    Tool("estimate_object_depth", "Forward depth, straight-line distance and distance band (near/medium/far) of a "
         "target.", _obj(["camera", "target"], camera=CAMERA, target=TARGET), depth),
    Tool("measure_pairwise_distance_3d", "Lateral gap |dx| and 3-D distance (m) between two targets in one view.",
         _obj(["camera", "target_a", "target_b"], camera=CAMERA, target_a=TARGET, target_b=TARGET), pairwise),
    Tool("compare_object_depth_order", "Which of two targets is closer to the ego, their depths and a confidence.",
         _obj(["camera", "target_a", "target_b"], camera=CAMERA, target_a=TARGET, target_b=TARGET), depth_order),
    Tool("estimate_object_depth_monocular", "Approximate monocular depth at the centre of a box (less reliable far "
         "away).", _obj(["camera", "box"], camera=CAMERA, box=BOX), depth_monocular),
]
