"""Minimal streaming safetensors reader/writer on numpy memmaps (bfloat16 via ``ml_dtypes``; no torch needed).

Reading maps each file once and returns zero-copy views, so a tensor is materialised only when converted; writing
emits the header first and then one tensor at a time, so a model is never held twice in host memory.
"""
from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable

import ml_dtypes
import numpy as np

from jaxdrive.errors import UserInputError

_DTYPES = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in _DTYPES.items()}

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def _read_header(file: str) -> tuple[dict, int]:
    """The header of a safetensors ``file`` (tensor name -> dtype, shape, data_offsets) and the offset of its data;
    a ``ValueError`` naming the file when it is no safetensors file or its tensors lie beyond its end (a copy cut
    short)."""
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        if n is None or n > size - 8:
            raise UserInputError(f"{file}: not a safetensors file ({size} bytes: no 8-byte header length and header)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserInputError(f"{file}: not a safetensors file: cannot read its JSON header ({e})") from None
    if not isinstance(header, dict):
        raise UserInputError(f"{file}: not a safetensors file: its header is not a JSON object")
    data = size - 8 - n
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            shape = [int(d) for d in info["shape"]]
            ok = isinstance(info["dtype"], str) and 0 <= start <= end and min(shape, default=0) >= 0
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise UserInputError(f"{file}: tensor {key!r}: expected dtype, shape and data_offsets [start, end] in the "
                             f"header, got {info!r}")
        dtype = _DTYPES.get(info["dtype"])
        if dtype is not None and end - start != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise UserInputError(f"{file}: tensor {key!r}: {end - start} data bytes do not hold shape {shape} of "
                             f"{info['dtype']}")
        if end > data:
            raise UserInputError(f"{file}: tensor {key!r} ends at data byte {end}, but the file holds {data} data bytes: "
                             "it is cut short (an interrupted copy or download)")
    return header, 8 + n


class SafetensorsDir:
    """All tensors of a Hugging Face checkpoint directory (single file or sharded with an index).

    ``keys()`` lists tensor names, ``shape(name)`` reads the header only, ``get(name)`` returns a read-only numpy
    view (memmap) of the stored bytes. A directory without weights, an unreadable index or a damaged or missing
    file is a ``ValueError`` naming the file.
    """

    def __init__(self, path: str | os.PathLike):
        path = os.fspath(path)
        index = os.path.join(path, INDEX_FILE)
        if os.path.exists(index):
            files = _index_files(index)
        elif os.path.exists(os.path.join(path, SINGLE_FILE)):
            files = [SINGLE_FILE]
        else:
            raise UserInputError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE} (the model's weights)")
        self._where: dict[str, tuple[str, dict, int]] = {}
        self._maps: dict[str, np.memmap] = {}
        for name in files:
            file = os.path.join(path, name)
            if not os.path.isfile(file):
                raise UserInputError(f"{index}: weight_map names {name!r}, but {file} does not exist")
            header, offset = _read_header(file)
            header.pop("__metadata__", None)
            for key, info in header.items():
                self._where[key] = (file, info, offset)

    def keys(self) -> list[str]:
        return list(self._where)

    def __contains__(self, key: str) -> bool:
        return key in self._where

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._where[key][1]["shape"])

    def get(self, key: str) -> np.ndarray:
        file, info, offset = self._where[key]
        if info["dtype"] not in _DTYPES:
            raise UserInputError(f"{file}: tensor {key!r}: unsupported safetensors dtype {info['dtype']}")
        if file not in self._maps:
            self._maps[file] = np.memmap(file, dtype=np.uint8, mode="r")
        start, end = info["data_offsets"]
        raw = self._maps[file][offset + start : offset + end]
        return raw.view(_DTYPES[info["dtype"]]).reshape(info["shape"])


def _index_files(index: str) -> list[str]:
    """The shard files an index's ``weight_map`` (tensor name -> file name) names, sorted."""
    from jaxdrive.models.config import read_json_object

    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise UserInputError(f"{index}: expected a 'weight_map' object (tensor name -> safetensors file name)")
    return sorted(set(weight_map.values()))


def write_safetensors(
    file: str | os.PathLike,
    entries: Iterable[tuple[str, tuple[int, ...], np.dtype]],
    produce: Callable[[str], np.ndarray],
) -> None:
    """Write ``entries`` (name, shape, dtype) to ``file``, calling ``produce(name)`` for one tensor at a time."""
    entries = list(entries)
    header: dict = {"__metadata__": {"format": "pt"}}
    pos = 0
    for name, shape, dtype in entries:
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        header[name] = {"dtype": _NAMES[np.dtype(dtype)], "shape": list(shape), "data_offsets": [pos, pos + size]}
        pos += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(file, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, shape, dtype in entries:
            arr = np.ascontiguousarray(produce(name), dtype=dtype)
            if arr.shape != tuple(shape):
                raise UserInputError(f"write_safetensors: tensor {name!r} has shape {arr.shape}, declared {tuple(shape)}")
            f.write(arr.tobytes())
