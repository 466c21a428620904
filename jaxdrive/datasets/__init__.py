"""Driving datasets as TFDS builders (array_record, built and read without TensorFlow) and grain loaders.

``jaxdrive data build KIND SRC_DIR --out DIR`` builds one from a local directory (layouts: docs/datasets.md);
``DecodedSource(DIR, split)`` reads a split back by index as plain records; ``grain_loader`` streams it sharded by
process, shuffled from a seed, with an iterator state the training checkpoint saves (``Checkpointer(data_iterator=)``).
"""
from __future__ import annotations

import importlib

from jaxdrive.errors import UserInputError

#: kind -> "module:class" of its builder (imported on use).
BUILDERS = {
    "drivejudge": "jaxdrive.datasets.drivejudge:DriveJudgeRecords",
    "drivecritic": "jaxdrive.datasets.drivejudge:DriveCriticPairs",
    "drivelmm_o1": "jaxdrive.datasets.drivelmm:DriveLMMo1",
    "openread_cot": "jaxdrive.datasets.cot:OpenReadCot",
    "omnidrive": "jaxdrive.datasets.cot:OmniDrive",
    "lingoqa": "jaxdrive.datasets.cot:LingoQA",
}


def get_builder(kind: str):
    """A builder instance of ``kind`` (one of ``BUILDERS``)."""
    if kind not in BUILDERS:
        raise UserInputError(f"dataset kind {kind!r}: expected one of {', '.join(sorted(BUILDERS))}")
    module, _, cls = BUILDERS[kind].partition(":")
    return getattr(importlib.import_module(module), cls)()
