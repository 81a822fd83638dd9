"""The core on 2,000 JPEGs under the emulated volume, beside the reference and a bare thread pool.

Prints JSON lines; `run_all.py` turns them into RESULTS.md.
Usage: python benchmarks/bench_core.py
"""

from __future__ import annotations

from common import SHARED, emit, image_volume, measure

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
from air_core.plan import plan
sizes = [random.Random(i).randint(1, 1 << 22) for i in range(1_000_000)]
t = time.perf_counter()
items = plan(sizes, Grid(5, 8, 3, 6), shuffle=True, seed=1, epoch=3, equalize="pad")
print(json.dumps({"system": "air_core.plan", "items": 1_000_000, "plan_s": round(time.perf_counter() - t, 3),
                  "stream_items": len(items)}))
"""


def main() -> list[dict]:
    nested, flat = image_volume()
    results: list[dict] = []
    emit(measure(SHARED / "bench" / "anchor_files.py", flat, "6"), results)
    emit(measure(SHARED / "bench" / "threadpool_files.py", flat, "64"), results)
    emit(measure(OURS, nested), results)
    emit(measure(PLAN_1M, slow=False), results)
    return results


if __name__ == "__main__":
    main()
