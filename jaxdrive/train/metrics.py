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
      tensorboard: write event files under ``workdir/tb`` (the event file is opened at the first record, after
        ``resume_at``).
    """

    def __init__(self, workdir: str | None, *, stdout: bool = True, tensorboard: bool = True,
                 stream: TextIO | None = None):
        self.stdout, self.stream = stdout, stream
        self._jsonl = self._tb = self._tb_dir = None
        self._resumed_at = 0  # the step the run continues from (resume_at)
        if workdir is not None:
            os.makedirs(workdir, exist_ok=True)
            self.path = os.path.join(workdir, "metrics.jsonl")
            self._jsonl = open(self.path, "a")
            if tensorboard:
                self._tb_dir = os.path.join(workdir, "tb")

    def log(self, step: int, metrics: Mapping[str, Any], prefix: str = "train") -> dict[str, float]:
        """Records scalar ``metrics`` at ``step``; returns the flat record written."""
        record = {f"{prefix}/{k}": _scalar(v) for k, v in metrics.items()}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": int(step), **record}) + "\n")
            self._jsonl.flush()
        if self._tb_dir is not None:
            tb = self._tensorboard()
            for k, v in record.items():
                if math.isfinite(v):
                    tb.add_scalar(k, v, int(step))
        if self.stdout:
            text = " ".join(f"{k}={v:.4g}" for k, v in record.items())
            print(f"[step {int(step)}] {text}", file=self.stream or sys.stdout, flush=True)
        return record

    def _tensorboard(self):
        """The TensorBoard writer, opened at the first record. Continuing from step s > 0 its event file starts with
        TensorBoard's restart marker (``purge_step`` s + 1: the events of later steps in the earlier files are
        dropped) and is named after s (a file of the same second and step would replace it, not one of the earlier
        run's)."""
        if self._tb is None:
            from tensorboardX import SummaryWriter

            s = self._resumed_at
            self._tb = SummaryWriter(self._tb_dir, purge_step=s + 1 if s else None,
                                     filename_suffix=f".resumed-at-{s}" if s else "")
        return self._tb

    def resume_at(self, step: int) -> None:
        """Drops the records of ``metrics.jsonl`` past ``step``, the step a (resumed) run continues from: they belong
        to steps run after the last checkpoint and are logged again (all of them when ``step`` is 0, where the
        starting evaluations run again too). A last line cut by a kill is dropped as well. TensorBoard's ``tb/``
        follows: from step 0 its earlier event files are removed; past step 0 TensorBoard drops their events of
        the steps after ``step`` (see ``_tensorboard``)."""
        self._resume_tensorboard(step)
        if self._jsonl is None:
            return
        from jaxdrive import atomic

        self._jsonl.close()
        with open(self.path) as f:
            lines = [ln for ln in f if ln.strip()]
        keep = []
        for ln in lines:
            try:
                record = json.loads(ln)
            except json.JSONDecodeError:  # the half-written last line of a killed run
                continue
            if 0 < step and record.get("step", 0) <= step:
                keep.append(ln if ln.endswith("\n") else ln + "\n")
        if len(keep) != len(lines):
            atomic.write_text(self.path, "".join(keep))
        self._jsonl = open(self.path, "a")

    def _resume_tensorboard(self, step: int) -> None:
        """``tb/`` for a run continuing from ``step`` (see ``resume_at``); the next record opens a new event file."""
        if self._tb_dir is None:
            return
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        self._resumed_at = step
        if step == 0 and os.path.isdir(self._tb_dir):
            for name in os.listdir(self._tb_dir):
                if name.startswith("events.out.tfevents."):
                    os.remove(os.path.join(self._tb_dir, name))

    def flush(self) -> None:
        """Writes out what the TensorBoard writer holds (``metrics.jsonl`` is flushed at every record): a process
        interrupted after it loses no record (``jaxdrive.interrupts`` ends such a process without shutdown)."""
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()


def read_jsonl(path: str) -> list[dict]:
    """Records of a ``metrics.jsonl`` file, in order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
