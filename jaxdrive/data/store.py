"""Binary scene store: validated, ego-centred ``HostScene``s as a TFDS dataset in array_record format.

``write_store(scenes, STORE)`` writes one example per scene (``tfds.features`` serialisation, TensorFlow-free) into
array_record shards and the TFDS metadata (``dataset_info.json``, ``features.json``) into ``STORE`` itself, plus
``jaxdrive_store.json`` (scene count, the largest sizes of every padded axis, a content hash). ``SceneStore(STORE)``
reads it back by index with ``tfds.builder_from_directory(STORE).as_data_source()`` (random access, no TensorFlow).

An example holds the scene re-centred on its ego rear axle at t = 0 (float64 subtraction, so the padded float32
batches, and therefore every score, are identical to those of the global-frame scene; tested on the fixtures) and
``origin``, that point in the global frame. Numeric arrays are float64 tensors; ids, names, kinds and the other small
fields are one JSON text (``meta``). Polygons are concatenated with their vertex counts in ``meta``.

``STORE/padded/`` holds the same scenes once more, already padded (``jaxdrive.scene.pad_scene`` at the store's
``pad_spec()``, from the scenes as read back from the store): one ``.npy`` file per leaf of the padded ``Scene`` and
``Proposals`` with one row per scene, and ``index.json`` (ids, proposal names and counts, the ``PadSpec``). ``jaxdrive
score`` reads a batch from it as a slice of memory-mapped arrays instead of decoding and padding every scene (which
cost the host about as much CPU as the scoring step itself at K = 16). ``PaddedStore.open`` refuses (returns None) a
copy whose leaves differ from what ``pad_scene`` makes now for the store's first scene, so a stale copy is never used.
``needs.npy`` beside the leaves holds each scene's broad-phase needs (``broadphase.device.scene_needs``, with the
fingerprint of the code that measured them in ``index.json``): a run sizes its capacities from all its batches
without scanning any; with another fingerprint they are ignored (the run scans as for other sources).

Checksums (``zlib.crc32``): ``records.crc32.npy`` holds one per serialised record (``SceneStore.record`` checks it),
``padded/crc32.npy`` one per scene and leaf of the padded copy (``PaddedStore.checked_batch`` checks the rows it
copies). A mismatch or an unreadable record is a ``StoreDamage`` naming the file and the scenes it holds; the run
names those scenes in errors.jsonl and scores the rest. Stores written before hold none: read unverified (a note).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.scene import (NUM_HISTORY, NUM_STEPS, STATE_DIM, Agent, AgentType, Area, AreaKind, HostScene, Lane,
                            LaneKind, PadSpec, validate_host_scene)

# jaxdrive.broadphase.device is imported where it is used: it creates JAX arrays on import, and the CLI imports this
# module before a multi-process job calls jax.distributed.initialize (which must precede any use of the backend).

STORE_NAME = "jaxdrive_scenes"
STORE_VERSION = "1.0.0"
STORE_META = "jaxdrive_store.json"
SCENES_PER_SHARD = 4096
RECORD_CRC = "records.crc32.npy"  # zlib.crc32 of each serialised record, in stored order (uint32 [N])
CHECKSUM_NOTE = ("written without checksums (by a jaxdrive before they were kept): its {what} read unverified; "
                 "{fix} adds them")


class StoreDamage(Exception):
    """A store's bytes differ from those written (a checksum mismatch) or cannot be read (a truncated file); the
    message names the file and the scenes it holds."""


def is_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a scene store written by ``write_store``."""
    return (Path(path) / STORE_META).is_file()


def _features():
    import tensorflow_datasets as tfds

    f64 = np.float64
    t = lambda shape: tfds.features.Tensor(shape=shape, dtype=f64, encoding=tfds.features.Encoding.BYTES)  # exact
    return tfds.features.FeaturesDict({
        "meta": tfds.features.Text(),
        "origin": t((2,)),
        "history_states": t((NUM_HISTORY, STATE_DIM)),
        "proposal_states": t((None, NUM_STEPS, STATE_DIM)),
        "previous_states": t((None, NUM_STEPS, STATE_DIM)),
        "human_states": t((None, NUM_STEPS, STATE_DIM)),
        "centerline": t((None, 3)),
        "area_vertices": t((None, 2)),
        "lane_vertices": t((None, 2)),
        "agent_tracks": t((None, NUM_STEPS, 5)),
        "agent_sizes": t((None, 3)),
    })


def _local(x: np.ndarray, origin: np.ndarray) -> np.ndarray:
    out = np.array(x, np.float64, copy=True)
    out[..., :2] -= origin
    return out


def _local_extra(extra: dict, origin: np.ndarray) -> dict:
    """``extra`` with the PDM-Closed reference's ``poses`` and ``states`` (global, x and y first) re-centred like the
    scene, so a stored scene and its reference share one frame."""
    ref = extra.get("reference")
    if not isinstance(ref, dict):
        return extra
    moved = {k: np.round(_local(np.asarray(ref[k], np.float64), origin), 6).tolist()
             for k in ("poses", "states") if k in ref}
    return {**extra, "reference": {**ref, **moved}}


def scene_example(scene: HostScene) -> dict:
    """The store example of one (validated) scene: arrays ego-centred, small fields as JSON."""
    o = scene.origin
    poly = lambda items: (np.concatenate([_local(i.polygon, o) for i in items]) if items else np.zeros((0, 2)))
    meta = {
        "id": scene.id, "origin": o.tolist(),
        "areas": [[a.id, int(a.kind), len(a.polygon)] for a in scene.areas],
        "lanes": [[l.id, int(l.kind), bool(l.on_route), l.parent_id, len(l.polygon)] for l in scene.lanes],
        "traffic_lights": scene.traffic_lights,
        "agents": [[a.id, int(a.type), a.role] for a in scene.agents],
        "proposal_names": list(scene.proposal_names), "proposal_families": list(scene.proposal_families),
        "previous_kinds": scene.previous_kinds, "has_previous": scene.previous_states is not None,
        "generator": scene.generator, "expected": scene.expected, "extra": _local_extra(scene.extra, o),
    }
    return {
        "meta": json.dumps(meta, sort_keys=True),
        "origin": o,
        "history_states": _local(scene.history_states, o),
        "proposal_states": _local(scene.proposal_states, o),
        "previous_states": (_local(scene.previous_states, o) if scene.previous_states is not None
                            else np.zeros((0, NUM_STEPS, STATE_DIM))),
        "human_states": (_local(scene.human_states, o)[None] if scene.human_states is not None
                         else np.zeros((0, NUM_STEPS, STATE_DIM))),
        "centerline": _local(scene.centerline, o),
        "area_vertices": poly(scene.areas),
        "lane_vertices": poly(scene.lanes),
        "agent_tracks": (np.stack([_local(a.track, o) for a in scene.agents]) if scene.agents
                         else np.zeros((0, NUM_STEPS, 5))),
        "agent_sizes": (np.array([[a.length, a.width, a.height] for a in scene.agents], np.float64)
                        if scene.agents else np.zeros((0, 3))),
    }


def scene_from_example(ex: dict) -> HostScene:
    """The ego-centred ``HostScene`` of a store example (``origin`` is kept in ``generator['store_origin']``)."""
    meta = ex["meta"]
    meta = json.loads(meta.decode() if isinstance(meta, bytes) else meta)
    arr = lambda key: np.asarray(ex[key], np.float64)

    def split(vertices: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
        return np.split(vertices, np.cumsum(sizes)[:-1]) if sizes else []

    av = split(arr("area_vertices"), [a[2] for a in meta["areas"]])
    lv = split(arr("lane_vertices"), [l[4] for l in meta["lanes"]])
    tracks, sizes = arr("agent_tracks"), arr("agent_sizes")
    human = arr("human_states")
    return HostScene(
        id=meta["id"], history_states=arr("history_states"),
        areas=[Area(id=i, kind=AreaKind(kind), polygon=p) for (i, kind, _), p in zip(meta["areas"], av)],
        lanes=[Lane(id=i, kind=LaneKind(kind), on_route=r, parent_id=parent, polygon=p)
               for (i, kind, r, parent, _), p in zip(meta["lanes"], lv)],
        centerline=arr("centerline"), traffic_lights=dict(meta["traffic_lights"]),
        agents=[Agent(id=i, type=AgentType(t), length=float(s[0]), width=float(s[1]), height=float(s[2]),
                      track=tr, role=role) for (i, t, role), s, tr in zip(meta["agents"], sizes, tracks)],
        proposal_states=arr("proposal_states"), proposal_names=meta["proposal_names"],
        proposal_families=meta["proposal_families"],
        previous_states=arr("previous_states") if meta["has_previous"] else None,
        previous_kinds=meta["previous_kinds"], human_states=human[0] if len(human) else None,
        generator={**meta["generator"], "store_origin": meta["origin"]}, expected=meta["expected"],
        extra=meta["extra"])


def write_store(scenes: Iterable[HostScene], out: str | os.PathLike, *, progress: bool = False,
                padded: bool = True, label: Callable[[int], str] | None = None) -> dict:
    """Validate and write ``scenes`` as a store at ``out`` (created; must not hold a store, nor scene JSON files, which
    a store's folder would hide: ``scene_json.NOT_SCENE_FOLDER_MARKS``). Returns its metadata.
    ``padded``: also write the padded copy (``STORE/padded``, see the module docstring). A scene id given twice is
    refused (a store is read by scene id: ``SceneStoreSource.unique_ids``), naming both inputs by ``label(i)``
    (default: their positions). When it fails (a bad scene, an unreadable input, Ctrl-C) it removes what it wrote
    (``out`` itself if it created it): no half-written store is left."""
    from jaxdrive.data.scene_json import scene_files
    from jaxdrive.output_paths import output_dir

    out = output_dir("--out", out)
    if is_store(out):
        raise UserInputError(f"--out {out}: already holds a scene store; choose another directory")
    held = scene_files(out) if out.is_dir() else []
    if held:  # the folder of a store is skipped when scenes are listed (scene_json.NOT_SCENE_FOLDER_MARKS)
        raise UserInputError(f"--out {out}: holds scene JSON files (e.g. {held[0]}), which a store written there would "
                         f"hide from every command that lists a folder's scenes; choose another directory")
    before = set(out.iterdir()) if out.is_dir() else None
    try:
        return _write_store(scenes, out, progress, padded, label)
    except BaseException:
        if before is None:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for path in set(out.iterdir()) - before:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        raise


def _write_store(scenes: Iterable[HostScene], out: Path, progress: bool, padded: bool,
                 label: Callable[[int], str] | None) -> dict:
    from jaxdrive.data.tfds_writer import EmptySplitError, write_tfds

    sizes = None
    with_proposals = 0

    label = label or (lambda i: f"scene #{i} of the input")
    first: dict[str, int] = {}

    def examples():
        nonlocal sizes, with_proposals
        for i, scene in enumerate(scenes):
            validate_host_scene(scene)
            with_proposals += scene.num_proposals > 0
            if scene.id in first:
                raise UserInputError(f"scene store: scene id {scene.id!r} is in two inputs: {label(first[scene.id])} and "
                                 f"{label(i)}")
            first[scene.id] = i
            fit = PadSpec.fit([scene], multiple=1)
            sizes = fit if sizes is None else PadSpec(**{k: max(getattr(sizes, k), getattr(fit, k))
                                                         for k in fit.__dataclass_fields__})
            yield scene_example(scene)

    crc: list[int] = []
    try:
        written = write_tfds(out, name=STORE_NAME, version=STORE_VERSION, features=_features(),
                             splits={"train": examples()}, description="jaxdrive ego-centred EPDMS scenes",
                             module_name=__name__, records_per_shard=SCENES_PER_SHARD, progress=progress,
                             record_crc32=crc)["train"]
    except EmptySplitError:
        raise UserInputError("scenes convert: no scene to write") from None
    with atomic.replacing(out / RECORD_CRC) as tmp, open(tmp, "wb") as f:
        np.save(f, np.asarray(crc, np.uint32))
    meta = {"format": "jaxdrive-scene-store/1", "scenes": written["examples"], "sha256": written["sha256"],
            "max_sizes": {k: getattr(sizes, k) for k in sizes.__dataclass_fields__}, "with_proposals": with_proposals,
            "checksums": {"algorithm": "crc32", "records": RECORD_CRC}}
    atomic.write_text(out / STORE_META, json.dumps(meta, indent=1))
    if padded:
        write_padded(out)
    return meta


PADDED_DIR = "padded"
PADDED_INDEX = "index.json"
# 2: ``has_human`` is ``HostScene.filters_human`` (the human filter on ORIGINAL scenes only); a version-1 copy may hold
# True for a second-stage scene, and ``PaddedStore.open`` compares only scene 0 with a fresh padding: it is stale.
PADDED_VERSION = 2
NEEDS_FILE = "needs.npy"  # broad-phase needs of each scene (scene_needs): a run's capacities without a prescan
PADDED_CRC = "crc32.npy"  # zlib.crc32 of each scene's row of each leaf (uint32 [N, leaves], leaves sorted by name)


def _row_crc(row: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(row).view(np.uint8))


def _flatten(tree: dict, prefix: str) -> dict[str, np.ndarray]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = np.asarray(v)
    return out


def _unflatten(flat: dict[str, np.ndarray]) -> dict:
    tree: dict = {}
    for key, v in flat.items():
        *path, leaf = key.split(".")
        node = tree
        for p in path:
            node = node.setdefault(p, {})
        node[leaf] = v
    return tree


def _padded_leaves(scene: HostScene, pad: PadSpec) -> dict[str, np.ndarray]:
    from jaxdrive.scene.device import pad_scene

    scene_leaves, prop_leaves = pad_scene(scene, pad)
    return {**_flatten(scene_leaves, "scene."), **_flatten(prop_leaves, "proposals.")}


def write_padded(path: str | os.PathLike) -> bool:
    """Write ``STORE/padded``: every scene of the store padded at its ``pad_spec()`` (replaces an existing copy).
    Returns False, writing none, when a scene has no proposal (e.g. converted NAVSIM caches, scored with proposals
    given from elsewhere: those runs decode the scenes)."""
    import shutil

    store = SceneStore(path)
    pad, n = store.pad_spec(), len(store)
    final, tmp = store.path / PADDED_DIR, store.path / (PADDED_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    files: dict[str, np.ndarray] = {}
    ids, names, counts, crc = [], [], [], []
    for i in range(n):
        try:
            scene = store[i]
        except StoreDamage as e:  # a padded copy is written from intact records only
            del files
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserInputError(f"{store.path}: {e}") from None
        if scene.num_proposals < 1:
            del files
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(final, ignore_errors=True)
            return False
        leaves = _padded_leaves(scene, pad)
        if not files:
            files = {k: np.lib.format.open_memmap(tmp / f"{k}.npy", mode="w+", dtype=v.dtype, shape=(n,) + v.shape)
                     for k, v in leaves.items()}
        for k, v in leaves.items():
            files[k][i] = v
        crc.append([_row_crc(files[k][i]) for k in sorted(files)])
        ids.append(scene.id)
        names.append(list(scene.proposal_names))
        counts.append(scene.num_proposals)
    for f in files.values():
        f.flush()
    from jaxdrive.broadphase.device import needs_fingerprint

    np.save(tmp / NEEDS_FILE, _scene_needs(files, n))
    np.save(tmp / PADDED_CRC, np.asarray(crc, np.uint32))
    leaves = sorted(files)
    del files
    index = {"version": PADDED_VERSION, "scenes": n, "sha256": store.meta["sha256"], "pad": dataclasses.asdict(pad),
             "ids": ids, "names": names, "counts": counts, "needs": needs_fingerprint(),
             "checksums": {"algorithm": "crc32", "file": PADDED_CRC, "leaves": leaves}}
    (tmp / PADDED_INDEX).write_text(json.dumps(index))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return True


def refresh_store(path: str | os.PathLike, flag: str = "--scenes") -> str:
    """Bring a store's padded copy and per-scene needs up to date with this jaxdrive, in place: rewrite the copy when
    it is missing or stale (``write_padded``), else only ``needs.npy`` when its fingerprint is another jaxdrive's (the
    broad phase changed since it was written). Each file is replaced atomically. Returns what was done, in words.
    ``flag``: how errors name ``path`` (the argument as the user gave it, e.g. ``STORE``)."""
    from jaxdrive.broadphase.device import needs_fingerprint

    store = SceneStore(path, flag)
    copy = PaddedStore.open(store)
    if copy is not None and copy.crc is None:  # written before checksums were kept: rewritten with them
        if not write_padded(store.path):
            return f"{store.path}: its scenes have no proposals (scored with --proposals): no padded copy to write"
        return (f"{store.path}: rewrote the padded copy (with checksums) and the broad-phase needs of its "
                f"{len(store)} scenes")
    if copy is None:
        if not write_padded(store.path):
            return f"{store.path}: its scenes have no proposals (scored with --proposals): no padded copy to write"
        return f"{store.path}: wrote the padded copy and the broad-phase needs of its {len(store)} scenes"
    if copy.needs is not None:
        return f"{store.path}: up to date ({len(store)} scenes)"
    rows = _scene_needs(copy.leaves, len(store))
    with atomic.replacing(copy.directory / NEEDS_FILE) as tmp, open(tmp, "wb") as f:
        np.save(f, rows)
    atomic.write_text(copy.directory / PADDED_INDEX, json.dumps({**copy.index, "needs": needs_fingerprint()}))
    return f"{store.path}: rewrote the broad-phase needs of its {len(store)} scenes"


def _scene_needs(leaves: dict[str, np.ndarray], n: int, chunk: int = 64) -> np.ndarray:
    """``broadphase.device.scene_needs`` of every scene of a padded copy, ``chunk`` scenes at a time (one shape)."""
    from jaxdrive.broadphase.device import NEEDS_FIELDS, scene_needs
    from jaxdrive.scene import Proposals
    from jaxdrive.scene.device import _build

    out = np.zeros((n, len(NEEDS_FIELDS)), np.int64)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        rows = np.minimum(np.arange(start, start + chunk), stop - 1)  # the last chunk repeats its last scene
        tree = _unflatten({k: v[rows] for k, v in leaves.items()})
        out[start:stop] = scene_needs(_build(tree["scene"]), Proposals(**tree["proposals"]))[:stop - start]
    return out


class PaddedStore:
    """Batches of a store's padded copy: ``batch(start, stop, rows)`` -> (Scene leaves, Proposals leaves) of ``rows``
    scenes (rows beyond ``stop - start`` repeat scene ``start``: filler), numpy arrays copied out of the memory maps."""

    def __init__(self, directory: Path, index: dict, leaves: dict[str, np.ndarray]):
        self.directory, self.index, self.leaves = directory, index, leaves
        self.pad = PadSpec(**index["pad"])
        self.ids: list[str] = index["ids"]
        self.names: list[list[str]] = index["names"]
        self.counts: list[int] = index["counts"]
        from jaxdrive.broadphase.device import NEEDS_FIELDS, needs_fingerprint

        self.needs: np.ndarray | None = None  # scene_needs rows [N, F] when current (needs_fingerprint)
        if index.get("needs") == needs_fingerprint():
            try:
                rows = np.load(directory / NEEDS_FILE)
            except (OSError, ValueError):
                rows = None
            if rows is not None and rows.shape == (index["scenes"], len(NEEDS_FIELDS)):
                self.needs = rows
        self.crc: np.ndarray | None = None  # [N, leaves] (index["checksums"]); None: a copy written before them
        self.crc_leaves: list[str] = []

    def _load_crc(self) -> bool:
        """Reads the copy's checksums when its index names them; False when they are named but unusable."""
        sums = self.index.get("checksums")
        if sums is None:
            return True
        try:
            crc = np.load(self.directory / sums["file"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        leaves = sums.get("leaves")
        if leaves != sorted(self.leaves) or crc.shape != (self.index["scenes"], len(leaves)):
            return False
        self.crc, self.crc_leaves = crc, leaves
        return True

    @classmethod
    def open(cls, store: "SceneStore") -> "PaddedStore | None":
        """The store's padded copy, or None when it has none or one that does not match ``pad_scene`` (stale)."""
        directory = store.path / PADDED_DIR
        try:
            index = json.loads((directory / PADDED_INDEX).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if (index.get("version") != PADDED_VERSION or index.get("sha256") != store.meta["sha256"]
                or index.get("scenes") != len(store) or index.get("pad") != dataclasses.asdict(store.pad_spec())):
            return None
        if len(store) == 0:
            return None
        try:
            want = _padded_leaves(store[0], store.pad_spec())
        except (ValueError, StoreDamage):  # a scene without proposals (no copy can hold it), or a damaged record
            return None  # (the copy cannot be checked: scenes are decoded, a damaged one named in errors.jsonl)
        leaves = {}
        for key, v in want.items():
            try:
                mm = np.load(directory / f"{key}.npy", mmap_mode="r")
            except (OSError, ValueError):
                return None
            if mm.dtype != v.dtype or mm.shape != (len(store),) + v.shape or not np.array_equal(mm[0], v,
                                                                                              equal_nan=v.dtype.kind == "f"):
                return None
            leaves[key] = mm
        if set(p.name for p in directory.glob("*.npy")) - {NEEDS_FILE, PADDED_CRC} != {f"{k}.npy" for k in want}:
            return None
        copy = cls(directory, index, leaves)
        return copy if copy._load_crc() else None

    def batch(self, start: int, stop: int, rows: int) -> tuple[dict, dict]:
        """(Scene leaves, Proposals leaves) of scenes ``start:stop`` (unchecked: ``checked_batch`` verifies)."""
        n = stop - start
        flat = {}
        for key, mm in self.leaves.items():
            out = np.empty((rows,) + mm.shape[1:], mm.dtype)
            out[:n] = mm[start:stop]
            out[n:] = mm[start]
            flat[key] = out
        tree = _unflatten(flat)
        return tree["scene"], tree["proposals"]

    def checked_batch(self, start: int, stop: int, rows: int) -> tuple[dict | None, dict | None, list[int],
                                                                          dict[int, str]]:
        """``batch`` with every row read checked against its checksum: (Scene leaves, Proposals leaves, the scenes
        whose rows are in it, in order, {scene: why it is left out}). A scene whose row of any leaf differs from the
        one written is left out (the good rows first, fillers repeat the first good one); (None, None, [], bad) when
        none is good. A copy without checksums (written before them) is not checked."""
        n = stop - start
        flat = {}
        bad: dict[int, str] = {}
        for key, mm in self.leaves.items():
            out = np.empty((rows,) + mm.shape[1:], mm.dtype)
            out[:n] = mm[start:stop]
            flat[key] = out
        if self.crc is not None:
            want = self.crc[start:stop].tolist()
            for j, key in enumerate(self.crc_leaves):
                out = flat[key]
                raw, size = memoryview(out).cast("B"), out[0].nbytes  # out is C-contiguous: rows of `size` bytes
                for r in range(n):
                    if zlib.crc32(raw[r * size:(r + 1) * size]) != want[r][j] and start + r not in bad:
                        bad[start + r] = (f"padded copy {self.directory / (key + '.npy')} (holds the padded rows of "
                                          f"scenes 0-{len(self.ids) - 1}): the row of scene {start + r} "
                                          f"({self.ids[start + r]!r}) fails its checksum (crc32): its bytes differ "
                                          f"from those written; `jaxdrive scenes refresh {self.directory.parent}` "
                                          f"rewrites the copy from the records")
        good = [i for i in range(start, stop) if i not in bad]
        if not good:
            return None, None, [], bad
        keep = np.array([i - start for i in good])
        for key, out in flat.items():
            if bad:
                out[:len(good)] = out[keep]
            out[len(good):] = out[0]
        tree = _unflatten(flat)
        return tree["scene"], tree["proposals"], good, bad


class SceneStore:
    """Random access to a store's scenes (``len``, ``store[i]`` -> ego-centred ``HostScene``). ``flag``: how errors
    name ``path`` (the flag or argument the user gave it as)."""

    def __init__(self, path: str | os.PathLike, flag: str = "--scenes"):
        import tensorflow_datasets as tfds

        self.path = Path(path)
        if not is_store(self.path):
            raise UserInputError(f"{flag} {self.path}: not a jaxdrive scene store (no {STORE_META})")
        try:
            self.meta = json.loads((self.path / STORE_META).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:  # e.g. a partial copy
            raise UserInputError(f"{flag} {self.path}: cannot read {self.path / STORE_META} ({e})") from None
        builder = tfds.builder_from_directory(str(self.path))
        shards = [str(p) for p in builder.info.splits["train"].filepaths]
        missing = [p for p in shards if not os.path.isfile(p)]
        if missing:  # a partial copy: a RuntimeError of array_record's from deep inside the first read before
            raise UserInputError(f"{flag} {self.path}: {len(missing)} of its {len(shards)} record files are missing "
                             f"({Path(missing[0]).name}{', ...' if len(missing) > 1 else ''}); copy the whole store "
                             f"again or convert its scenes anew")
        self.source = builder.as_data_source(split="train")
        lengths = list(builder.info.splits["train"].shard_lengths)
        self.shards = [(Path(p), int(a), int(a) + int(n))  # (record file, first scene, end)
                       for p, a, n in zip(shards, np.cumsum([0] + lengths[:-1]), lengths)]
        self.crc: np.ndarray | None = None  # per record; None: a store written before checksums were kept
        if isinstance(self.meta.get("checksums"), dict):
            crc_path = self.path / self.meta["checksums"].get("records", RECORD_CRC)
            try:
                self.crc = np.load(crc_path)
            except (OSError, ValueError) as e:
                raise UserInputError(f"{flag} {self.path}: cannot read its record checksums {crc_path} ({e}); copy "
                                     f"the whole store again or convert its scenes anew") from None
            if self.crc.shape != (len(self.source),):
                raise UserInputError(f"{flag} {self.path}: its record checksums {crc_path} hold {self.crc.shape} "
                                     f"values for {len(self.source)} scenes; copy the whole store again or convert "
                                     f"its scenes anew")

    def __len__(self) -> int:
        return len(self.source)

    def shard_of(self, i: int) -> str:
        """The record file holding scene ``i`` and the scenes it holds, in words."""
        for path, a, b in self.shards:
            if a <= i < b:
                return f"{path} (holds scenes {a}-{b - 1})"
        return f"{self.path} (no record file holds scene {i})"

    def record(self, i: int) -> bytes:
        """The serialised record of scene ``i``, checked against its checksum (``StoreDamage`` if it differs or
        cannot be read)."""
        try:
            record = self.source.data_source[i]
        except Exception as e:  # array_record / Riegeli: a truncated or damaged file
            raise StoreDamage(f"record file {self.shard_of(i)}: scene {i} cannot be read ({type(e).__name__}: "
                              f"{e}); copy the store again or convert its scenes anew") from None
        if self.crc is not None and zlib.crc32(record) != int(self.crc[i]):
            raise StoreDamage(f"record file {self.shard_of(i)}: scene {i} fails its checksum (crc32): its bytes "
                              f"differ from those written; copy the store again or convert its scenes anew")
        return record

    def __getitem__(self, i: int) -> HostScene:
        return scene_from_example(self.source.dataset_info.features.deserialize_example_np(self.record(i)))

    def padded(self) -> "PaddedStore | None":
        """The store's padded copy (``STORE/padded``), or None (an older store, or a stale copy)."""
        if not hasattr(self, "_padded"):
            self._padded = PaddedStore.open(self)
        return self._padded

    def recorded_index(self) -> tuple[list[str], list[int]] | None:
        """(scene ids, proposal counts), in stored order, as the padded copy's ``index.json`` records them when it
        was written from this store's scenes (same content hash and scene count), its arrays current or not: no
        scene is decoded. None without such an index (an older store, or one whose scenes hold no proposals)."""
        try:
            index = json.loads((self.path / PADDED_DIR / PADDED_INDEX).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        ids, counts, n = index.get("ids"), index.get("counts"), len(self)
        if (index.get("sha256") != self.meta["sha256"] or index.get("scenes") != n or not isinstance(ids, list)
                or not isinstance(counts, list) or len(ids) != n or len(counts) != n):
            return None
        return list(ids), list(counts)

    def pad_spec(self, multiple: int = 8) -> PadSpec:
        """The smallest ``PadSpec`` holding every scene of the store (from its metadata: no scene is read)."""
        up = lambda n: max(multiple, -(-n // multiple) * multiple)
        return PadSpec(**{k: up(v) for k, v in self.meta["max_sizes"].items()})


def add_convert_parser(scenes_sub) -> None:
    """``jaxdrive scenes convert JSON_DIR --out STORE``."""
    p = scenes_sub.add_parser("convert", help="write a directory of epdms-scene/1 JSON files as a binary scene store "
                              "(TFDS array_record; `jaxdrive score --scenes STORE` reads it)")
    p.add_argument("json_dir", type=Path, metavar="JSON_DIR", help="directory of *.json scene files")
    p.add_argument("--out", type=Path, required=True, help="store directory to create")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_convert)


def add_refresh_parser(scenes_sub) -> None:
    """``jaxdrive scenes refresh STORE``."""
    p = scenes_sub.add_parser("refresh", help="rewrite a scene store's padded copy and per-scene broad-phase needs "
                              "when they are missing or were written by another jaxdrive (runs over it then size "
                              "their capacities without a prescan)")
    p.add_argument("store", type=Path, metavar="STORE", help="scene store directory")
    p.set_defaults(func=_run_refresh)


def _run_refresh(args) -> int:
    print(refresh_store(args.store, "STORE"))
    return 0


def _run_convert(args) -> int:
    from jaxdrive.data.scene_json import read_scene, scene_files

    src = Path(args.json_dir)
    if not src.is_dir():
        raise UserInputError(f"JSON_DIR {src}: " + ("is a file, not a directory" if src.exists() else "does not exist")
                         + "; expected a directory of *.json scene files")
    files = scene_files(src)
    if not files:
        raise UserInputError(f"JSON_DIR {src}: no *.json scene files found")
    meta = write_store((read_scene(f) for f in files), Path(args.out), progress=not args.no_progress,
                       label=lambda i: str(files[i]))  # a bad file stops the conversion, leaving no store behind
    print(f"wrote {meta['scenes']} scenes to {args.out}")
    return 0
