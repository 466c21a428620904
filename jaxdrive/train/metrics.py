"""Metrics sink: one line per logging step to stdout, a JSONL file, and TensorBoard event files (tensorboardX)."""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Mapping, TextIO

import numpy as np


def _scalar(v: Any) -> float:
    return float(np.asarray(v))


class MetricsLogger:
    """Writes ``{"step": s, "<prefix>/<name>": value, ...}`` records.

    Args:
      workdir: directory of ``metrics.jsonl`` and the TensorBoard ``tb/`` event files (None: stdout only).
      stdout: print a compact line per record (to ``stream``, default sys.stdout).
      tensorboard: write event files under ``workdir/tb``.
    """

    def __init__(self, workdir: str | None, *, stdout: bool = True, tensorboard: bool = True,
                 stream: TextIO | None = None):
        self.stdout, self.stream = stdout, stream
        self._jsonl = self._tb = None
        if workdir is not None:
            os.makedirs(workdir, exist_ok=True)
            self.path = os.path.join(workdir, "metrics.jsonl")
            self._jsonl = open(self.path, "a")
            if tensorboard:
                from tensorboardX import SummaryWriter

                self._tb = SummaryWriter(os.path.join(workdir, "tb"))

    def log(self, step: int, metrics: Mapping[str, Any], prefix: str = "train") -> dict[str, float]:
        """Records scalar ``metrics`` at ``step``; returns the flat record written."""
        record = {f"{prefix}/{k}": _scalar(v) for k, v in metrics.items()}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": int(step), **record}) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            for k, v in record.items():
                if math.isfinite(v):
                    self._tb.add_scalar(k, v, int(step))
        if self.stdout:
            text = " ".join(f"{k}={v:.4g}" for k, v in record.items())
            print(f"[step {int(step)}] {text}", file=self.stream or sys.stdout, flush=True)
        return record

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()


def read_jsonl(path: str) -> list[dict]:
    """Records of a ``metrics.jsonl`` file, in order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
