"""The machinery every dataset builder shares: build a local source directory into a TFDS dataset (array_record,
TensorFlow-free, through ``jaxdrive.data.tfds_writer``) and read it back by index.

A builder subclass names its TFDS identity (``name``, ``version``), its ``features()`` (a ``tfds.features.
FeaturesDict``), how to read a source directory into per-split examples (``split_examples``: validated, with errors
naming the file and the field) and how to turn a stored example back into a plain record (``decode``). A built
directory holds the TFDS files plus ``jaxdrive_dataset.json`` (the builder kind, the source, per-split counts), so
``DecodedSource(DIR, split)`` knows how to decode it.

Every file path a source's annotation files name (images, scene files) follows one rule, ``source_path``: relative to
the source directory and without '..'.

A build writes into a temporary sibling folder (``<out>.<host>.<pid>.tmp``) and renames it onto ``out`` once complete,
so an interrupted build never leaves ``out`` half-written or blocks the re-run: the re-run removes the temporary
folders that builds on this host left when their process died (another host's are left alone: on a filesystem shared
between machines its process id means nothing here), and replaces an ``out`` that earlier versions left unfinished
(TFDS files without ``jaxdrive_dataset.json``). A complete dataset, or a folder holding anything else, is never written
over.
"""
from __future__ import annotations

import contextlib
import json
import operator
import os
import re
import shutil
import socket
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.output_paths import output_dir

DATASET_META = "jaxdrive_dataset.json"
#: What an interrupted build of an earlier version left in ``out``: TFDS metadata and shards (also under their
#: temporary "-SSSSS" names), an atomic write's temporary file.
_UNFINISHED_BUILD = re.compile(r"dataset_info\.json|features\.json|jaxdrive_\w+-[\w-]+\.array_record-\d{5}(-of-\d{5})?"
                               rf"|{re.escape(DATASET_META)}\.\d+{re.escape(atomic.TMP_SUFFIX)}")


class SourceError(UserInputError):
    """A malformed source directory (the message names the file, and the field or line)."""


def read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SourceError(f"{path}: not JSON ({e})") from None


def read_jsonl_file(path: Path) -> Iterator[tuple[str, dict]]:
    """``(where, object)`` for every non-empty line of a JSONL file (``where`` = "FILE:LINE")."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise SourceError(f"{path}: not UTF-8 text ({e})") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        where = f"{path}:{i + 1}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise SourceError(f"{where}: not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise SourceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield where, obj


def first_use(seen: dict, value, where: str, field: str = "id") -> None:
    """Records that ``value`` of ``field``, which a JSON-lines file must hold once per line, is at ``where``
    ("FILE:LINE"); a ``SourceError`` naming both lines when ``seen`` (value -> line) has it already (an item given
    twice would be used twice)."""
    if value in seen:
        raise SourceError(f"{where}: field {field!r}: {value!r} is already the {field} of line {seen[value]} "
                          "(each once)")
    seen[value] = where.rsplit(":", 1)[1]


def require(obj: dict, where: str, fields: dict[str, type | tuple[type, ...]]) -> None:
    """Fails naming ``where`` and the field when one of ``fields`` is missing from ``obj`` or of the wrong type."""
    for name, types in fields.items():
        if name not in obj:
            raise SourceError(f"{where}: missing field {name!r}")
        if not isinstance(obj[name], types) or (types is int and isinstance(obj[name], bool)):
            want = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
            raise SourceError(f"{where}: field {name!r}: expected {want}, got {type(obj[name]).__name__}")


def source_path(root: Path, rel, where: str, field: str) -> Path:
    """``root / rel`` for a file path ``rel`` that a record of a source's annotation file names (an image, a scene
    file): the rule every converter applies. ``rel`` must be non-empty text, relative to ``root`` and without '..', so
    a source cannot store files from elsewhere; it is checked as written (a folder linked under ``root``, such as
    nuScenes' ``samples/``, is followed). Fails naming ``where`` (the annotation file and the record), the field and
    the path."""
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise SourceError(f"{where}: field {field!r}: {rel!r} is not a path inside the source directory {root}; "
                          "file paths are relative to it, without '..'")
    return root / rel


def file_ref(root: Path, rel: str, where: str, field: str) -> Path:
    """``root/rel`` (a file named in a source record, ``source_path``'s rule), checked to exist; fails naming the
    record and the field. Examples hold such paths; ``Builder.build`` replaces them by the files' bytes as it writes
    (one example in memory at a time)."""
    path = source_path(root, rel, where, field)
    if not path.is_file():
        raise SourceError(f"{where}: field {field!r}: file {rel!r} not found under {root}")
    return path


def _with_bytes(ex: dict) -> dict:
    """``ex`` with every ``Path`` value (or list of them) replaced by the file's bytes."""
    read = lambda v: v.read_bytes() if isinstance(v, Path) else v
    return {k: [read(x) for x in v] if isinstance(v, list) else read(v) for k, v in ex.items()}


def text(x) -> str:
    """A stored ``Text`` value (bytes from the data source) as str."""
    return x.decode() if isinstance(x, bytes) else str(x)


def texts(xs) -> list[str]:
    return [text(x) for x in xs]


def blobs(xs) -> list[bytes]:
    return [bytes(x) for x in xs]


def bytes_feature():
    """A raw byte string (an encoded image exactly as its file holds it)."""
    import tensorflow_datasets as tfds

    return tfds.features.Tensor(shape=(), dtype=np.object_)


class Builder:
    """Base class of the dataset builders (see the module docstring)."""

    kind: str = ""
    name: str = ""
    version: str = "1.0.0"
    description: str = ""

    def features(self):
        raise NotImplementedError

    def split_examples(self, src: Path) -> dict[str, list[dict]]:
        """Split name -> examples (dicts ``features()`` serialises, files as ``file_ref`` paths), read and validated
        from ``src`` before anything is written."""
        raise NotImplementedError

    def decode(self, ex: dict) -> dict:
        """A stored example (as the data source returns it) -> the plain record."""
        raise NotImplementedError

    def build(self, src: str | os.PathLike, out: str | os.PathLike, *, progress: bool = False) -> dict:
        """Reads ``src`` and writes the TFDS dataset into ``out`` (new, empty, or what an interrupted build left: see
        the module docstring). Returns its metadata."""
        from jaxdrive.data.tfds_writer import check_split_name, write_tfds

        src, out = Path(src), Path(out)
        if not src.is_dir():
            raise SourceError(f"{self.kind}: source directory {src} does not exist")
        _check_out(out)
        splits = self.split_examples(src)
        if not splits:
            raise SourceError(f"{self.kind}: no split found under {src}")
        for split, rows in splits.items():  # checked before any shard is written
            try:
                check_split_name(split)
            except ValueError as e:
                raise SourceError(f"{self.kind} source {src}: {e}; rename its file or directory") from None
            if not rows:
                raise SourceError(f"{self.kind} source {src}: split {split!r} has no example (an empty file?)")
        splits = {split: (_with_bytes(ex) for ex in rows) for split, rows in splits.items()}
        with _building(out) as tmp:
            written = write_tfds(tmp, name=self.name, version=self.version, features=self.features(), splits=splits,
                                 description=self.description, module_name=type(self).__module__, progress=progress)
            meta = {"format": "jaxdrive-dataset/1", "kind": self.kind, "name": self.name, "version": self.version,
                    "source": str(src.resolve()), "splits": written}
            atomic.write_text(tmp / DATASET_META, json.dumps(meta, indent=1))
        return meta


def _check_out(out: Path) -> None:
    """Fails unless ``out`` is new, an empty folder, or a build an earlier version left unfinished."""
    if (out / DATASET_META).exists():
        raise UserInputError(f"--out {out}: already holds a dataset; choose another directory")
    if not out.exists():
        output_dir("--out", out)  # a file on the way (--out FILE/sub) is named
        return
    if not out.is_dir():
        raise UserInputError(f"--out {out}: not a directory; choose a new or empty directory")
    other = sorted(p.name for p in out.iterdir() if not _UNFINISHED_BUILD.fullmatch(p.name))
    if other and (out / "dataset_info.json").exists():  # another TFDS dataset (a scene store, ...)
        raise UserInputError(f"--out {out}: already holds a dataset; choose another directory")
    if other:
        listed = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
        raise UserInputError(f"--out {out}: holds other files ({listed}); choose a new or empty directory")


@contextlib.contextmanager
def _building(out: Path):
    """Yields a new temporary folder beside ``out`` to build into; on a normal exit renames it onto ``out`` (checked
    again with ``_check_out``; an unfinished build there is removed first), on any exit removes what is left of it.
    Temporary folders of earlier builds on this host whose process is gone are removed first."""
    final = out.resolve()  # a symlinked --out: build beside the folder it points to
    host = _host()
    _remove_stale_builds(final, host)
    tmp = final.with_name(f"{final.name}.{host}.{os.getpid()}{atomic.TMP_SUFFIX}")
    try:
        yield tmp
        _check_out(out)
        if final.exists() and any(final.iterdir()):
            shutil.rmtree(final)
        os.replace(tmp, final)  # onto an empty folder, or where none is
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _host() -> str:
    """This machine's name as temporary folder names carry it: ``socket.gethostname()`` with every character but
    ASCII letters, digits, '-' and '_' replaced by '_' (no '.', '/' or space), "localhost" when it is empty."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "localhost"


def _remove_stale_builds(final: Path, here: str) -> None:
    """Removes the ``<final>.<host>.<pid>.tmp`` folders (``_building``) of killed builds on this host (``here``, as
    ``_host`` names it): their process no longer runs, or has this process's id (a reused id: no build of this process
    is under way yet). A folder of another host is left alone, with a warning: its process may be alive there. Folders
    of the earlier naming, ``<final>.<pid>.tmp`` (no host), are removed by the same test of their process id."""
    if not final.parent.is_dir():
        return
    pattern = re.compile(rf"{re.escape(final.name)}\.(?:(?P<host>[A-Za-z0-9_-]+)\.)?(?P<pid>\d+)"
                         rf"{re.escape(atomic.TMP_SUFFIX)}")
    for path in final.parent.iterdir():
        m = pattern.fullmatch(path.name)
        if not m or not path.is_dir():
            continue
        if m["host"] not in (None, here):
            warnings.warn(f"{path}: left alone: the temporary folder of a dataset build on host {m['host']} (this is "
                          f"{here}); remove it by hand if no build runs there")
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or not _running(pid):
            shutil.rmtree(path, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (signal 0 only checks)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def dataset_meta(path: str | os.PathLike) -> dict:
    p = Path(path) / DATASET_META
    if not p.is_file():
        raise UserInputError(f"{path}: not a dataset built by `jaxdrive data build` (no {DATASET_META})")
    return json.loads(p.read_text())


class DecodedSource:
    """Random access to one split of a built dataset, decoded into plain records (``len``, ``src[i]``).

    ``raw`` is the TFDS data source (``tfds.builder_from_directory(DIR).as_data_source(split)``); pickling keeps only
    the path and split, so grain worker processes reopen it."""

    def __init__(self, path: str | os.PathLike, split: str):
        import tensorflow_datasets as tfds

        from jaxdrive.datasets import get_builder

        self.path, self.split = str(path), split
        meta = dataset_meta(path)
        if split not in meta["splits"]:
            raise UserInputError(f"split {split!r}: {path} holds splits {sorted(meta['splits'])}")
        self.builder = get_builder(meta["kind"])
        self.raw = tfds.builder_from_directory(self.path).as_data_source(split=split)

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: int) -> dict:
        """Record ``i`` decoded; a negative ``i`` counts from the end, as in a list (so ``for r in src`` and
        ``list(src)`` stop at the end instead of failing with the data source's ValueError)."""
        n = len(self.raw)
        try:
            k = operator.index(i)
        except TypeError:
            raise TypeError(f"{self.path} split {self.split!r}: record index: expected an int, got "
                            f"{type(i).__name__}") from None
        if not -n <= k < n:
            raise IndexError(f"{self.path} split {self.split!r}: record index {k} out of range [0, {n})")
        return self.builder.decode(self.raw[k % n])

    def __getstate__(self):
        return {"path": self.path, "split": self.split}

    def __setstate__(self, state):
        self.__init__(state["path"], state["split"])

    def __repr__(self) -> str:  # grain records it in iterator states: a stable text
        return f"DecodedSource(path={self.path!r}, split={self.split!r})"


def read_all(path: str | os.PathLike, split: str, indices: Sequence[int] | None = None) -> list[dict]:
    """Every record (or those at ``indices``) of one split of a built dataset, decoded."""
    src = DecodedSource(path, split)
    return [src[i] for i in (range(len(src)) if indices is None else indices)]
