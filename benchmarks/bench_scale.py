"""The core at 10^5-10^7 files: listing, planning, resume, time to first item and memory per process.

Each figure is measured in a fresh process, for this tree's code and for an
earlier revision's (`--old`, checked out into a temporary worktree) where it
finishes in reasonable time. Listings for planning and memory are synthetic
(names `d00012/f00012345.jpg`, sizes log-normal around 150 KB); listing
itself is timed on a real tree of one-byte files under the emulated volume
(20 ms per folder listing), and so is the front doors' setup over that tree:
`load_dataset("uc-volume", streaming=True)`, and `UCVolumeDatasource(...)`
with its read tasks.

Memory is PSS (`/proc/PID/smaps_rollup`): pages shared by a node's processes,
such as a memory-mapped listing, count once, split among them.

Usage: python benchmarks/bench_scale.py [--sizes 100000,1000000,10000000] [--tree 1000000] [--old REV]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, NETVOL, VOLUME, checked_out, emit, netvol_so

ROOT = f"{VOLUME}/scale"
GRID = {"world_size": 8, "num_workers": 6}

# Runs in the measured process: build the synthetic listing the code under test understands.
SYNTHETIC = r'''
import numpy as np, air_core
from air_core.manifest import Manifest

def synthetic(n, root):
    i = np.arange(n, dtype=np.int64)
    width = 21  # "d00012/f00012345.jpg\0"
    raw = np.zeros((n, width), dtype=np.uint8)
    raw[:, 0], raw[:, 6], raw[:, 7] = ord("d"), ord("/"), ord("f")
    raw[:, 16:20] = np.frombuffer(b".jpg", dtype=np.uint8)
    for k, d in enumerate(range(4, -1, -1)):
        raw[:, 1 + k] = ord("0") + (i // 1000 // 10**d) % 10
    for k, d in enumerate(range(7, -1, -1)):
        raw[:, 8 + k] = ord("0") + (i // 10**d) % 10
    rng = np.random.default_rng(0)
    sizes = rng.lognormal(np.log(150_000), 0.5, n).astype(np.int64) + 1
    mtimes = np.full(n, 1_700_000_000 * 10**9, dtype=np.int64) + i
    if hasattr(Manifest, "from_rows"):
        offsets = np.arange(n + 1, dtype=np.int64) * width
        return Manifest(root, raw.reshape(-1), offsets, sizes, mtimes)
    names = raw[:, :20].tobytes().decode()
    return Manifest.build(root, ((names[k * 20:(k + 1) * 20], int(sizes[k]), int(mtimes[k])) for k in range(n)))
'''

PLAN = SYNTHETIC + r'''
import sys, time, json, resource
from air_core import FileStream
n, root = int(sys.argv[1]), sys.argv[2]
m = synthetic(n, root)
times = []
for epoch in range(2):
    s = FileStream(root, manifest=m, rank=3, world_size=8, worker=2, num_workers=6, shuffle=True, equalize="pad")
    s.set_epoch(epoch)
    t = time.perf_counter(); items = s.items(); times.append(time.perf_counter() - t)
print(json.dumps({"plan_s": min(times), "items": len(items),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''

RESUME = SYNTHETIC + r'''
import sys, time, json, random
import numpy as np
from air_core.grid import Grid
from air_core.planning import resume
from air_core.planning.shares import Planning
n, root = int(sys.argv[1]), sys.argv[2]
m = synthetic(n, root)
opts = dict(seed=0, shuffle=True, balance="bytes", equalize="none")
key = "options" if "options" in resume.__doc__ else "plan"
rnd = random.Random(0)

def run(grid, before):
    w, nw = grid
    streams = []
    for r in range(w):
        for k in range(nw):
            mine = resume.plan_resume(m.sizes, Grid(r, w, k, nw), before, planning=Planning(**opts), epoch=0)
            streams.append({"grid": [r, w, k, nw], "consumed": rnd.randrange(len(mine) // 2 + 1)})
    return {"version": resume.VERSION, "epoch": 0, "fingerprint": m.fingerprint, key: opts,
            "resumed_from": before, "streams": streams}

first = run((8, 6), None)
second = run((4, 3), first)  # resumed on another grid
t = time.perf_counter()
items = resume.plan_resume(m.sizes, Grid(1, 2, 1, 2), second, planning=Planning(**opts), epoch=0)  # and resumed again
print(json.dumps({"resume_s": time.perf_counter() - t, "items": len(items)}))
'''

LOADER = SYNTHETIC + r'''
import os, sys, time, json
import torch.utils.data
from air_core import FileStream
from air_core.manifest import Manifest

def pss_mb(pid, field="Pss"):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":")) / 1024

class Paths(torch.utils.data.IterableDataset):
    def __init__(self, stream):
        self.stream = stream
    def __iter__(self):
        for f in self.stream:
            yield f.path

class Idle(torch.utils.data.IterableDataset):
    def __iter__(self):
        while True:
            yield 0

def first_item(dataset):
    loader = torch.utils.data.DataLoader(dataset, num_workers=6, batch_size=None)
    t = time.perf_counter()
    it = iter(loader)
    next(it)
    took = time.perf_counter() - t
    time.sleep(1)  # let every worker reach its first item
    workers = [pss_mb(w.pid) for w in it._workers]
    first_item.anon = [pss_mb(w.pid, "Pss_Anon") for w in it._workers]
    return took, workers, it

n, root, listing = int(sys.argv[1]), sys.argv[2], sys.argv[3]
_, idle, keep = first_item(Idle())
idle_worker = max(idle)
del keep
base = pss_mb(os.getpid())
m = Manifest.load(listing)  # as every rank but the lister finds it
stream = FileStream(root, manifest=m, rank=0, world_size=8, shuffle=True, equalize="pad")
took, workers, it = first_item(Paths(stream))
print(json.dumps({"first_item_s": took, "parent_pss_mb": pss_mb(os.getpid()), "parent_before_mb": base,
                  "worker_pss_mb": workers, "idle_worker_pss_mb": idle_worker,
                  "worker_over_idle_mb": max(workers) - idle_worker, "worker_anon_mb": first_item.anon}))
'''

SAVE = SYNTHETIC + r'''
import os, sys, json, time
from air_core import FileStream
from air_core.io import volume
n, root, file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
m = synthetic(n, root)
t = time.perf_counter()
m.save(file)
took = time.perf_counter() - t
local = volume.parse(root).local
for w in range(6):  # make the first file of each of rank 0's workers real, for the loader's first items
    s = FileStream(root, manifest=m, rank=0, world_size=8, worker=w, num_workers=6, shuffle=True, equalize="pad")
    i = s.items()[0]
    p = f"{local}/{m.paths[i]}"
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.truncate(int(m.sizes[i]))
    os.utime(p, ns=(int(m.mtimes[i]), int(m.mtimes[i])))
print(json.dumps({"save_s": took}))
'''

LIST = r'''
import sys, time, json
try:
    from air_core import list_folder  # where earlier revisions export it
except ImportError:
    from air_core.io.listing import list_folder
t = time.perf_counter()
m = list_folder(sys.argv[1])
print(json.dumps({"list_s": time.perf_counter() - t, "files": len(m)}))
'''

# The front doors' setup over the real tree: datasets' streaming load, and Ray's datasource and read tasks.
DOORS = r'''
import json, os, sys, time
what, tree = sys.argv[1], sys.argv[2]

def pss_mb():
    with open("/proc/self/smaps_rollup") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("Pss:")) / 1024

if what == "hf":
    import datasets, air_hf
    import torch  # a training script has it imported; datasets' streaming load imports it otherwise (~2.5 s)
    t = time.perf_counter()
    ds = datasets.load_dataset("uc-volume", data_dir=tree, streaming=True, split="train")
    out = {"hf_setup_s": time.perf_counter() - t, "hf_pss_mb": pss_mb()}
else:
    import ray
    from air_ray import UCVolumeDatasource  # air_ray loads it on first use: its import (ray.data) is no setup
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    t = time.perf_counter()
    source = UCVolumeDatasource(tree)
    built = time.perf_counter() - t
    tasks = source.get_read_tasks(200)
    out = {"ray_construct_s": built, "ray_tasks_s": time.perf_counter() - t - built,
           "ray_setup_s": time.perf_counter() - t, "ray_pss_mb": pss_mb()}
print(json.dumps(out))
'''


# The measured tree's modules alone: an editable install's finder would lend a tree that lacks a module (an
# earlier revision's, which has no `air_core.io.listing` or `air_core.planning`) the installed checkout's, and
# that code would be timed as the earlier one's.
TREE_ONLY = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in str(f)]\n"


def run(code: str, tree: Path, *args: str, slow: bool = False, timeout: float = 1800) -> dict | None:
    env = {**os.environ, "PYTHONPATH": str(tree), "AIR_CACHE_DIR": tempfile.mkdtemp(prefix="air-scale-cache-"),
           "OMP_NUM_THREADS": "1"}
    if slow:
        env.update(NETVOL, NETVOL_OPEN_MS="0", NETVOL_MBPS="0", LD_PRELOAD=netvol_so())
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    try:
        out = subprocess.run([sys.executable, "-c", TREE_ONLY + code, *args], env=env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        shutil.rmtree(env["AIR_CACHE_DIR"], ignore_errors=True)
    if out.returncode:
        print(out.stderr[-3000:], file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_tree(files: int, per_folder: int = 1000) -> str:
    """A tree of `files` one-byte files, `per_folder` per folder, kept between runs."""
    path = f"{VOLUME}/scale-tree-{files}"
    done = Path(path) / ".complete"
    if not done.exists():
        shutil.rmtree(path, ignore_errors=True)
        for d in range(files // per_folder):
            folder = Path(path) / f"d{d:05d}"
            folder.mkdir(parents=True)
            for k in range(per_folder):
                (folder / f"f{k:05d}.bin").write_bytes(b"x")
        done.touch()
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="100000,1000000,10000000")
    p.add_argument("--tree", type=int, default=1_000_000, help="files in the real tree that is listed")
    p.add_argument("--old", default="429cf07", help="the revision to compare with")
    p.add_argument("--old-max", type=int, default=1_000_000, help="largest size the old code is run at")
    p.add_argument("--codes", default="new,old", help="which code to run: new, old or both")
    args = p.parse_args()
    results: list[dict] = []
    with checked_out(args.old) as old:
        try:
            tree = make_tree(args.tree)
            codes = [(c, w) for c, w in (("new", REPO), ("old", old)) if c in args.codes.split(",")]
            for code, where in codes:
                emit({"bench": "scale", "what": "list", "code": code, "files": args.tree,
                      **(run(LIST, where, tree, slow=True) or {})}, results)
            for code, where in codes:
                emit({"bench": "scale", "what": "doors", "code": code, "files": args.tree,
                      **(run(DOORS, where, "hf", tree, slow=True) or {}),
                      **(run(DOORS, where, "ray", tree, slow=True) or {})}, results)
            for n in map(int, args.sizes.split(",")):
                for code, where in codes:
                    if code == "old" and n > args.old_max:
                        continue
                    record = {"bench": "scale", "code": code, "files": n}
                    record.update(run(PLAN, where, str(n), ROOT) or {"plan_s": None})
                    record.update(run(RESUME, where, str(n), ROOT) or {"resume_s": None})
                    listing = os.path.join(tempfile.gettempdir(), f"air-scale-{code}-{n}.listing")
                    record.update(run(SAVE, where, str(n), ROOT, listing) or {})
                    record.update(run(LOADER, where, str(n), ROOT, listing) or {"first_item_s": None})
                    if os.path.exists(listing):
                        os.unlink(listing)
                    emit(record, results)
        finally:
            shutil.rmtree(Path(VOLUME) / "scale", ignore_errors=True)


if __name__ == "__main__":
    main()
