"""The EPDMS metric registry: names, kinds, roles, weights, gate order and labels, in one place.

Columns of ``jaxdrive score``'s parquet rows, the gate vector's order (``--gates``, DriveJudge's 9 gates), summary
rows and ``--color-by`` choices all come from here. Pure Python (no JAX), cheap to import.

* kind: "binary" ({0, 1}), "ternary" ({0, 0.5, 1}) or "continuous" ([0, 1]);
* role: "multiplier" (NC, DAC, DDC, TLC multiply the score), "weighted" (EP, TTC, LK, HC, EC enter the weighted
  average with ``weight``) or "aggregate" (a score computed from the others).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    label: str
    kind: str
    role: str
    weight: float = 0.0
    step: str | None = None  # column of its first violating step, if it has one


REGISTRY: tuple[Metric, ...] = (
    Metric("nc", "no at-fault collision", "ternary", "multiplier", step="nc_step"),
    Metric("dac", "drivable area", "binary", "multiplier", step="dac_step"),
    Metric("ddc", "driving direction", "ternary", "multiplier", step="ddc_step"),
    Metric("tlc", "traffic light", "binary", "multiplier", step="tlc_step"),
    Metric("ep", "ego progress", "continuous", "weighted", 5.0),
    Metric("ttc", "time to collision", "binary", "weighted", 5.0, step="ttc_step"),
    Metric("lk", "lane keeping", "binary", "weighted", 2.0, step="lk_step"),
    Metric("hc", "history comfort", "binary", "weighted", 2.0),
    Metric("ec", "extended comfort", "binary", "weighted", 2.0),  # NaN without a previous frame
    Metric("pdm_score", "PDM score", "continuous", "aggregate"),
    Metric("epdms", "EPDMS", "continuous", "aggregate"),
)

BY_NAME = {m.name: m for m in REGISTRY}
GATES = tuple(m.name for m in REGISTRY if m.role != "aggregate")  # gate order: nc dac ddc tlc ep ttc lk hc ec
MULTIPLIERS = tuple(m.name for m in REGISTRY if m.role == "multiplier")
WEIGHTS = {m.name: m.weight for m in REGISTRY if m.role == "weighted"}
AGGREGATES = tuple(m.name for m in REGISTRY if m.role == "aggregate")
STEPS = tuple(m.step for m in REGISTRY if m.step)
LABELS = {m.name: m.label for m in REGISTRY}
SCORE_FIELDS = GATES + AGGREGATES  # what a proposal can be coloured / summarised by
