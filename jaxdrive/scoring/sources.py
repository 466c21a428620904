"""Scene sources for ``jaxdrive score``: deterministic, indexable streams of ``HostScene``s.

Every source is a sequence of *items* numbered 0..n-1 so that a resumed run can skip whole shards without reading or
generating the scenes they hold. An item is either a scene or an error (a bad file) that is reported and skipped.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

from jaxdrive.scene import HostScene


@dataclasses.dataclass
class SourceError:
    """A scene that could not be read; ``name`` identifies it (a file path), ``message`` says why."""

    name: str
    message: str


class SceneSource:
    """An indexable stream of scenes. Subclasses define ``__len__``, ``load(i)`` and ``describe()``."""

    def __len__(self) -> int:
        raise NotImplementedError

    def load(self, i: int) -> HostScene | SourceError:
        raise NotImplementedError

    def describe(self) -> dict:
        """A JSON-able identity of the source, stored in the run manifest so a resume with other inputs is refused."""
        raise NotImplementedError

    def iter_range(self, start: int, stop: int) -> Iterator[HostScene | SourceError]:
        for i in range(start, min(stop, len(self))):
            yield self.load(i)


class SyntheticSource(SceneSource):
    """``count`` synthetic scenes; scene i is ``generate_scene(seed + i)`` (the scene ``jaxdrive scenes preview
    --seed`` shows), so any slice is reproducible alone."""

    def __init__(self, count: int, seed: int = 0, num_proposals: int = 16):
        if count < 1:
            raise ValueError(f"--count: expected a positive number of scenes, got {count}")
        if not 1 <= num_proposals <= 256:
            raise ValueError(f"--num-proposals: expected 1..256 proposals per scene, got {num_proposals}")
        self.count, self.seed, self.num_proposals = count, seed, num_proposals

    def __len__(self) -> int:
        return self.count

    def load(self, i: int) -> HostScene:
        from jaxdrive.data.synthetic import generate_scene

        return generate_scene(self.seed + i, num_proposals=self.num_proposals, validate=False)

    def describe(self) -> dict:
        from jaxdrive.data.synthetic import GENERATOR_VERSION

        return {"kind": "synthetic", "count": self.count, "seed": self.seed, "num_proposals": self.num_proposals,
                "generator_version": GENERATOR_VERSION}


class SceneDirSource(SceneSource):
    """Every ``*.json`` scene file of a directory, in name order. A malformed file becomes a ``SourceError``."""

    def __init__(self, directory: str | Path):
        from jaxdrive.data.scene_json import scene_files

        self.directory = Path(directory)
        self.files = scene_files(self.directory)
        if not self.files:
            raise ValueError(f"--scenes {self.directory}: no *.json scene files found")

    def __len__(self) -> int:
        return len(self.files)

    def load(self, i: int) -> HostScene | SourceError:
        from jaxdrive.data.scene_json import SceneFileError, read_scene

        try:
            scene = read_scene(self.files[i])
        except SceneFileError as e:
            return SourceError(name=str(self.files[i]), message=str(e))
        if scene.num_proposals == 0:
            return SourceError(name=str(self.files[i]), message="no proposals in the file (give them with --proposals)")
        return scene

    def describe(self) -> dict:
        return {"kind": "scene_dir", "directory": str(self.directory.resolve()), "files": [f.name for f in self.files]}
