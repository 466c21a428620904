"""Scene sources for ``jaxdrive score``: deterministic, indexable streams of ``HostScene``s.

Every source is a sequence of *items* numbered 0..n-1 so that a resumed run can skip whole shards without reading or
generating the scenes they hold. An item is either a scene or an error (a bad file) that is reported and skipped.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Iterator

from jaxdrive.errors import UserInputError
from jaxdrive.scene import HostScene


@dataclasses.dataclass
class SourceError:
    """A scene that could not be read; ``name`` identifies it (a file path), ``message`` says why."""

    name: str
    message: str


class SceneSource:
    """An indexable stream of scenes. Subclasses define ``__len__``, ``load(i)`` and ``describe()``."""

    unique_ids = False  # whether no two items can hold one scene id (else a run checks: files can repeat one)

    def __len__(self) -> int:
        raise NotImplementedError

    def load(self, i: int) -> HostScene | SourceError:
        raise NotImplementedError

    def describe(self) -> dict:
        """A JSON-able identity of the source, stored in the run manifest so a resume with other inputs is refused."""
        raise NotImplementedError

    def name(self, i: int) -> str:
        """Where item ``i`` comes from, for messages (a file path where there is one)."""
        return f"item {i}"

    def scene_ids(self) -> list[str | None]:
        """Every item's scene id, for checks made before a run reads its scenes (the ``--gates`` and
        ``--reference-progress`` entries); None for an item the run will report as an error. This default loads
        every item: sources that can, override it with a cheaper read."""
        return [s.id if isinstance(s, HostScene) else None for s in self.iter_range(0, len(self))]

    def proposal_counts(self, ids: list[str | None]) -> list[int | None]:
        """Every item's number of proposals K where it is known without parsing the scene (for the check of
        per-proposal ``--gates`` rows made before a run reads its scenes), else None: the run checks the item when
        it reads it. ``ids`` is ``scene_ids()``'s answer (a source may key its counts by them). This default knows
        none."""
        return [None] * len(ids)

    def input_stats(self) -> list[tuple[str, list[int] | None]] | None:
        """Per item, (its input file, [size in bytes, modification time in ns], or None where it cannot be stat'ed):
        recorded per shard in the run manifest, so a resume scores again a shard whose files changed. None: the
        source's ``describe()`` covers its content (seeded generation, a store's checksum)."""
        return None

    def iter_range(self, start: int, stop: int) -> Iterator[HostScene | SourceError]:
        for i in range(start, min(stop, len(self))):
            yield self.load(i)

    def padded(self, pad):
        """A copy of the scenes already padded at ``pad`` (``jaxdrive.data.store.PaddedStore``: batches are slices of
        it, nothing read or padded), or None: the scenes are read and padded per batch."""
        return None


class SyntheticSource(SceneSource):
    """``count`` synthetic scenes; scene i is ``generate_scene(seed + i)`` (the scene ``jaxdrive scenes preview
    --seed`` shows), so any slice is reproducible alone."""

    unique_ids = True  # syn_<profile>_<seed + i>

    def __init__(self, count: int, seed: int = 0, num_proposals: int = 16):
        if count < 1:
            raise UserInputError(f"--count: expected a positive number of scenes, got {count}")
        if not 1 <= num_proposals <= 256:
            raise UserInputError(f"--num-proposals: expected 1..256 proposals per synthetic scene, got {num_proposals}")
        if seed < 0:
            raise UserInputError(f"--seed: expected a non-negative integer, got {seed}")
        self.count, self.seed, self.num_proposals = count, seed, num_proposals

    def __len__(self) -> int:
        return self.count

    def load(self, i: int) -> HostScene:
        from jaxdrive.data.synthetic import generate_scene

        return generate_scene(self.seed + i, num_proposals=self.num_proposals, validate=False)

    def scene_ids(self) -> list[str]:
        """The ids ``generate_scene`` gives (profile "default"), none generated."""
        from jaxdrive.data.synthetic import scene_id

        return [scene_id(self.seed + i) for i in range(self.count)]

    def proposal_counts(self, ids: list[str | None]) -> list[int]:
        """``num_proposals`` for every scene (``generate_scene`` makes exactly that many)."""
        return [self.num_proposals] * len(ids)

    def describe(self) -> dict:
        from jaxdrive.data.synthetic import GENERATOR_VERSION

        return {"kind": "synthetic", "count": self.count, "seed": self.seed, "num_proposals": self.num_proposals,
                "generator_version": GENERATOR_VERSION}


class SceneDirSource(SceneSource):
    """Every ``*.json`` scene file of a directory and its subfolders, in relative-path order (``index.json`` files
    and the JSON files of scene stores and scoring runs inside it are not scenes: they are listed in ``skipped``). A
    malformed file becomes a ``SourceError``.

    Its files' proposal counts are not known before a run reads them (``proposal_counts``: None): ``"proposals"``
    follows the map and the agents, the bulk of a file, and ``"expected"`` (per proposal) follows it, so no short
    read from either end reaches it; counting them would read every file twice."""

    def __init__(self, directory: str | Path, allow_offset_start: bool = False):
        from jaxdrive.data.scene_json import SceneFileError, not_scene_files, scene_files

        self.directory = Path(directory)
        self.allow_offset_start = allow_offset_start  # proposals away from the ego's current state: scored, noted
        try:
            self.files = scene_files(self.directory)
        except SceneFileError as e:
            raise UserInputError(f"--scenes {e}") from None
        self.skipped = [str(p.relative_to(self.directory)) for p in not_scene_files(self.directory)]
        if not self.files:
            raise UserInputError(f"--scenes {self.directory}: no *.json scene files found (searched recursively)")

    def __len__(self) -> int:
        return len(self.files)

    def read(self, i: int) -> HostScene | SourceError:
        """File ``i`` as a scene (proposals not checked), or the error that names it."""
        from jaxdrive.data.scene_json import SceneFileError, read_scene

        try:
            scene = read_scene(self.files[i], allow_offset_start=self.allow_offset_start)
            if self.allow_offset_start:
                note_offset_start(scene, str(self.files[i]))
            return scene
        except SceneFileError as e:
            return SourceError(name=str(self.files[i]), message=str(e))
        except Exception as e:  # any other per-file failure (a bad value the reader did not anticipate) is named too
            return SourceError(name=str(self.files[i]), message=f"{type(e).__name__}: {e}")

    def name(self, i: int) -> str:
        return str(self.files[i])

    def load(self, i: int) -> HostScene | SourceError:
        scene = self.read(i)
        if isinstance(scene, SourceError):
            return scene
        if scene.num_proposals == 0:
            return SourceError(name=str(self.files[i]), message="no proposals in the file (give them with --proposals)")
        return scene

    def scene_ids(self) -> list[str | None]:
        return [scene_file_id(f) for f in self.files]

    def input_stats(self) -> list[tuple[str, list[int] | None]]:
        return [(str(f.relative_to(self.directory)), _size_and_mtime(f)) for f in self.files]

    def describe(self) -> dict:
        return {"kind": "scene_dir", "directory": str(self.directory.resolve()),
                "files": [str(f.relative_to(self.directory)) for f in self.files],
                **({"allow_offset_start": True} if self.allow_offset_start else {})}


def note_offset_start(scene: HostScene, name: str) -> None:
    """``--allow-offset-start``: says on stderr (from whichever process reads the scene) that ``scene``'s proposals
    do not start at the ego's current state and are scored anyway."""
    import sys

    from jaxdrive.scene.host import start_offset_problem

    problem = start_offset_problem(scene)
    if problem:
        print(f"note: {name}: scene {scene.id!r}: {problem}; scored (--allow-offset-start)", file=sys.stderr)


HEAD_BYTES = 4096  # of a scene file, read for its id (``write_scene`` puts it second, after "format")
_LEADING_ID = re.compile(rb'\s*\{\s*(?:"format"\s*:\s*"[^"\\]*"\s*,\s*)?"id"\s*:\s*("(?:[^"\\]|\\.)*")')


def scene_file_id(path: Path) -> str | None:
    """The scene id of a scene JSON file: from its first ``HEAD_BYTES`` when it starts ``{"format": ..., "id": ...``
    (as ``write_scene`` writes it: no full parse), else from the whole file; None when it cannot
    be read as a scene (the run reports it)."""
    from jaxdrive.data.scene_json import read_scene

    try:
        with open(path, "rb") as f:
            match = _LEADING_ID.match(f.read(HEAD_BYTES))
        if match:
            return json.loads(match.group(1))
        return read_scene(path, validate=False).id
    except Exception:  # unreadable or not a scene: an error of the run, as ``SceneDirSource.read`` makes it
        return None


def _size_and_mtime(path: Path) -> list[int] | None:
    """[size in bytes, modification time in ns] of a file, or None when it cannot be stat'ed (deleted since the scan:
    the run reports it as unreadable)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


class SceneStoreSource(SceneSource):
    """The scenes of a binary scene store (``jaxdrive.data.store``), in stored order (already validated). Pickles by
    path (worker processes reopen the store)."""

    unique_ids = True  # ``jaxdrive scenes convert`` refuses a repeated scene id

    def __init__(self, path: str | Path):
        from jaxdrive.data.store import SceneStore

        self.path = Path(path)
        self.store = SceneStore(self.path)

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def __len__(self) -> int:
        return len(self.store)

    def name(self, i: int) -> str:
        return f"{self.path} (scene {i})"

    def load(self, i: int) -> HostScene | SourceError:
        from jaxdrive.data.store import StoreDamage

        try:
            scene = self.store[i]
        except StoreDamage as e:  # a checksum mismatch or an unreadable record: the file and its scenes named
            return SourceError(name=self.name(i), message=f"corrupt store record: {e}")
        except Exception as e:  # a damaged record file (e.g. a truncated copy): named, the rest still scored
            return SourceError(name=self.name(i), message=f"corrupt store record ({type(e).__name__}: {e}); "
                                                          f"convert the scenes again")
        if scene.num_proposals == 0:  # a store holds them (converted NAVSIM caches) but --proposals takes JSON files
            return SourceError(name=self.name(i), message=f"scene {scene.id!r}: no proposals in the store (score its "
                                                          f"JSON files with --proposals P.npz instead)")
        return scene

    def scene_ids(self) -> list[str | None]:
        """From the index of the store's padded copy (``SceneStore.recorded_index``) when it has one, else by
        decoding every scene (once: ``proposal_counts`` reuses it)."""
        return self._index[0]

    def proposal_counts(self, ids: list[str | None]) -> list[int | None]:
        """From the padded copy's index, else from the scenes ``scene_ids`` decoded (None for a scene the run
        reports: unreadable, or without proposals)."""
        return self._index[1]

    @functools.cached_property
    def _index(self) -> tuple[list[str | None], list[int | None]]:
        """(scene ids, proposal counts) of every scene: the padded copy's index, or every scene decoded (once)."""
        recorded = self.store.recorded_index()
        if recorded is not None:
            return recorded
        pairs = [(s.id, s.num_proposals) if isinstance(s, HostScene) else (None, None)
                 for s in self.iter_range(0, len(self))]  # one scene held at a time
        return [sid for sid, _ in pairs], [k for _, k in pairs]

    def pad_spec(self):
        """A ``PadSpec`` holding every scene (from the store's metadata)."""
        return self.store.pad_spec()

    def padded(self, pad):
        """The store's padded copy (``jaxdrive.data.store.PaddedStore``) when it is padded at ``pad``, else None."""
        copy = self.store.padded()
        return copy if copy is not None and copy.pad == pad else None

    def refresh_note(self, pad) -> str | None:
        """Why a run over this store at ``pad`` would read it the slow way (no current padded copy, or per-scene needs
        measured by another jaxdrive), and the command that fixes it; None when nothing would. A store whose scenes
        without proposals gets no copy (``jaxdrive scenes refresh`` would write none): the note says so instead
        (stores written before ``with_proposals`` was recorded get the refresh advice)."""
        from jaxdrive.data.store import CHECKSUM_NOTE

        unchecked = []
        if self.store.crc is None:
            unchecked.append(CHECKSUM_NOTE.format(what="records are", fix="converting its scenes again"))
        copy = self.padded(pad)
        if copy is not None and copy.crc is None:
            unchecked.append(CHECKSUM_NOTE.format(what="padded copy is", fix=f"`jaxdrive scenes refresh {self.path}`"))
        note = self._slow_note(pad)
        return "; ".join(unchecked + ([note] if note else [])) or None

    def _slow_note(self, pad) -> str | None:
        scored = self.store.meta.get("with_proposals", len(self))
        if scored < len(self):
            return (f"{len(self) - scored} of its {len(self)} scenes hold no proposals: they are reported, not scored "
                    "(score the JSON files they came from with --proposals P.npz), and the store gets no padded copy: "
                    "scenes are decoded as they are read")
        copy = self.padded(pad)
        if copy is not None and copy.needs is not None:
            return None
        what = ("its scenes' broad-phase needs are missing, unreadable or were measured by another jaxdrive: "
                "capacities come from a prescan" if copy
                else "no current padded copy: scenes are decoded as they are read, capacities come from a prescan")
        return f"{what}; `jaxdrive scenes refresh {self.path}` rewrites them"

    def describe(self) -> dict:
        return {"kind": "scene_store", "path": str(self.path.resolve()), "scenes": len(self),
                "sha256": self.store.meta["sha256"]}
