"""Overhead of a scene store's checksums (crc32 per record and per padded row), as a ratio of the store path's
end-to-end time measured in the same run.

Writes a synthetic store (``score_end_to_end.make_scenes``: the reference mix, ``--k`` proposals per scene, not
timed), then, in one process, alternating ``--rounds`` times (after one warm-up run that compiles):

* ``e2e checked`` / ``e2e unchecked``: ``score_source`` over the store (the padded copy: rows verified as each batch
  is copied out of the memory maps), and the same with the copy's checksums dropped (nothing verified);
* ``verify``: the checking alone, every batch of the run: ``PaddedStore.checked_batch`` minus ``PaddedStore.batch``
  (median of the rounds), and a record's check (``SceneStore.record``'s crc32) times the scenes, for a run that decodes.

The overhead printed is ``verify / e2e checked`` (the difference of the two end-to-end medians is printed too: on a
shared CPU it is noise-dominated). Target: < 3 %.

    python benchmarks/store_checksums.py                       # K = 256, 128 scenes, 3 rounds
    python benchmarks/store_checksums.py --k 16 --scenes 512
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=256, help="proposals per scene (default: 256)")
    ap.add_argument("--scenes", type=int, default=128, help="scenes in the store (default: 128)")
    ap.add_argument("--batch-size", type=int, default=16, help="scenes per batch (default: 16)")
    ap.add_argument("--rounds", type=int, default=3, help="timed checked / unchecked runs each (default: 3)")
    args = ap.parse_args()

    from score_end_to_end import make_scenes

    from jaxdrive.data.store import write_store
    from jaxdrive.scoring.runner import ScoreOptions, score_source
    from jaxdrive.scoring.sources import SceneStoreSource

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; K = {args.k}, {args.scenes} scenes, "
          f"batches of {args.batch_size}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_store(make_scenes(args.k, args.scenes, 16), tmp / "store")
        checked, unchecked = SceneStoreSource(tmp / "store"), SceneStoreSource(tmp / "store")
        pad = checked.pad_spec()
        assert checked.padded(pad) is not None and checked.padded(pad).crc is not None
        unchecked.padded(pad).crc = None
        options = ScoreOptions(batch_size=args.batch_size, shard_size=4 * args.batch_size, workers=1, pad=pad)
        ranges = [(a, min(args.scenes, a + args.batch_size)) for a in range(0, args.scenes, args.batch_size)]
        copy = checked.padded(pad)
        runs = iter(range(10 ** 6))

        def e2e(source) -> float:
            t0 = time.perf_counter()
            score_source(source, tmp / f"run{next(runs)}", options, progress=False)
            return time.perf_counter() - t0

        def batches(fn) -> float:
            t0 = time.perf_counter()
            for a, b in ranges:
                fn(a, b, args.batch_size)
            return time.perf_counter() - t0

        e2e(checked)  # compile
        times = {"checked": [], "unchecked": [], "verify": []}
        for _ in range(args.rounds):
            times["checked"].append(e2e(checked))
            times["unchecked"].append(e2e(unchecked))
            times["verify"].append(max(0.0, batches(copy.checked_batch) - batches(copy.batch)))
        records = [checked.store.source.data_source[i] for i in range(args.scenes)]
        t0 = time.perf_counter()
        for r in records:
            zlib.crc32(r)
        record_s = time.perf_counter() - t0
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"e2e checked   {med['checked']:.3f} s (runs: {', '.join(f'{t:.3f}' for t in times['checked'])})")
    print(f"e2e unchecked {med['unchecked']:.3f} s (runs: {', '.join(f'{t:.3f}' for t in times['unchecked'])})")
    print(f"verify (padded rows, every batch) {med['verify'] * 1e3:.1f} ms; records' crc32 (a decoding run) "
          f"{record_s * 1e3:.1f} ms")
    print(f"overhead: verify / e2e checked = {med['verify'] / med['checked']:.2%} (target < 3%); "
          f"records / e2e = {record_s / med['checked']:.2%}; e2e checked / unchecked - 1 = "
          f"{med['checked'] / med['unchecked'] - 1:+.2%} (noise on a shared CPU)")


if __name__ == "__main__":
    main()
