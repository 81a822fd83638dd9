"""Ray Data front door beside Ray's own readers, on the same data, under an emulated network volume.

    python benchmarks/bench_ray.py --netvol /tmp/netvol.so [--workdir /tmp/air-bench] [--repeat 3]

Builds (once, under --workdir) 2,000 JPEGs of ~147 KiB in class folders and
a hive-partitioned Parquet table, then re-runs itself with netvol
LD_PRELOADed (10 ms per open, 200 MB/s per open file by default) so the
driver and every Ray worker see a slow volume. In one Ray session, each
reader runs two executions (first, second), `--repeat` times, the readers
taking turns: `ray.data.read_binary_files` against
`read_uc_volume(include_bytes=True)` and against `read_uc_volume` rows whose
consumer opens `local_path` itself (files/s, every byte consumed),
`ray.data.read_parquet` against `read_uc_volume` in Parquet mode (rows/s).
Each of ours starts every repeat from an empty cache; the first execution's
time includes making the dataset (the listing). Before anything is timed,
every reader makes two passes over the images, so that the workers are in
the steady state of a cluster that has been up a while (see `measure`).
Three references: a bare 64-thread pool reading each file once (the
machine's ceiling under netvol); a datasource whose tasks make rows of the
same sizes from bytes already in memory (what Ray's object store and this
consumer cost with nothing to read); and `read_binary_files` over the same
files on local disk, which netvol does not slow (what Ray's own reader does
with no network in the way). Prints one JSON line per measurement, one
median per reader and execution, then one with the ratios of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from common import make_images

VOLUME = "/Volumes/bench/ml/raw"


def build_data(root: str, files: int, rows: int) -> None:
    """JPEG noise images (`common.make_images`) and a Parquet table."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = os.path.join(root, "bench", "ml", "raw")
    make_images(base, files)
    rng = np.random.default_rng(0)
    warmup = os.path.join(base, "warmup")
    os.makedirs(warmup, exist_ok=True)
    for k in range(4):
        pq.write_table(pa.table({"x": [k]}), os.path.join(warmup, f"w{k}.parquet"))
    table_dir = os.path.join(base, "table")
    if os.path.isdir(table_dir):
        return
    per_file = rows // 16
    for k in range(16):
        split = "train" if k < 12 else "test"
        d = os.path.join(table_dir, f"split={split}")
        os.makedirs(d, exist_ok=True)
        ids = np.arange(k * per_file, (k + 1) * per_file)
        t = pa.table({
            "id": ids,
            "label": (ids % 1000).astype("int32"),
            "score": rng.random(per_file),
            "text": pa.array([f"sample text {i:012d}" for i in ids]),
        })
        pq.write_table(t, os.path.join(d, f"part-{k:05d}.parquet"), row_group_size=per_file // 4)


def two_executions(name: str, unit: str, make, consume) -> list[dict]:
    """Make a dataset and pass over it twice; the first execution's time includes making it (the listing)."""
    out, ds = [], None
    for execution in (1, 2):
        t = time.perf_counter()
        ds = ds if ds is not None else make()
        n, nbytes = consume(ds)
        dt = time.perf_counter() - t
        out.append({"execution": execution, "system": name, unit: n, "s": round(dt, 3),
                    f"{unit}_per_s": round(n / dt, 1), "MBps": round(nbytes / dt / 1e6, 1)})
    return out


def files_pass(ds) -> tuple[int, int]:
    n = nbytes = 0
    for batch in ds.iter_batches(batch_size=32, batch_format="pyarrow"):
        n += batch.num_rows
        nbytes += sum(len(b) for b in batch.column("bytes").to_pylist())
    return n, nbytes


def local_files_pass(ds) -> tuple[int, int]:
    """Rows without bytes: the consumer opens each node-local cached copy itself."""
    n = nbytes = 0
    for batch in ds.iter_batches(batch_size=32, batch_format="pyarrow"):
        n += batch.num_rows
        for p in batch.column("local_path").to_pylist():
            with open(p, "rb") as f:
                nbytes += len(f.read())
    return n, nbytes


def rows_pass(ds) -> tuple[int, int]:
    n = nbytes = 0
    for batch in ds.iter_batches(batch_size=4096, batch_format="pyarrow"):
        n += batch.num_rows
        nbytes += batch.nbytes
    return n, nbytes


def in_memory_source(sizes: list[int], tasks: int):
    """A datasource whose read tasks make rows of these sizes from bytes already in memory.

    Nothing is read: one memcpy per row into an Arrow `binary` column, blocks
    of Ray's target size, then Ray's own work (the object store, the
    iterator) and the consumer's: what handing bytes over through Ray costs
    on this machine with nothing to read.
    """
    import numpy as np
    import pyarrow as pa
    from ray.data import DataContext
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class InMemory(Datasource):
        def estimate_inmemory_data_size(self) -> int:
            return sum(sizes)

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            limit = (data_context or DataContext.get_current()).target_max_block_size

            def task(part: list[int]):
                def read_in_memory():
                    payload = np.frombuffer(np.random.bytes(max(part)), dtype=np.uint8)
                    start = 0
                    while start < len(part):
                        end, held = start, 0
                        while end < len(part) and held < limit:
                            held += part[end]
                            end += 1
                        offsets = np.zeros(end - start + 1, dtype=np.int32)
                        np.cumsum(part[start:end], out=offsets[1:])
                        data = np.empty(int(offsets[-1]), dtype=np.uint8)
                        for k, n in enumerate(part[start:end]):
                            data[offsets[k]:offsets[k] + n] = payload[:n]
                        column = pa.Array.from_buffers(pa.binary(), end - start, [None, pa.py_buffer(offsets),
                                                                                  pa.py_buffer(data)])
                        yield pa.table({"bytes": column})
                        start = end
                return ReadTask(read_in_memory, BlockMetadata(num_rows=len(part), size_bytes=sum(part),
                                                              exec_stats=None, input_files=None))

            return [task([int(n) for n in p]) for p in np.array_split(sizes, tasks)]

    return InMemory()


def threadpool_pass(folder: str, threads: int = 64) -> tuple[int, int]:
    """The ceiling: every file read once on a bare thread pool, no framework."""
    paths = [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files]

    def read(p: str) -> int:
        with open(p, "rb") as f:
            return len(f.read())

    with ThreadPoolExecutor(threads) as pool:
        return len(paths), sum(pool.map(read, paths))


def measure(root: str, repeat: int) -> None:
    import ray

    from air_ray import read_uc_volume

    images, table = f"{VOLUME}/images", f"{VOLUME}/table"
    local_images = os.path.join(root, "bench", "ml", "raw", "images")
    local_table = os.path.join(root, "bench", "ml", "raw", "table")
    out = []

    def emit(row: dict) -> None:
        out.append(row)
        print(json.dumps(row), flush=True)

    t = time.perf_counter()
    n, nbytes = threadpool_pass(local_images)
    dt = time.perf_counter() - t
    emit({"execution": 1, "system": "threadpool-64 (ceiling)", "files": n, "s": round(dt, 3),
          "files_per_s": round(n / dt, 1), "MBps": round(nbytes / dt / 1e6, 1)})
    ray.init(num_cpus=os.cpu_count(), object_store_memory=512 << 20, include_dashboard=False,
             log_to_driver=False)
    # The same files through a path netvol does not slow: Ray's own reader with no network in the way.
    unslowed = os.path.join(os.path.dirname(root), "images-on-local-disk")
    if not os.path.islink(unslowed):
        os.symlink(local_images, unslowed)
    # Bring the workers to a steady state before anything is timed, as on a cluster that has
    # been up a while: both readers imported in them, the object store mapped into every
    # process, each fresh worker's first full garbage collections done (~0.1 s each here).
    # Ours warms up on a scratch cache, removed before the timed runs start from an empty one.
    cache = os.environ["AIR_CACHE_DIR"]
    local_warmup = os.path.join(root, "bench", "ml", "raw", "warmup")
    scratch = os.path.join(cache, "warmup")
    for _ in range(2):
        files_pass(ray.data.read_binary_files(unslowed + "/"))
        ray.data.read_parquet(local_warmup).materialize()
        files_pass(read_uc_volume(images, include_bytes=True, cache_dir=scratch))
        read_uc_volume(f"{VOLUME}/warmup").materialize()
    shutil.rmtree(scratch)
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(local_images) for f in fs]
    runs = [  # (system, unit, make(repeat), consume); ours get an empty cache of their own each repeat
        ("ray.read_binary_files", "files", lambda r: ray.data.read_binary_files(local_images), files_pass),
        ("in-memory bytes through Ray (nothing read)", "files",
         lambda r: ray.data.read_datasource(in_memory_source(sizes, os.cpu_count()), override_num_blocks=os.cpu_count()),
         files_pass),
        ("ray.read_binary_files, local disk, no netvol", "files",
         lambda r: ray.data.read_binary_files(unslowed + "/"), files_pass),
        ("air_ray.read_uc_volume files", "files",
         lambda r: read_uc_volume(images, include_bytes=True, cache_dir=f"{cache}/{r}-bytes"), files_pass),
        ("air_ray.read_uc_volume files, local_path rows", "files",
         lambda r: read_uc_volume(images, cache_dir=f"{cache}/{r}-paths"), local_files_pass),
        ("ray.read_parquet", "rows", lambda r: ray.data.read_parquet(local_table), rows_pass),
        ("air_ray.read_uc_volume parquet", "rows",
         lambda r: read_uc_volume(table, cache_dir=f"{cache}/{r}-parquet"), rows_pass),
    ]
    for r in range(repeat):  # the systems take turns, so load from other processes falls on each
        for name, unit, make, consume in runs:
            for row in two_executions(name, unit, lambda: make(r), consume):
                emit({**row, "repeat": r + 1})
    ray.shutdown()

    median = {}
    for name, unit, _, _ in runs:
        for execution in (1, 2):
            rates = [row[f"{unit}_per_s"] for row in out
                     if row["system"] == name and row["execution"] == execution and "repeat" in row]
            median[name, execution] = statistics.median(rates)
            emit({"execution": execution, "system": name, f"{unit}_per_s": median[name, execution],
                  "median_of": repeat, "runs": rates})
    print(json.dumps({
        "ratio": "air_ray / ray native, medians",
        "files_first": round(median["air_ray.read_uc_volume files", 1] / median["ray.read_binary_files", 1], 1),
        "files_second": round(median["air_ray.read_uc_volume files", 2] / median["ray.read_binary_files", 2], 1),
        "parquet_first": round(median["air_ray.read_uc_volume parquet", 1] / median["ray.read_parquet", 1], 2),
        "parquet_second": round(median["air_ray.read_uc_volume parquet", 2] / median["ray.read_parquet", 2], 2),
    }))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--netvol", help="netvol.so to LD_PRELOAD (build: python -m netvol OUT)")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "air-bench"),
                   help="where the data is built and kept (default: %(default)s)")
    p.add_argument("--files", type=int, default=2000, help="JPEG files (default: %(default)s)")
    p.add_argument("--rows", type=int, default=4_000_000, help="Parquet rows (default: %(default)s)")
    p.add_argument("--open-ms", default="10", help="netvol latency of each open (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=3,
                   help="first/second execution pairs per system, each from an empty cache; medians count "
                        "(default: %(default)s)")
    p.add_argument("--mbps", default="200", help="netvol bandwidth per open file (default: %(default)s)")
    args = p.parse_args()
    root = os.path.join(os.path.abspath(args.workdir), "Volumes")
    if os.environ.get("AIR_BENCH_CHILD"):
        measure(root, args.repeat)
        return
    if not args.netvol:
        p.error("--netvol is required: build it with `python -m netvol /tmp/netvol.so`")
    build_data(root, args.files, args.rows)
    cache = tempfile.mkdtemp(prefix="air-bench-cache-")
    env = {
        **os.environ, "AIR_BENCH_CHILD": "1", "LD_PRELOAD": os.path.abspath(args.netvol),
        "NETVOL_PREFIX": root + "/", "NETVOL_OPEN_MS": args.open_ms, "NETVOL_MBPS": args.mbps,
        "AIR_VOLUMES_ROOT": root, "AIR_CACHE_DIR": cache, "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
        "RAY_DATA_LOG_LEVEL": "WARNING", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
    }
    try:
        code = os.spawnve(os.P_WAIT, sys.executable, [sys.executable, *sys.argv], env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
