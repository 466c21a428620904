"""Proposals from a file for scene directories: ``jaxdrive score --scenes DIR --proposals P.npz``.

``P.npz`` holds one float array per scene id, shape [K, 41, 11]: proposal states in NAVSIM's ``StateIndex`` layout
(rear axle), in the scene's global frame. Row k is scored as proposal k (``proposal`` = row, name ``"p<k>"``); they
replace whatever proposals the scene file holds (scene files without proposals are the usual input, e.g. converted
NAVSIM metric caches), and the scene's ``previous_plan``s are dropped (EC is then NaN and leaves the weighted mean).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.npz_arrays import read_npz_arrays
from jaxdrive.scene import NUM_STEPS, STATE_DIM, HostScene, StateIndex
from jaxdrive.scene.host import HEADING_SLACK, start_offset_problem
from jaxdrive.scoring.sources import SceneDirSource, SourceError, note_offset_start


def file_digest(path: Path) -> str:
    """sha256 of a file (streamed), for run identities."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_proposal_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Read and check ``P.npz``: scene id -> float64 [K, 41, 11] (K >= 1, finite, headings in (-pi, pi] as in scene
    files). ValueError names the key."""
    path = Path(path)
    arrays = read_npz_arrays(path, "--proposals", f"one [K, {NUM_STEPS}, {STATE_DIM}] array per scene id "
                                                  "(np.savez(P, **{scene_id: states}))")
    if not arrays:
        raise UserInputError(f"--proposals {path}: holds no arrays (expected one [K, {NUM_STEPS}, {STATE_DIM}] per scene id)")
    out = {}
    for key, a in arrays.items():
        if a.ndim != 3 or a.shape[1:] != (NUM_STEPS, STATE_DIM) or a.shape[0] < 1:
            raise UserInputError(f"--proposals {path}: array {key!r}: expected shape [K >= 1, {NUM_STEPS}, {STATE_DIM}], "
                             f"got {list(a.shape)}")
        if not np.issubdtype(a.dtype, np.floating):
            raise UserInputError(f"--proposals {path}: array {key!r}: expected floats, got dtype {a.dtype}")
        if not np.all(np.isfinite(a)):
            bad = tuple(np.argwhere(~np.isfinite(a))[0].tolist())
            raise UserInputError(f"--proposals {path}: array {key!r}: expected finite values, got {a[bad]} at {bad}")
        heading = np.abs(a[..., StateIndex.HEADING])
        if np.any(heading > math.pi + HEADING_SLACK):  # the bound the scene files' proposals are held to
            bad = tuple(np.argwhere(heading > math.pi + HEADING_SLACK)[0].tolist())
            raise UserInputError(f"--proposals {path}: array {key!r}: expected headings in radians in (-pi, pi], got "
                             f"{a[bad + (StateIndex.HEADING,)]:.4f} at proposal {bad[0]}, step {bad[1]} (wrap them, "
                             "e.g. np.arctan2(np.sin(h), np.cos(h)))")
        out[key] = a.astype(np.float64)
    return out


def with_proposals(scene: HostScene, states: np.ndarray, names: list[str] | None = None) -> HostScene:
    """``scene`` with its proposals replaced by ``states`` [K, 41, 11] (no previous plans)."""
    import dataclasses

    k = states.shape[0]
    return dataclasses.replace(scene, proposal_states=states, proposal_names=names or [f"p{i}" for i in range(k)],
                               proposal_families=[""] * k, previous_states=None, previous_kinds=None)


class SceneDirProposalSource(SceneDirSource):
    """The scene files of ``SceneDirSource`` scored with the proposals of ``P.npz`` (key = scene id).

    A scene whose id has no array, or a file that cannot be read, is a ``SourceError`` (reported, the run goes on).
    """

    def __init__(self, directory: str | Path, proposals: str | Path, allow_offset_start: bool = False):
        super().__init__(directory, allow_offset_start=allow_offset_start)
        self.path = Path(proposals)
        self.proposals = load_proposal_npz(self.path)
        self.digest = file_digest(self.path)

    def load(self, i: int) -> HostScene | SourceError:
        scene = self.read(i)
        if isinstance(scene, SourceError):
            return scene
        if scene.id not in self.proposals:
            return SourceError(name=str(self.files[i]),
                               message=f"--proposals {self.path}: no array for scene id {scene.id!r}")
        scene = with_proposals(scene, self.proposals[scene.id])
        if self.allow_offset_start:
            note_offset_start(scene, f"--proposals {self.path}")
        else:
            problem = start_offset_problem(scene)
            if problem:
                return SourceError(name=str(self.files[i]), message=f"--proposals {self.path}: array {scene.id!r}: "
                                   f"{problem}; score it anyway with --allow-offset-start")
        return scene

    def scene_ids(self) -> list[str | None]:
        """The files' ids; None for a scene without an array (an error of the run, as ``load`` makes it)."""
        return [sid if sid in self.proposals else None for sid in super().scene_ids()]

    def proposal_counts(self, ids: list[str | None]) -> list[int | None]:
        """K of each scene's array (the rows of ``P.npz`` replace the file's proposals); None for a scene without
        one."""
        return [len(self.proposals[sid]) if sid in self.proposals else None for sid in ids]

    def describe(self) -> dict:
        return {**super().describe(), "kind": "scene_dir+proposals", "proposals": str(self.path.resolve()),
                "proposals_sha256": self.digest}
