"""Ray's noisiest figures, on this code and on an earlier revision's, in many processes taking turns.

A Ray execution of 2,000 files lasts under a second, and from one Ray
session to the next the same code's second execution with `include_bytes`
moves by up to 2x (Ray's object store and scheduling: its in-memory source,
which reads nothing, moves as much), so bench_ray's medians of 3 say little
about a change of a few percent. Here each tree runs `--processes` fresh
processes, the trees taking turns (which goes first alternates), each with its
own Ray session and empty cache. Each first streams bench_delta's export back
as bench_delta does (its Ray workers up but not yet reading: the clock runs from
`read_uc_volume` to the last batch of 8,192 rows, one execution), then warms up
as bench_ray warms up, then `--repeat` times: `read_uc_volume(include_bytes=True)`
over the images, two executions, and `read_uc_volume` over the Parquet table,
two executions. It prints every sample and the medians of each tree and their
ratio, and writes them to results/ray_before_after.json, shown in RESULTS.md.
The images, the table and netvol are bench_ray's (run it once first); the Delta
table is bench_delta's, made under --workdir on first use and exported there
by this tree's `export_delta` (both trees' exports are laid out alike: one
file of six row groups), read by both.

Usage: TMPDIR=/dev/shm python benchmarks/ray_before_after.py --rev REV [--processes 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_delta import COMMITS, EXPORT_PATH, MAKE, ROWS_PER_COMMIT
from common import REPO, checked_out, netvol_so, short_sha

HERE = Path(__file__).resolve().parent
FIGURES = {"delta_first": "the Delta export streamed back (as bench_delta), rows/s",
           "bytes_second": "include_bytes, second execution, files/s",
           "parquet_first": "Parquet, first execution, rows/s", "parquet_second": "Parquet, second execution, rows/s"}

ONE = r"""
import json, os, sys, time
import ray
from air_ray import read_uc_volume


def files_pass(ds):  # bench_ray's passes; not imported from it, whose common.py puts this tree on sys.path first
    n = 0
    for batch in ds.iter_batches(batch_size=32, batch_format="pyarrow"):
        n += batch.num_rows
        sum(len(b) for b in batch.column("bytes").to_pylist())
    return n, 0


def rows_pass(ds):
    return sum(b.num_rows for b in ds.iter_batches(batch_size=4096, batch_format="pyarrow")), 0


images, table, cache = "/Volumes/bench/ml/raw/images", "/Volumes/bench/ml/raw/table", os.environ["AIR_CACHE_DIR"]
ray.init(num_cpus=os.cpu_count(), object_store_memory=512 << 20, include_dashboard=False, log_to_driver=False)
ray.data.range(2).materialize()  # as bench_delta: workers up before the clock starts
t = time.perf_counter()
n = sum(b.num_rows for b in read_uc_volume(sys.argv[2]).iter_batches(batch_size=8192, batch_format="pyarrow"))
out = {"delta_first": [round(n / (time.perf_counter() - t))], "bytes_second": [], "parquet_first": [],
       "parquet_second": []}
for _ in range(2):  # as bench_ray: both readers imported in the workers, their first collections done
    files_pass(read_uc_volume(images, include_bytes=True, cache_dir=f"{cache}/warmup"))
    read_uc_volume("/Volumes/bench/ml/raw/warmup").materialize()


def rate(key, pass_, ds):
    t = time.perf_counter()
    ds = ds() if callable(ds) else ds
    n, _ = pass_(ds)
    out[key].append(round(n / (time.perf_counter() - t)))
    return ds


for r in range(int(sys.argv[1])):
    ds = read_uc_volume(images, include_bytes=True, cache_dir=f"{cache}/{r}-bytes")
    files_pass(ds)
    rate("bytes_second", files_pass, ds)
    ds = rate("parquet_first", rows_pass, lambda: read_uc_volume(table, cache_dir=f"{cache}/{r}-parquet"))
    rate("parquet_second", rows_pass, ds)
ray.shutdown()
print(json.dumps({"air_ray": __import__("air_ray").__file__, **out}))
"""


def delta_export(workdir: str) -> str:
    """The volume path of bench_delta's table exported under `workdir` (made and exported on first use)."""
    root = os.path.join(os.path.abspath(workdir), "Volumes")
    table = os.path.join(root, "bench", "ml", "raw", "delta", "reviews")
    env = {**os.environ, "PYTHONPATH": str(REPO), "AIR_VOLUMES_ROOT": root}
    if not os.path.isdir(os.path.join(table, "_delta_log")):
        subprocess.run([sys.executable, "-c", MAKE, table, str(COMMITS), str(ROWS_PER_COMMIT)], env=env, check=True,
                       capture_output=True)
    out = subprocess.run([sys.executable, "-c", EXPORT_PATH, table, "/Volumes/bench/ml/raw/delta-export"], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["path"]


def one_process(tree: Path, repeat: int, workdir: str, delta: str) -> dict[str, list[int]]:
    root = os.path.join(os.path.abspath(workdir), "Volumes")
    cache = tempfile.mkdtemp(prefix="air-ray-ab-")
    env = {**os.environ, "PYTHONPATH": str(tree), "LD_PRELOAD": netvol_so(), "NETVOL_PREFIX": root + "/",
           "NETVOL_OPEN_MS": "10", "NETVOL_MBPS": "200", "AIR_VOLUMES_ROOT": root, "AIR_CACHE_DIR": cache,
           "RAY_DATA_DISABLE_PROGRESS_BARS": "1", "RAY_DATA_LOG_LEVEL": "WARNING", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}
    try:
        # From the empty cache folder: `-c` puts the working folder first on sys.path, where a tree's air_core (this
        # one's, run from the repository's root) would shadow PYTHONPATH's.
        out = subprocess.run([sys.executable, "-c", ONE, str(repeat), delta], env=env, cwd=cache, capture_output=True,
                             text=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if out.returncode:
        raise SystemExit(f"{tree} failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not got.pop("air_ray").startswith(str(tree)):
        raise SystemExit(f"{tree}'s process imported another tree's air_ray")
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rev", required=True, help="the revision before the change")
    p.add_argument("--processes", type=int, default=4, help="processes per tree, the trees taking turns")
    p.add_argument("--repeat", type=int, default=3, help="pairs of executions per process")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "air-bench"), help="bench_ray's")
    args = p.parse_args()
    samples: dict[str, dict[str, list[int]]] = {side: {k: [] for k in FIGURES} for side in ("before", "after")}
    delta = delta_export(args.workdir)
    with checked_out(args.rev) as before:
        for k in range(args.processes):
            for side, tree in [("before", before), ("after", REPO)][:: 1 if k % 2 == 0 else -1]:
                got = one_process(tree, args.repeat, args.workdir, delta)
                print(json.dumps({"code": side, **got}), flush=True)
                for key, values in got.items():
                    samples[side][key] += values
    head = short_sha("HEAD")
    rows = [{"measure": what, "before": statistics.median(samples["before"][key]),
             "after": statistics.median(samples["after"][key]), "samples": len(samples["after"][key])}
            for key, what in FIGURES.items()]
    for r in rows:
        r["ratio"] = round(r["after"] / r["before"], 3)
        print(json.dumps(r))
    (HERE / "results" / "ray_before_after.json").write_text(json.dumps(
        {"command": f"python ray_before_after.py --rev {args.rev} --processes {args.processes} --repeat "
                    f"{args.repeat}", "before": args.rev, "after": head, "figures": rows,
         "samples": samples}, indent=1) + "\n")


if __name__ == "__main__":
    main()
