"""air_core.torch beside the reference (databricks-sdk-air) on 2,000 JPEGs under the emulated volume.

Both read every file's bytes through `UCVolumeDataset` + `DataLoader` (batch 32,
`collate_fn=sum`), a cold epoch then `--warm` warm ones in one process, with an
empty cache at the start. The reference runs as bench_core.py runs it (6 workers, its per-rank default, over a flat folder: it does not
recurse), with more warm epochs: one warm epoch lasts ~60 ms, about as long as
one hiccup of this VM, so each process reports the median of its warm epochs.
Ours reads the nested class folders at its default worker count, and at 6
workers. The three take turns, `--repeat` times, so that load from other
processes falls on each alike; prints one JSON line per measurement, then one
with the ratios of the medians.

Last, where a warm item's time goes, in one process (no DataLoader): each
step of our lookup alone and each layer above it, beside the reference's own
pass, µs an item, the least of many passes (`--breakdown`: that alone).

Usage: python benchmarks/bench_torch.py [--repeat 3] [--warm 5] [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from common import emit, image_volume, measure

EPOCHS = r"""
import json, statistics, sys, time
from torch.utils.data import IterableDataset

system, path, workers, warm = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if system == "databricks-sdk-air":
    from databricks.air.data import DataLoader, UCVolumeDataset
else:
    from air_core.torch import DataLoader, UCVolumeDataset


class ReadBytes(IterableDataset):
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        for p in self.paths:
            with open(p, "rb") as f:
                yield len(f.read())


t = time.perf_counter()
ds = UCVolumeDataset(path)
listed = time.perf_counter() - t
loader = DataLoader(ReadBytes(ds), batch_size=32, collate_fn=sum,
                    **({} if workers == "default" else {"num_workers": int(workers)}))
n = len(ds._files) if system == "databricks-sdk-air" else len(ds.manifest)
seconds, nbytes = [], 0
for _ in range(1 + warm):
    t = time.perf_counter()
    nbytes = sum(loader)
    seconds.append(time.perf_counter() - t)
out = {"system": system, "workers": loader.num_workers, "list_s": round(listed, 3), "files": n, "MB": nbytes / 1e6}
for epoch, dt in (("cold", seconds[0]), ("warm", statistics.median(seconds[1:]))):
    out[epoch + "_s"] = round(dt, 3)
    out["files_per_s_" + epoch] = round(n / dt, 1)
out["warm_epochs_s"] = [round(s, 3) for s in seconds[1:]]
print(json.dumps(out))
"""


BREAKDOWN = r"""
import json, os, sys, time
from databricks.air.data import UCVolumeDataset as Reference
from air_core.io.cache import _entry_path
from air_core.io.files import chunked, read_items
from air_core.torch import UCVolumeDataset

nested, flat = sys.argv[1], sys.argv[2]
ours, ref = UCVolumeDataset(nested), Reference(flat)
copies, _ = list(ours), list(ref)  # cold: fill both caches
stream = ours._stream
m, cache = stream.manifest, stream.cache
items = list(range(len(m)))
rows = [(f"{m.root}/{p}", s, t) for p, s, t in m.rows(items)]


def per_item(fn, passes=41):
    best = min(_timed(fn) for _ in range(passes))
    return round(best * 1e6 / len(items), 2)


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def drain(it):
    for _ in it:
        pass


import pickle

from air_core.torch.dataloader import _TagWithPosition

tag = _TagWithPosition(sum, ours)
batches = [list(range(k, k + 32)) for k in range(0, len(items), 32)]


def tagged_batches():  # what a worker adds to each batch of 32 and what crosses to the consumer, per item
    for b in batches:
        pickle.loads(pickle.dumps(tag(b), protocol=pickle.HIGHEST_PROTOCOL))


def plain_batches():
    for b in batches:
        pickle.loads(pickle.dumps(sum(b), protocol=pickle.HIGHEST_PROTOCOL))


steps = {
    "decode rows (up to 512 at a time)": lambda: [m.rows(c) for c in chunked(items)],
    "entry path (remembered)": lambda: [_entry_path(cache._objects, v, s, t, None) for v, s, t in rows],
    "stat of the copy": lambda: [os.stat(c) for c in copies],
    "Cache.lookup_run (path, stat, length check, count)": lambda: cache.lookup_run(rows),
    "read_items": lambda: drain(read_items(m, items, cache)),
    "FileStream pass": lambda: drain(stream),
    "UCVolumeDataset pass": lambda: drain(ours),
    "reference UCVolumeDataset pass": lambda: drain(ref),
    "batch of 32 collated and pickled across, untagged": plain_batches,
    "the same with the resume position tagged on": tagged_batches,
}
print(json.dumps({"system": "warm item breakdown, us an item (least of 41 passes, one process)",
                  "files": len(items), **{k: per_item(f) for k, f in steps.items()}}))
"""


def settle() -> None:
    """Let the disk finish writing (and discarding) what the last measurement's cache left, so each starts alike."""
    os.sync()
    time.sleep(3)


def main(repeat: int = 3, warm: int = 5) -> list[dict]:
    nested, flat = image_volume()
    results: list[dict] = []
    runs: dict[str, list[dict]] = {"reference": [], "default": [], "6": []}
    for _ in range(repeat):
        for which, args in (("reference", ("databricks-sdk-air", flat, "6")),
                            ("default", ("air_core.torch", nested, "default")), ("6", ("air_core.torch", nested, "6"))):
            settle()
            emit(measure(EPOCHS, *args, str(warm)), runs[which])
    results += [r for rs in runs.values() for r in rs]

    def median(which: str, epoch: str) -> float:
        return statistics.median(r[f"files_per_s_{epoch}"] for r in runs[which])

    summary = {"system": "ratio air_core.torch / databricks-sdk-air (6 workers), medians", "repeat": repeat,
               "workers_default": runs["default"][0]["workers"], "warm_epochs": warm}
    for epoch in ("cold", "warm"):
        summary[f"reference_files_per_s_{epoch}"] = median("reference", epoch)
        for which in ("default", "6"):
            summary[f"{epoch}_{which}_workers"] = round(median(which, epoch) / median("reference", epoch), 2)
    emit(summary, results)
    emit(measure(BREAKDOWN, nested, flat), results)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=int, default=5, help="warm epochs per process (their median is reported)")
    parser.add_argument("--breakdown", action="store_true", help="where a warm item's time goes, then exit")
    args = parser.parse_args()
    if args.breakdown:
        print(json.dumps(measure(BREAKDOWN, *image_volume())))
    else:
        main(args.repeat, args.warm)
