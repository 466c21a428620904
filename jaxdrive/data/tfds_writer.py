"""Write a TFDS dataset (array_record shards + ``dataset_info.json`` / ``features.json``) without TensorFlow.

``write_tfds(out, name=..., version=..., features=..., splits={"train": examples, ...})`` serialises every example
with ``features.serialize_example`` (TFDS's TensorFlow-free path) into ``<name>-<split>.array_record-SSSSS-of-NNNNN``
shards under ``out`` and writes the TFDS metadata beside them, so
``tfds.builder_from_directory(out).as_data_source(split)`` reads it back by index (random access, no TensorFlow; the
flat layout is not the ``data_dir/name/version`` one ``tfds.data_source(name, data_dir=)`` looks for). Shared by the
scene store (``jaxdrive.data.store``) and the dataset builders (``jaxdrive.datasets``).
"""
from __future__ import annotations

import hashlib
import os
import re
import zlib
from pathlib import Path
from typing import Iterable, Mapping

from jaxdrive.errors import UserInputError

RECORDS_PER_SHARD = 4096
_SPLIT_NAME = re.compile(r"[\w-]+")  # what TFDS's split parser reads back (``tfds.core.splits._SUB_SPEC_RE``)


class EmptySplitError(UserInputError):
    """A split given to ``write_tfds`` had no example."""


def check_split_name(split: str) -> None:
    """Fails unless TFDS can read ``split`` back: letters, digits, '_' and '-', and not "all" (TFDS's union of
    every split). Names such as "train.v2" or "my split" were written and then unreadable."""
    if not isinstance(split, str) or not _SPLIT_NAME.fullmatch(split) or split == "all":
        raise UserInputError(f"split {split!r}: TFDS split names are letters, digits, '_' and '-', and not 'all'")


def write_tfds(out: str | os.PathLike, *, name: str, version: str, features, splits: Mapping[str, Iterable[dict]],
               description: str = "", module_name: str = __name__, records_per_shard: int = RECORDS_PER_SHARD,
               progress: bool = False, record_crc32: list[int] | None = None) -> dict[str, dict]:
    """Writes each split's examples as array_record shards and the TFDS metadata into ``out`` (created).

    Args:
      out: dataset directory (the ``data_dir`` of ``tfds.builder_from_directory``).
      name, version: the TFDS dataset identity (``version`` as "X.Y.Z").
      features: a ``tfds.features.FeaturesDict``; each example is a dict it serialises.
      splits: split name -> iterable of examples (consumed once, in order). A split with no example is an error.
      records_per_shard: examples per array_record shard.
      record_crc32: when given, each record's ``zlib.crc32`` (of its serialised bytes) is appended to it, in order.
    Returns:
      split name -> {"examples": count, "num_bytes": serialised bytes, "sha256": hash of the records in order}.
    """
    import tensorflow_datasets as tfds
    from array_record.python.array_record_module import ArrayRecordWriter
    from tqdm.auto import tqdm

    for split in splits:
        check_split_name(split)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    split_infos, summary = [], {}
    for split, examples in splits.items():
        template = f"{name}-{split}.array_record-{{:05d}}"
        digest = hashlib.sha256()
        shard_lengths, writer, total_bytes = [], None, 0
        try:
            for ex in tqdm(examples, disable=not progress, unit="example", desc=f"{name} {split}"):
                if writer is None or shard_lengths[-1] == records_per_shard:
                    if writer is not None:
                        writer.close()
                    writer = ArrayRecordWriter(str(out / template.format(len(shard_lengths))), "group_size:1")
                    shard_lengths.append(0)
                record = features.serialize_example(ex)
                writer.write(record)
                digest.update(record)
                if record_crc32 is not None:
                    record_crc32.append(zlib.crc32(record))
                shard_lengths[-1] += 1
                total_bytes += len(record)
        finally:
            if writer is not None:
                writer.close()
        if not shard_lengths:
            raise EmptySplitError(f"{name}: split {split!r} has no example to write")
        n = len(shard_lengths)
        for i in range(n):  # TFDS names shards "-SSSSS-of-NNNNN"
            os.replace(out / template.format(i), out / f"{name}-{split}.array_record-{i:05d}-of-{n:05d}")
        split_infos.append(tfds.core.SplitInfo(
            name=split, shard_lengths=shard_lengths, num_bytes=total_bytes,
            filename_template=tfds.core.ShardedFileTemplate(data_dir=out, dataset_name=name, split=split,
                                                            filetype_suffix="array_record")))
        summary[split] = {"examples": sum(shard_lengths), "num_bytes": total_bytes, "sha256": digest.hexdigest()}
    info = tfds.core.DatasetInfo(builder=tfds.core.DatasetIdentity(name=name, version=version, data_dir=str(out),
                                                                    module_name=module_name),
                                 features=features, description=description)
    info.set_splits(tfds.core.SplitDict(split_infos))
    info.set_file_format("array_record")
    info.write_to_directory(out)
    return summary
