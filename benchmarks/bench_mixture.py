"""Mixtures: planning a 3-source epoch for one stream, and a mixed epoch read against the same files as one folder.

1. Planning (pure, no I/O; synthetic sizes, lognormal around 150 KB): sources
   of 50 %, 30 % and 20 % of N items, mixed as proportions 0.6 / 0.3 / 0.1 of
   an epoch of N items (the first source repeated and sampled, the second
   read whole, the third half drawn), planned for one stream of an 8 x 6 grid,
   shuffled, `equalize="pad"`, through `MixtureReader.plan` as a stream calls
   it: its first epoch and the next, and the process's peak RSS before and
   after them. Beside it, one folder of N items planned for the same stream.
   Target: <= 2 s for N = 10**7.
2. Reading, under the emulated volume (`common.measure`): three folders of
   small files (2-32 KiB) under one parent, read as a mixture whose epoch
   holds exactly their union (`repeat=1` each) and as one `FileStream` over
   the parent, both shuffled, a cold epoch then `--warm` warm ones (their
   median), files/s. The two take turns `--repeat` times so that load from
   other processes falls on each alike. Target: the mixture within 10 % of
   the folder, cold and warm.

Prints one JSON line per measurement, then a summary line with the targets
and the ratios.

Usage: python benchmarks/bench_mixture.py [--plan-items 1e7] [--files 6000] [--repeat 3] [--warm 3]
  The defaults are the full size (about a minute). A quick check that it runs:
  --plan-items 1e5 --files 150 --repeat 1 --warm 1 (its ratios are mostly noise: epochs of a few ms).
"""

from __future__ import annotations

import argparse
import os
import statistics

from common import VOLUME, emit, measure

SOURCES = (("chat", 0.5), ("code", 0.3), ("safety", 0.2))  # each folder's part of the files

PLAN = r"""
import json, resource, sys, time
import numpy as np
from air_core.grid import Grid
from air_core.mixed_source import MixtureReader
from air_core.planning import mixture
from air_core.planning.shares import Planning, largest_first, plan_epoch

n = int(sys.argv[1])
parts = [n * 5 // 10, n * 3 // 10, n - n * 8 // 10]
rng = np.random.default_rng(0)
sizes = [rng.lognormal(np.log(150_000), 1.0, k).astype(np.int64) + 1 for k in parts]
by_size = [largest_first(s) for s in sizes]  # a listing carries its order, computed once when listed
counts = mixture.source_counts(parts, "proportion", [0.6, 0.3, 0.1])
planning = Planning(seed=1, shuffle=True, balance="bytes", equalize="pad")
grid = Grid(5, 8, 3, 6)


def timed(f):
    wall, cpu = time.perf_counter(), time.process_time()
    out = f()
    return out, round(time.perf_counter() - wall, 3), round(time.process_time() - cpu, 3)


# What a MixedSource plans with, made from its listings' sizes and orders (here synthetic, no listing on disk).
reader = MixtureReader(mixture.Mixture(sizes, counts, by_size=by_size))
out = {"system": "mixture.plan", "items": n, "sources": parts, "counts": counts, "grid": "8x6",
       "inputs_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}
for epoch in (0, 1):
    items, out[f"plan_epoch{epoch}_s"], out[f"plan_epoch{epoch}_cpu_s"] = timed(
        lambda: reader.plan(grid, None, planning, epoch=epoch))
out["plan_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # both epochs planned
out["stream_items"] = len(items)
whole = np.concatenate(sizes)
folder_order = largest_first(whole)
_, out["one_folder_plan_s"], out["one_folder_plan_cpu_s"] = timed(
    lambda: plan_epoch(whole, grid, planning=planning, epoch=1, by_size=folder_order))
print(json.dumps(out))
"""

READ = r"""
import json, statistics, sys, time
from air_core import FileStream

system, root, names, warm = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
t = time.perf_counter()
if system == "mixture":
    stream = FileStream(sources=[{"path": f"{root}/{name}", "repeat": 1} for name in names], shuffle=True)
else:
    stream = FileStream(root, shuffle=True)
out = {"system": system, "list_s": round(time.perf_counter() - t, 3)}
seconds, files = [], set()
for epoch in range(1 + warm):
    stream.set_epoch(epoch)
    t = time.perf_counter()
    paths = []
    for f in stream:
        f.read_bytes()
        paths.append(f.path)
    seconds.append(time.perf_counter() - t)
    files.add(len(paths))
    assert len(set(paths)) == len(paths), "a file read twice in one epoch"
assert len(files) == 1, f"epochs of different sizes: {files}"
out["files"] = n = files.pop()
for epoch, dt in (("cold", seconds[0]), ("warm", statistics.median(seconds[1:]))):
    out[epoch + "_s"] = round(dt, 3)
    out["files_per_s_" + epoch] = round(n / dt, 1)
out["warm_hits"], out["misses"] = stream.cache.stats.hits, stream.cache.stats.misses
print(json.dumps(out))
"""


def small_files(files: int) -> str:
    """`VOLUME/mixture-<files>/<source>/NNNNNN.bin`: `files` files of 2-32 KiB over the sources (kept if there)."""
    root = f"{VOLUME}/mixture-{files}"
    sizes = iter(2048 + (i * 7919) % (30 * 1024) for i in range(files))
    for s, (name, part) in enumerate(SOURCES):
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        n = files - sum(round(files * p) for _, p in SOURCES[:-1]) if s == len(SOURCES) - 1 else round(files * part)
        for i in range(n):
            path = os.path.join(folder, f"{i:06d}.bin")
            size = next(sizes)
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    f.write(os.urandom(size))
    return root


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan-items", type=lambda s: int(float(s)), default=10**7)
    parser.add_argument("--files", type=int, default=6000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=int, default=3)
    args = parser.parse_args()
    results: list[dict] = []
    planned = measure(PLAN, str(args.plan_items), slow=False)
    emit(planned, results)
    root = small_files(args.files)
    names = ",".join(name for name, _ in SOURCES)
    runs: dict[str, list[dict]] = {"mixture": [], "folder": []}
    for _ in range(args.repeat):
        for system in runs:
            runs[system].append(measure(READ, system, root, names, str(args.warm)))
            emit(runs[system][-1], results)
    speed = {(system, epoch): statistics.median(r[f"files_per_s_{epoch}"] for r in runs[system])
             for system in runs for epoch in ("cold", "warm")}
    ratios = {epoch: round(speed["mixture", epoch] / speed["folder", epoch], 3) for epoch in ("cold", "warm")}
    plan_s = max(planned["plan_epoch0_s"], planned["plan_epoch1_s"])
    emit({"summary": "mixture", "plan_items": args.plan_items, "plan_s": plan_s, "plan_target_s": 2.0,
          "plan_ok": plan_s <= 2.0, "files": runs["mixture"][0]["files"],
          "mixed_over_folder_cold": ratios["cold"], "mixed_over_folder_warm": ratios["warm"],
          "speed_target_ratio": 0.9, "speed_ok": min(ratios.values()) >= 0.9}, results)
    return results


if __name__ == "__main__":
    main()
