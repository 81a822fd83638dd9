"""Volumes over the Databricks Files API, against the test server: files mode, Parquet and a pack.

The server is `netvol/files_api.py` in a process of its own (so that its threads do not share this process's
interpreter lock), serving a local folder as `/Volumes` with 10 ms added to every request and 200 MB/s per
response body; the clients are the real `databricks-sdk` and this library's transport, through
`AIR_VOLUMES_TRANSPORT=files-api` and `DATABRICKS_HOST` / `DATABRICKS_TOKEN`. Every request is traced by the
server; bytes requested are the bodies of its file `GET`s, planning (footers, pack indexes) included.

- files mode, first epoch, files/s over N files of ~100 KiB (their listing known to the baselines, not to
  ours, which lists them itself: its files/s are given with the listing and after it): ours
  (`air_core.FileStream`, cache empty, each file's bytes read) vs
  mosaic's downloader pattern (one `WorkspaceClient().files.download(path)` per file, in turn, written to a
  local file, as mosaicml-streaming's `download_file` does for each shard) vs a 64-thread pool of the same
  `files.download`; ours' second epoch: requests (target 0). The SDK's import and configuration, once a
  process, are outside every timing;
- Parquet, 2 ranks (`air_core.RowStream(..., rank=r, world_size=2).tables()`), each with a node cache of
  its own, as on two nodes: bytes requested ÷ the tree's bytes (target <= 1.05), and a second epoch's
  requests (target 0);
- a pack of the files mode's folder (`air_core.pack`, shards of 32 MB and row groups of 1 MB at full size),
  2 ranks of `FileStream` the same way: bytes requested ÷ the pack's bytes (target <= 1.05), second epoch 0.

Prints a JSON line per measurement and a summary line with the targets and ratios.

    python benchmarks/bench_files_api.py                 # full size: 4,000 files (~400 MB), 15 Parquet files
                                                         # of ~32 MB (~480 MB); about 10 minutes, most
                                                         # of them the one-file-at-a-time baseline
    python benchmarks/bench_files_api.py --scale 0.02    # a check in seconds (200 files, 5 Parquet files
                                                         # of 8 MB)

The data is written under --root (default: a temp folder) and removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # netvol/, the test server, is the repository's, not an installed package

VOLUME = "/Volumes/bench/ml/raw"
FILES, FILE_BYTES = 4000, 100 << 10
# An odd number of Parquet files: the 2 ranks split one of them, by its row groups.
PARQUET_FILES, PARQUET_FILE_BYTES, ROW_GROUP_BYTES = 15, 32 << 20, 1 << 20
SHARD_BYTES = 32 << 20
LATENCY_S, MBPS, POOL = 0.010, 200, 64
WORLD = 2
TARGETS = {"bytes": 1.05, "second_requests": 0}


# -- the server, in a process of its own -------------------------------------------------------------------

def _serve(root: str, conn) -> None:
    from netvol.files_api import FilesApiServer

    server = FilesApiServer(root).start()
    server.faults.latency_s, server.faults.mbps = LATENCY_S, MBPS
    conn.send((server.host, server.token))
    while True:
        command = conn.recv()
        if command == "stop":
            server.stop()
            conn.send(None)
            return
        gets = server.requests("GET", "files")
        conn.send({"requests": len(server.trace), "gets": len(gets), "bytes": sum(r.sent for r in gets)})
        if command == "take":
            server.clear_trace()


class Server:
    """The test server's process: `take()` is what it served since the last `take()`, then forgets it."""

    def __init__(self, root: str) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._proc = multiprocessing.get_context("spawn").Process(target=_serve, args=(root, child), daemon=True)
        self._proc.start()
        self.host, self.token = self._conn.recv()

    def take(self) -> dict:
        self._conn.send("take")
        return self._conn.recv()

    def stop(self) -> None:
        self._conn.send("stop")
        self._conn.recv()
        self._proc.join(10)


# -- the data ------------------------------------------------------------------------------------------------

def build_data(local: str, scale: float) -> dict:
    """The files, the Parquet tree, under `local` (the volume's folder); what they hold."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n_files = max(200, int(FILES * scale))
    for i in range(n_files):
        folder = f"{local}/files/class{i % 10}"
        os.makedirs(folder, exist_ok=True)
        size = int(FILE_BYTES * (0.5 + rng.random()))
        with open(f"{folder}/f{i:06d}.bin", "wb") as f:
            f.write(rng.bytes(size))
    # Small scales keep files of 8 MB: a footer is read as a file's last 64 KiB, by each rank.
    n_parquet = max(5, int(PARQUET_FILES * scale)) | 1
    file_bytes = max(8 << 20, int(PARQUET_FILE_BYTES * scale))
    group_bytes = min(ROW_GROUP_BYTES, file_bytes // 16)  # at least 16 row groups a file: ranks split files
    row_bytes = 1024
    os.makedirs(f"{local}/parquet", exist_ok=True)
    rows_total = 0
    for k in range(n_parquet):
        rows = file_bytes // row_bytes
        ids = np.arange(rows_total, rows_total + rows, dtype=np.int64)
        payload = pa.array([rng.bytes(row_bytes - 8) for _ in range(rows)], pa.binary())
        pq.write_table(pa.table({"id": ids, "payload": payload}), f"{local}/parquet/p{k:03d}.parquet",
                       row_group_size=max(1, group_bytes // row_bytes), compression="none")
        rows_total += rows
    return {"files": n_files, "parquet_files": n_parquet, "parquet_rows": rows_total,
            "shard_bytes": max(4 << 20, int(SHARD_BYTES * min(1.0, scale * 4))),
            "pack_row_group_bytes": max(256 << 10, int(ROW_GROUP_BYTES * min(1.0, scale * 4)))}


def folder_bytes(local: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(local) for f in names)


# -- the measurements ----------------------------------------------------------------------------------------

def emit(record: dict, results: list[dict]) -> None:
    results.append(record)
    print(json.dumps(record), flush=True)


def files_ours(server: Server, path: str, n: int, cache: str) -> list[dict]:
    import air_core

    from air_core.io import transport

    # The imports and the SDK's configuration, once a process: untimed, as the baselines' client is.
    FileStream = air_core.FileStream
    transport.remote(path)
    server.take()
    t = time.perf_counter()
    stream = FileStream(path, cache_dir=cache, fetch_threads=POOL)
    listed = time.perf_counter() - t
    got = sum(len(f.read_bytes()) for f in stream)
    first = time.perf_counter() - t
    served = server.take()
    stream.set_epoch(1)
    t = time.perf_counter()
    again = sum(1 for _ in stream)
    second = time.perf_counter() - t
    second_served = server.take()
    assert again == n, (again, n)
    return [{"case": "files", "system": "ours-FileStream", "epoch": 1, "files": n, "bytes": got,
             "seconds": round(first, 3), "files_s": round(n / first, 1), "list_seconds": round(listed, 3),
             "files_s_after_listing": round(n / (first - listed), 1), **served},
            {"case": "files", "system": "ours-FileStream", "epoch": 2, "files": n, "seconds": round(second, 3),
             "files_s": round(n / second, 1), **second_served}]


def files_sdk(server: Server, paths: list[str], out: str, threads: int) -> dict:
    from databricks.sdk import WorkspaceClient

    w = WorkspaceClient(host=server.host, token=server.token)
    os.makedirs(out, exist_ok=True)

    def download(k: int) -> int:
        data = w.files.download(paths[k]).contents.read()
        with open(f"{out}/{k}", "wb") as f:
            f.write(data)
        return len(data)

    server.take()
    t = time.perf_counter()
    if threads == 1:
        got = sum(download(k) for k in range(len(paths)))
    else:
        with ThreadPoolExecutor(threads) as pool:
            got = sum(pool.map(download, range(len(paths))))
    seconds = time.perf_counter() - t
    name = "mosaic-download-per-file" if threads == 1 else f"sdk-download-pool-{threads}"
    return {"case": "files", "system": name, "epoch": 1, "files": len(paths), "bytes": got,
            "seconds": round(seconds, 3), "files_s": round(len(paths) / seconds, 1), **server.take()}


def ranked(server: Server, case: str, epochs, needed: int) -> list[dict]:
    """Two ranks in turn, each on a node cache of its own: first epoch, then a second."""
    server.take()
    t = time.perf_counter()
    first = [epochs(rank, 0) for rank in range(WORLD)]
    seconds = time.perf_counter() - t
    served = server.take()
    second = [epochs(rank, 1) for rank in range(WORLD)]
    second_served = server.take()
    assert first == second, (first, second)
    return [{"case": case, "system": "ours", "epoch": 1, "ranks": WORLD, "items": sum(first),
             "seconds": round(seconds, 3), "needed_bytes": needed, **served,
             "bytes_ratio": round(served["bytes"] / needed, 4)},
            {"case": case, "system": "ours", "epoch": 2, "ranks": WORLD, "items": sum(second), **second_served}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=None, help="where the served folder is written (default: a temp folder)")
    p.add_argument("--scale", type=float, default=1.0, help="data size as a fraction of the full size")
    p.add_argument("--keep", action="store_true", help="keep the data")
    args = p.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="air-bench-files-api-")
    local = f"{root}/volumes/bench/ml/raw"
    caches = f"{root}/caches"
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(local)
    data = build_data(local, args.scale)

    import air_core

    os.environ.pop("AIR_VOLUMES_ROOT", None)
    with_fuse = {"AIR_VOLUMES_TRANSPORT": "fuse", "AIR_VOLUMES_ROOT": f"{root}/volumes"}
    os.environ.update(with_fuse)  # packed where the folder is mounted, then read over the Files API
    air_core.pack(f"{VOLUME}/files", f"{VOLUME}/packed", shard_size=data["shard_bytes"],
                  row_group_size=data["pack_row_group_bytes"])
    for k in with_fuse:
        del os.environ[k]

    server = Server(f"{root}/volumes")
    os.environ.update({"DATABRICKS_HOST": server.host, "DATABRICKS_TOKEN": server.token,
                       "DATABRICKS_CONFIG_FILE": f"{root}/no-databrickscfg", "AIR_VOLUMES_TRANSPORT": "files-api"})
    results: list[dict] = []
    try:
        n = data["files"]
        paths = sorted(f"{VOLUME}/{os.path.relpath(os.path.join(d, f), local)}"
                       for d, _, names in os.walk(f"{local}/files") for f in names)
        for r in files_ours(server, f"{VOLUME}/files", n, f"{caches}/files"):
            emit(r, results)
        emit(files_sdk(server, paths, f"{root}/mosaic", 1), results)
        emit(files_sdk(server, paths, f"{root}/pool", POOL), results)

        streams = {}

        def parquet_epoch(rank: int, epoch: int) -> int:
            if rank not in streams:
                streams[rank] = air_core.RowStream(f"{VOLUME}/parquet", rank=rank, world_size=WORLD,
                                                   cache_dir=f"{caches}/parquet-{rank}")
            streams[rank].set_epoch(epoch)
            return sum(t.num_rows for t in streams[rank].tables())

        for r in ranked(server, "parquet", parquet_epoch, folder_bytes(f"{local}/parquet")):
            emit(r, results)
        packs = {}

        def pack_epoch(rank: int, epoch: int) -> int:
            if rank not in packs:
                packs[rank] = air_core.FileStream(f"{VOLUME}/packed", rank=rank, world_size=WORLD,
                                                  cache_dir=f"{caches}/pack-{rank}")
            packs[rank].set_epoch(epoch)
            return sum(1 for f in packs[rank] if f.read_bytes() is not None)

        for r in ranked(server, "pack", pack_epoch, folder_bytes(f"{local}/packed")):
            emit(r, results)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    def one(case: str, system: str, epoch: int) -> dict:
        return next(r for r in results if (r["case"], r["system"], r["epoch"]) == (case, system, epoch))

    ours, mosaic, pool = (one("files", s, 1) for s in ("ours-FileStream", "mosaic-download-per-file",
                                                          f"sdk-download-pool-{POOL}"))
    parquet, pack = one("parquet", "ours", 1), one("pack", "ours", 1)
    seconds = [one("files", "ours-FileStream", 2), one("parquet", "ours", 2), one("pack", "ours", 2)]
    summary = {
        "summary": "files_api", "scale": args.scale, "latency_ms": LATENCY_S * 1000, "mbps": MBPS,
        "files_s": {"ours": ours["files_s"], "ours_after_listing": ours["files_s_after_listing"],
                    "mosaic": mosaic["files_s"], "pool": pool["files_s"]},
        "ours_vs_mosaic": round(ours["files_s"] / mosaic["files_s"], 2),
        "ours_vs_pool": round(ours["files_s"] / pool["files_s"], 2),
        "parquet_bytes_ratio": parquet["bytes_ratio"], "pack_bytes_ratio": pack["bytes_ratio"],
        "bytes_target": TARGETS["bytes"],
        "bytes_ok": parquet["bytes_ratio"] <= TARGETS["bytes"] and pack["bytes_ratio"] <= TARGETS["bytes"],
        "second_epoch_requests": [r["requests"] for r in seconds],
        "second_ok": all(r["requests"] == TARGETS["second_requests"] for r in seconds),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
