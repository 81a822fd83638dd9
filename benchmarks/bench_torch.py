"""air_core.torch beside the reference (databricks-sdk-air) on 2,000 JPEGs under the emulated volume.

Both read every file's bytes through `UCVolumeDataset` + `DataLoader` (batch 32,
`collate_fn=sum`), with an empty cache at the start, in one process: first
both loaders' workers start (a pass of one file a worker, counted in the cold
epoch: workers started after the other loader's cold epoch read slower), then
a cold epoch of each (the disk settled after each); then every copy of both
caches written again, each cache's in the order its loader read them, the two
caches' k-th copies one after the other (copies written earlier read slower,
whoever wrote them, and in another order than written too); then `--warm` warm epochs of each,
taking turns (ABAB..., the other one first in the next process). The
reference runs as bench_core.py runs it (6 workers, its per-rank default, over a
flat folder: it does not recurse); ours reads the nested class folders at its
default worker count in one process, at 6 workers in the next; `--repeat`
times each. One warm epoch lasts ~60 ms, and processes differ by up to 15%
(where the copies' pages land): so each warm ratio is of two epochs run side
by side in one process, a process's ratio is the median of its pairs, and the
summary's is the median over processes. Prints one JSON line per loader and
process, then one with the ratios.

Last, where a warm item's time goes, in one process (no DataLoader): each
step of our lookup alone and each layer above it, beside the reference's own
pass, µs an item, the least of many passes; each loader's pass as DataLoader
worker 0 of 6 with each copy read as it comes (its own time alone: the reads
leave a worker's caches cold, as in a real one); then each loader's own CPU
time per warm item through its DataLoader, nothing read, in its workers and
in the main process (`--breakdown`: those two alone).

`--twins` runs each loader against a second loader of its own kind instead
(6 workers, a cache each, the same one filled first in every process): the
check that, with the copies written again in turn, neither lags for having
filled its cache first.

Usage: python benchmarks/bench_torch.py [--repeat 3] [--warm 10] [--breakdown | --twins]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from common import emit, image_volume, measure

PAIRED = r"""
import itertools, json, os, shutil, statistics, sys, tempfile, time
from torch.utils.data import IterableDataset, get_worker_info
import databricks.air.data as reference
import air_core.torch as ours

nested, flat, workers, warm, first = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
twins = sys.argv[6:]  # ["databricks-sdk-air"] or ["air_core.torch"]: that loader against a second one of its own


ORDERS = tempfile.mkdtemp()  # each worker's order of reading, of its cold epoch


class ReadBytes(IterableDataset):
    def __init__(self, paths, name):
        self.paths, self.name, self.passes = paths, name, 0

    def __iter__(self):
        self.passes += 1
        if self.passes == 1:  # the pass that starts the loader's workers (see below): a file each
            for p in itertools.islice(self.paths, 1):
                with open(p, "rb") as f:
                    yield len(f.read())
            return
        read = [] if self.passes == 2 else None
        for p in self.paths:
            with open(p, "rb") as f:
                yield len(f.read())
            if read is not None:
                read.append(p)
        if read is not None:
            worker = get_worker_info()
            with open(os.path.join(ORDERS, f"{self.name}@{worker.id if worker else 0}"), "w") as f:
                json.dump(read, f)


def read_order(name):  # the loader's copies as its workers read them side by side, their k-th files in turn
    lists = [json.load(open(os.path.join(ORDERS, f)))
             for f in sorted(os.listdir(ORDERS)) if f.rsplit("@", 1)[0] == name]
    return [p for step in itertools.zip_longest(*lists) for p in step if p is not None]


def settle():  # the cold epoch's copies written out, so that the next epoch runs on a quiet disk
    os.sync()
    time.sleep(3)


def loader(system):
    t = time.perf_counter()
    twin = system.endswith(" (second)")  # a second loader of the same kind, with a cache of its own
    system = system.removesuffix(" (second)")
    if system == "databricks-sdk-air":
        ds = reference.UCVolumeDataset(flat)
        n, kw, DataLoader = len(ds._files), {"num_workers": 6}, reference.DataLoader
        copies = ds._fs_layer._cache_dir
    else:
        cache = os.path.join(os.environ["AIR_CACHE_DIR"], "second" if twin else "first") if twins else None
        ds = ours.UCVolumeDataset(nested, cache_dir=cache)
        n, kw, DataLoader = len(ds.manifest), {} if workers == "default" else {"num_workers": int(workers)}, ours.DataLoader
        copies = os.path.join(cache or os.environ["AIR_CACHE_DIR"], "objects")
    listed = time.perf_counter() - t
    dl = DataLoader(ReadBytes(ds, system + (" (second)" if twin else "")), batch_size=32, collate_fn=sum, **kw)
    return dl, {"system": system + (" (second)" if twin else ""), "workers": dl.num_workers, "list_s": round(listed, 3), "files": n}, copies


def copies_of(folder):  # a cache's copies, in order, not its saved listing nor hidden files
    return sorted(os.path.join(d, f) for d, _, names in os.walk(folder) for f in names if not f.startswith("."))


def rewrite(path):  # the same bytes in new pages, put in place by a rename
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".rewrite")
    shutil.copyfile(path, tmp)
    os.chmod(tmp, os.stat(path).st_mode)
    os.replace(tmp, path)


def epoch(dl, out):
    t = time.perf_counter()
    out["MB"] = sum(dl) / 1e6
    return time.perf_counter() - t


systems = [twins[0], twins[0] + " (second)"] if twins else ["databricks-sdk-air", "air_core.torch"]
systems = systems[:: 1 if first in ("reference", "first") else -1]
made = {name: loader(name) for name in systems}
cold, seconds = {}, {name: [] for name in systems}
# Both loaders' workers start before either's cold epoch. Workers started after the other loader's cold epoch
# (its ~300 MB of copies written) read their warm epochs slower here, whichever loader they serve: the consumer's
# reads cost the second loader's workers 2-10 ms an epoch more (of 71-92), and its warm ratio moved by ~4% with
# the order; with both started first, the reads cost either loader's alike (probes, 4 processes each). A pass
# that reads one file a worker starts them, and its time counts in the cold epoch's.
started = {name: epoch(*made[name][:2]) for name in systems}
for name in systems:
    cold[name] = started[name] + epoch(*made[name][:2])
    settle()
# Here copies written earlier read slower, whoever wrote them (the same 2,000 files copied by sendfile into two
# folders one after the other, then read in turns: 1.30-1.36x for the first; copied file by file into both in
# turn: 1.00x), and the loaders write theirs at different paces. Files also read faster in the order they were
# written than in another (~6% here, one process): the reference's cold epoch writes its copies in the order it
# reads them, ours as its reads ahead complete. So before the warm epochs every copy of both caches is written
# again, each cache's in the order its loader read them, the two caches' k-th copies one after the other: the
# warm epochs read copies of one age, laid out alike.
held = [read_order(name) for name in systems]
for name, order in zip(systems, held):
    assert sorted(order) == copies_of(made[name][2]), name  # every copy, each once
assert len(set(map(len, held))) == 1, [len(h) for h in held]
for both in zip(*held):
    for path in both:
        rewrite(path)
settle()
for k in range(warm):
    for name in systems[:: 1 if k % 2 == 0 else -1]:
        seconds[name].append(epoch(*made[name][:2]))
pair = []
for name in sorted(systems, key=systems.index if twins else ("databricks-sdk-air", "air_core.torch").index):
    out, n = made[name][1], made[name][1]["files"]
    for which, dt in (("cold", cold[name]), ("warm", statistics.median(seconds[name]))):
        out[which + "_s"] = round(dt, 3)
        out["files_per_s_" + which] = round(n / dt, 1)
    out["warm_epochs_s"] = [round(s, 4) for s in seconds[name]]
    pair.append(out)
a, b = (twins[0], twins[0] + " (second)") if twins else ("databricks-sdk-air", "air_core.torch")
ratios = [r / o for r, o in zip(seconds[a], seconds[b])]  # a twin's: > 1 where the one filled first is slower
shutil.rmtree(ORDERS)
print(json.dumps({"pair": pair, "first": first, "cold_ratio": cold[a] / cold[b],
                  "warm_ratios": [round(x, 3) for x in ratios]}))
"""


BREAKDOWN = r"""
import json, os, sys, time
from databricks.air.data import UCVolumeDataset as Reference
from air_core.io.cache import _entry_paths
from air_core import FileStream
from air_core.io.files import chunked, read_items
from air_core.torch import UCVolumeDataset

nested, flat = sys.argv[1], sys.argv[2]
ours, ref = UCVolumeDataset(nested), Reference(flat)
list(ours), list(ref)  # cold: fill both caches
stream = ours._stream
m, cache = stream.manifest, stream.cache
items = list(range(len(m)))
rows = [(f"{m.root}/{p}", s, t) for p, s, t in m.rows(items)]
names = [_entry_paths(cache._objects, v, s, t, None)[1] for v, s, t in rows]
worker = FileStream(nested, worker=0, num_workers=6)  # a DataLoader worker's share, its pass set up each time
worker_files = len(worker.items())


def per_item(steps, passes=41):  # each step's least of `passes` rounds, every round running every step once
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(passes):
        for name, fn in steps.items():
            best[name] = min(best[name], _timed(fn))
    return {name: round(t * 1e6 / (worker_files if "worker" in name else len(items)), 2) for name, t in best.items()}


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
    "decode rows (up to 512 at a time), as a first epoch does": lambda: [m.rows(c) for c in chunked(items)],
    "volume rows, remembered from an earlier epoch": lambda: [m.volume_rows(c) for c in chunked(items)],
    "entry path (remembered)": lambda: [_entry_paths(cache._objects, v, s, t, None) for v, s, t in rows],
    "stat of the copy (its path under the objects folder's descriptor, as the lookup makes it)":
        lambda: [os.stat(name, dir_fd=cache._objects_fd) for name in names],
    "Cache.lookup_run (path, stat, length check, count)": lambda: cache.lookup_run(rows),
    "read_items": lambda: drain(read_items(m, items, cache)),
    "FileStream pass": lambda: drain(stream),
    "UCVolumeDataset pass": lambda: drain(ours),
    "FileStream pass of one worker of 6 (its first lookups in it; its plan kept from its first pass)": lambda: drain(worker),
    "reference UCVolumeDataset pass": lambda: drain(ref),
    "batch of 32 collated and pickled across, untagged": plain_batches,
    "the same with the resume position tagged on": tagged_batches,
}


# In a DataLoader worker each copy's read pushes what the pass touched out of the CPU's caches, so a pass's own
# steps cost more there than in the loops above, and a layout's share shows only there (the stat of a copy in 256
# folders under names of 54 characters cost 0.5-0.7 us more than in 16 under 31 there; in the loops above, no more).
# So: each loader's pass as DataLoader worker 0 of 6, each copy read as it comes, its own time alone.
import statistics
import torch.utils.data


class Worker0:  # what get_worker_info says in the first of 6 DataLoader workers
    id, num_workers = 0, 6


def as_worker_0(dataset, passes):  # seconds an item of each pass, made as worker 0 of 6
    real, torch.utils.data.get_worker_info = torch.utils.data.get_worker_info, lambda: Worker0
    try:
        return [reading(dataset) for _ in range(passes)]
    finally:
        torch.utils.data.get_worker_info = real


def reading(dataset):  # seconds an item in the pass itself, each path's copy read (untimed) as it comes
    spent, n, it, clock = 0.0, 0, iter(dataset), time.perf_counter
    while True:
        t = clock()
        path = next(it, None)
        spent += clock() - t
        if path is None:
            return spent / n
        with open(path, "rb") as f:
            f.read()
        n += 1


worker_ours, worker_ref = UCVolumeDataset(nested), Reference(flat)
worker_ref._fs_layer = ref._fs_layer  # the reference's cache is its layer's: share the one filled above
cold = {"UCVolumeDataset": [], "reference UCVolumeDataset": []}
for dataset in (worker_ours, worker_ref):
    as_worker_0(dataset, 1)  # its worker's plan made
for k in range(4):  # in turns, each first as often
    for name, dataset in (("UCVolumeDataset", worker_ours), ("reference UCVolumeDataset", worker_ref))[::(-1) ** k]:
        cold[name] += as_worker_0(dataset, 10)
steps_read = {f"{name} pass of DataLoader worker 0 of 6, each copy read as it comes (median of 40 passes)":
              round(statistics.median(v) * 1e6, 2) for name, v in cold.items()}
print(json.dumps({"system": "warm item breakdown, us an item (least of 41 passes, one process)",
                  "files": len(items), **per_item(steps), **steps_read}))
"""


LOADER_CPU = r"""
import json, os, statistics, sys
from torch.utils.data import IterableDataset
import databricks.air.data as reference
import air_core.torch as ours

nested, flat, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Count(IterableDataset):  # takes each path and reads nothing: what is left is the loaders' own work
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        for _ in self.paths:
            yield 1


def cpu_ns(pid):  # time on a CPU, whatever the load: /proc/<pid>/schedstat's first field
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


made = {"reference, 6 workers": reference.DataLoader(Count(reference.UCVolumeDataset(flat)), batch_size=32,
                                                    collate_fn=sum, num_workers=6)}
for kw in ({}, {"num_workers": 6}):
    dl = ours.DataLoader(Count(ours.UCVolumeDataset(nested)), batch_size=32, collate_fn=sum, **kw)
    made[f"air_core.torch, {dl.num_workers} workers"] = dl
for dl in made.values():  # cold, then one warm epoch: every worker started and warm
    sum(dl), sum(dl)
spent = {name: ([], []) for name in made}
for _ in range(epochs):
    for name, dl in made.items():
        pids = [w.pid for w in dl._iterator._workers]
        workers, main = sum(map(cpu_ns, pids)), cpu_ns(os.getpid())
        n = sum(dl)
        spent[name][0].append((sum(map(cpu_ns, pids)) - workers) / n / 1e3)
        spent[name][1].append((cpu_ns(os.getpid()) - main) / n / 1e3)
out = {"system": f"loaders' own CPU per warm item, nothing read (us an item, median of {epochs} epochs in turns)"}
for name, (workers, main) in spent.items():
    out[f"{name}: in the workers"] = round(statistics.median(workers), 2)
    out[f"{name}: in the main process"] = round(statistics.median(main), 2)
print(json.dumps(out))
"""


def settle() -> None:
    """Let the disk finish writing (and discarding) what the last measurement's cache left, so each starts alike."""
    os.sync()
    time.sleep(3)


def twins(repeat: int, warm: int) -> list[dict]:
    """Each loader against a second one of its own kind (6 workers, a cache each), the first filled first: the
    median over processes of each one's warm ratio, first filled ÷ second (> 1: the first filled is slower)."""
    nested, flat = image_volume()
    results: list[dict] = []
    for kind in ("databricks-sdk-air", "air_core.torch"):
        ratios = []
        for _ in range(repeat):
            settle()
            run = measure(PAIRED, nested, flat, "6", str(warm), "first", kind)
            ratios.append(round(statistics.median(run["warm_ratios"]), 3))
        emit({"system": f"{kind} against itself: warm epochs of the one filled first ÷ the other's, 6 workers",
              "per_process": ratios, "median": statistics.median(ratios)}, results)
    return results


def main(repeat: int = 3, warm: int = 10) -> list[dict]:
    nested, flat = image_volume()
    results: list[dict] = []
    runs: dict[str, list[dict]] = {"default": [], "6": []}
    for k in range(repeat):
        for which in runs:  # each worker count goes first as often as second: the first to fill its cache is slower
            settle()
            run = measure(PAIRED, nested, flat, which, str(warm), ("reference", "ours")[k % 2])
            ref, ours = run["pair"]
            ours["paired_warm_ratios"] = run["warm_ratios"]
            ours["paired_warm_ratio"] = round(statistics.median(run["warm_ratios"]), 3)
            ours["paired_cold_ratio"] = round(run["cold_ratio"], 3)
            ours["went_first"] = run["first"] == "ours"
            emit(ref, results)
            emit(ours, results)
            runs[which].append(ours)
    refs = [r for r in results if r["system"] == "databricks-sdk-air"]
    summary = {"system": "ratio air_core.torch / databricks-sdk-air (6 workers), median over runs of each run's "
                         "ratio (warm: the median of its paired epochs)", "repeat": repeat,
               "workers_default": runs["default"][0]["workers"], "warm_epochs": warm, "paired": True}
    for epoch in ("cold", "warm"):
        summary[f"reference_files_per_s_{epoch}"] = statistics.median(r[f"files_per_s_{epoch}"] for r in refs)
        for which, ours in runs.items():
            summary[f"{epoch}_{which}_workers"] = round(statistics.median(r[f"paired_{epoch}_ratio"] for r in ours), 2)
    emit(summary, results)
    emit(measure(BREAKDOWN, nested, flat), results)
    emit(measure(LOADER_CPU, nested, flat, "15"), results)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=4,
                        help="processes per worker count of ours, half with each loader first (even)")
    parser.add_argument("--warm", type=int, default=10,
                        help="warm epochs of each loader per process, in turns (even: each goes first as often)")
    parser.add_argument("--breakdown", action="store_true", help="where a warm item's time goes (both measurements), then exit")
    parser.add_argument("--twins", action="store_true",
                        help="each loader against a second of its own kind instead: does the one filled first lag?")
    args = parser.parse_args()
    if args.breakdown:
        print(json.dumps(measure(BREAKDOWN, *image_volume())))
        print(json.dumps(measure(LOADER_CPU, *image_volume(), "15")))
    elif args.twins:
        twins(args.repeat, args.warm)
    else:
        main(args.repeat, args.warm)
