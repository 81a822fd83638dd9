"""The core on 2,000 JPEGs under the emulated volume, beside the reference and a bare thread pool.

Prints JSON lines; `run_all.py` turns them into RESULTS.md.
Usage: python benchmarks/bench_core.py
"""

from __future__ import annotations

from common import emit, image_volume, measure

REFERENCE = r"""
import json, sys, time
from torch.utils.data import IterableDataset
from databricks.air.data import DataLoader, UCVolumeDataset


class ReadBytes(IterableDataset):
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        for p in self.paths:
            with open(p, "rb") as f:
                yield len(f.read())


path, workers = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
ds = UCVolumeDataset(path)
out = {"system": "databricks-sdk-air", "workers": workers, "list_s": round(time.perf_counter() - t, 3)}
loader = DataLoader(ReadBytes(ds), batch_size=32, num_workers=workers, collate_fn=sum)
for epoch in ("cold", "warm"):
    t = time.perf_counter()
    nbytes = sum(loader)
    dt = time.perf_counter() - t
    out[f"{epoch}_s"], out[f"{epoch}_MBps"] = round(dt, 3), round(nbytes / dt / 1e6, 1)
out["files"] = len(ds._files)
out["files_per_s_cold"] = round(out["files"] / out["cold_s"], 1)
out["files_per_s_warm"] = round(out["files"] / out["warm_s"], 1)
print(json.dumps(out))
"""

# The ceiling: a bare thread pool reading every file once, no cache, no framework.
THREAD_POOL = r"""
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor


def size(path):
    with open(path, "rb") as f:
        return len(f.read())


folder, threads = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
paths = [os.path.join(d, name) for d, _, names in os.walk(folder) for name in names]
with ThreadPoolExecutor(threads) as pool:
    nbytes = sum(pool.map(size, paths))
dt = time.perf_counter() - t
print(json.dumps({"system": "threadpool", "threads": threads, "files": len(paths), "s": round(dt, 3),
                  "files_per_s": round(len(paths) / dt, 1), "MBps": round(nbytes / dt / 1e6, 1)}))
"""

OURS = r"""
import json, sys, time
from air_core import FileStream
t = time.perf_counter()
stream = FileStream(sys.argv[1])
listed = time.perf_counter() - t
out = {"system": "air_core.FileStream", "files": len(stream.manifest), "list_plan_s": round(listed, 3)}
for epoch in ("cold", "warm"):
    t = time.perf_counter()
    n = sum(len(f.read_bytes()) for f in stream)
    dt = time.perf_counter() - t
    out[f"files_per_s_{epoch}"] = round(len(stream.manifest) / dt, 1)
    out[f"{epoch}_MBps"] = round(n / dt / 1e6, 1)
s = stream.cache.stats
out["warm_hits"], out["misses"] = s.hits, s.misses
print(json.dumps(out))
"""

PLAN_1M = r"""
import json, random, time
from air_core.grid import Grid
from air_core.planning.shares import Planning, plan_epoch
sizes = [random.Random(i).randint(1, 1 << 22) for i in range(1_000_000)]
t = time.perf_counter()
items = plan_epoch(sizes, Grid(5, 8, 3, 6), planning=Planning(seed=1, shuffle=True, equalize="pad"), epoch=3)
print(json.dumps({"system": "air_core.plan", "items": 1_000_000, "plan_s": round(time.perf_counter() - t, 3),
                  "stream_items": len(items)}))
"""


def main() -> list[dict]:
    nested, flat = image_volume()
    results: list[dict] = []
    emit(measure(REFERENCE, flat, "6"), results)
    emit(measure(THREAD_POOL, flat, "64"), results)
    emit(measure(OURS, nested), results)
    emit(measure(PLAN_1M, slow=False), results)
    return results


if __name__ == "__main__":
    main()
