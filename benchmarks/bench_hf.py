"""uc-volume beside Hugging Face's own imagefolder / parquet streaming, on the same data under netvol.

One run measures, each in a fresh process with netvol preloaded (NETVOL_OPEN_MS=10, NETVOL_MBPS=200):

- files: 2,000 JPEGs (~147 KiB, class folders), DataLoader(num_workers=2, batch_size=32), the consumer
  reading every file's bytes: setup seconds, first-epoch and second-epoch files/s, for uc-volume and
  for imagefolder (each file's bytes read by the consumer, decode off);
- parquet: 4 files of 8 row groups, rows/s of a first pass as Arrow batches and a second as Python
  batches (`ds.iter(batch_size=1000)`), for uc-volume (fresh cache) and `parquet`;
- 3 ranks over the 4 Parquet files: bytes read from the volume while iterating, counted from
  netvol's trace (NETVOL_TRACE_BYTES=1: the bytes each remote open read), as a multiple of the
  data's bytes; and the opens (a ranged read of some row groups is an open of its own).

The files and parquet measurements alternate between the systems --repeat times and the summary takes
each one's best, so that other work on the machine skews neither side. Prints one JSON line per
measurement, then a summary line with the ratios.

    python benchmarks/bench_hf.py [--root /tmp/air-bench-hf] [--files 2000] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import make_images, netvol

REPO = Path(__file__).resolve().parent.parent
VOLUME = "/Volumes/main/bench/vol"
PARQUET_FILES, ROW_GROUPS, GROUP_ROWS = 4, 8, 25_000


# -- measurements, each run in its own process ------------------------------------------

# HF's own imagefolder, streaming, through a torch DataLoader: the consumer reads each file's bytes (decode off).
IMAGEFOLDER = r"""
import json, sys, time
import datasets
from torch.utils.data import DataLoader


def read(rows):
    n = 0
    for row in rows:
        with open(row["image"]["path"], "rb") as f:
            n += len(f.read())
    return n


path, workers = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
ds = datasets.load_dataset("imagefolder", data_dir=path, split="train", streaming=True)
ds = ds.cast_column("image", datasets.Image(decode=False))
out = {"system": "hf-imagefolder-streaming", "workers": workers, "setup_s": round(time.perf_counter() - t, 3),
       "num_shards": ds.num_shards}
loader = DataLoader(ds, batch_size=32, num_workers=workers, collate_fn=read)
for epoch in ("cold", "warm"):
    t = time.perf_counter()
    nbytes = sum(loader)
    dt = time.perf_counter() - t
    out[f"{epoch}_s"], out[f"{epoch}_MBps"] = round(dt, 3), round(nbytes / dt / 1e6, 1)
print(json.dumps(out))
"""


def _read_local(rows) -> int:
    n = 0
    for r in rows:
        with open(r["local_path"], "rb") as f:
            n += len(f.read())
    return n


def _trace_opens() -> int:
    with open(os.environ["NETVOL_TRACE"]) as f:
        return sum(1 for line in f if line.startswith("open "))


def measure_files(args) -> dict:
    from torch.utils.data import DataLoader

    import air_hf  # noqa: F401
    from datasets import load_dataset

    t = time.perf_counter()
    ds = load_dataset("uc-volume", data_dir=f"{VOLUME}/images", split="train", streaming=True,
                      cache_dir=args.hf_cache, num_workers=args.workers)
    out = {"system": "uc-volume-files", "workers": args.workers, "setup_s": round(time.perf_counter() - t, 3),
           "num_shards": ds.num_shards, "setup_opens": _trace_opens()}
    loader = DataLoader(ds, batch_size=32, num_workers=args.workers, collate_fn=_read_local)
    for epoch, name in ((0, "cold"), (1, "warm")):
        ds.set_epoch(epoch)
        opens = _trace_opens()
        t = time.perf_counter()
        nbytes = sum(loader)
        dt = time.perf_counter() - t
        out.update({f"{name}_files_s": round(args.files / dt), f"{name}_MBps": round(nbytes / dt / 1e6, 1),
                    f"{name}_opens": _trace_opens() - opens})
    return out


def measure_parquet(args) -> dict:
    import datasets

    if args.system == "uc-volume":
        import air_hf  # noqa: F401

        t = time.perf_counter()
        ds = datasets.load_dataset("uc-volume", data_dir=f"{VOLUME}/table", split="train", streaming=True,
                                   cache_dir=args.hf_cache, num_workers=1)  # one consuming process
    else:
        files = sorted(glob.glob(f"{args.local}/table/*.parquet"))
        t = time.perf_counter()
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True,
                                   cache_dir=args.hf_cache)
    out = {"system": f"{args.system}-parquet", "setup_s": round(time.perf_counter() - t, 3),
           "num_shards": ds.num_shards}
    t = time.perf_counter()
    rows = sum(b.num_rows for b in ds.with_format("arrow").iter(batch_size=1000))
    out["arrow_rows_s"] = round(rows / (time.perf_counter() - t))
    t = time.perf_counter()
    rows = sum(len(b["id"]) for b in ds.iter(batch_size=1000))
    out["python_rows_s"] = round(rows / (time.perf_counter() - t))
    out["rows"] = rows
    return out


def measure_rank(args) -> dict:
    """One of 3 ranks (RANK / WORLD_SIZE set): set up, wait for the go, read every row of this rank."""
    import datasets
    from datasets.distributed import split_dataset_by_node

    if args.system == "uc-volume":
        import air_hf

        ds = air_hf.split_for_rank(datasets.load_dataset("uc-volume", data_dir=f"{VOLUME}/table", split="train",
                                                         streaming=True, cache_dir=args.hf_cache))
    else:
        files = sorted(glob.glob(f"{args.local}/table/*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True,
                                   cache_dir=args.hf_cache)
        ds = split_dataset_by_node(ds, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    Path(args.sync, f"ready{os.environ['RANK']}").touch()
    while not Path(args.sync, "go").exists():
        time.sleep(0.01)
    rows = sum(len(b["id"]) for b in ds.iter(batch_size=1000))
    return {"rank": int(os.environ["RANK"]), "rows": rows}


# -- the run ----------------------------------------------------------------------------------


def build_data(local: str, files: int) -> None:
    if len(glob.glob(f"{local}/images/*/*.jpg")) < files:
        make_images(local, files)
    if len(glob.glob(f"{local}/table/*.parquet")) < PARQUET_FILES:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        rng = np.random.default_rng(0)
        os.makedirs(f"{local}/table", exist_ok=True)
        n = ROW_GROUPS * GROUP_ROWS
        for k in range(PARQUET_FILES):
            ids = np.arange(k * n, (k + 1) * n)
            table = pa.table({"id": ids, "x": rng.normal(size=n),
                              "text": pa.array([f"row {i} of the benchmark table" for i in ids])})
            pq.write_table(table, f"{local}/table/part-{k}.parquet", row_group_size=GROUP_ROWS)


def child(args, *extra: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--root", args.root, "--files", str(args.files), "--workers",
           str(args.workers), "--repeat", str(args.repeat), *extra]
    return subprocess.Popen(cmd, env={**args.env, **(env or {})}, stdout=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"measurement failed ({proc.returncode}): {proc.args}")
    return json.loads(out.strip().splitlines()[-1])


def fresh(args) -> None:
    for d in (args.cache, args.hf_cache):
        shutil.rmtree(d, ignore_errors=True)
    Path(args.env["NETVOL_TRACE"]).write_text("")


def emit(line: dict) -> dict:
    line["load_avg_1m"] = round(os.getloadavg()[0], 2)  # other work on the machine skews files/s
    print(json.dumps(line), flush=True)
    return line


def ranks_bytes(args, system: str) -> dict:
    """3 ranks over the Parquet files: volume bytes read while iterating, from netvol's trace."""
    fresh(args)
    sync = Path(args.root, "sync")
    shutil.rmtree(sync, ignore_errors=True)
    sync.mkdir()
    procs = [child(args, "--run", "rank", "--system", system, "--sync", str(sync),
                   env={"RANK": str(r), "WORLD_SIZE": "3", "LOCAL_RANK": str(r)}) for r in range(3)]
    while len(list(sync.glob("ready*"))) < 3:
        if any(p.poll() for p in procs):
            raise SystemExit(f"a {system} rank failed during setup")
        time.sleep(0.01)
    lines = Path(args.env["NETVOL_TRACE"]).read_text().splitlines()
    (sync / "go").touch()
    rows = [result(p)["rows"] for p in procs]
    after = Path(args.env["NETVOL_TRACE"]).read_text().splitlines()[len(lines):]
    data = sum(os.path.getsize(p) for p in glob.glob(f"{args.local}/table/*.parquet"))
    read = sum(int(ln.rsplit(" ", 1)[1]) for ln in after if ln.startswith("read "))
    opened = [ln for ln in after if ln.startswith("open ")]
    return {"system": f"{system}-parquet-3-ranks", "rows_per_rank": rows,
            "setup_opens": sum(ln.startswith("open ") for ln in lines), "iteration_opens": len(opened),
            "volume_bytes_ratio": round(read / data, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default="/tmp/air-bench-hf", help="work folder (data, caches, netvol.so)")
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3, help="alternating runs per measurement; the best counts")
    p.add_argument("--skip-peers", action="store_true", help="measure uc-volume only")
    p.add_argument("--run", choices=["files", "parquet", "rank"], help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--sync", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.local = f"{args.root}/Volumes{VOLUME[len('/Volumes'):]}"
    args.cache, args.hf_cache = f"{args.root}/cache", f"{args.root}/hf"
    if args.run:
        import torch  # noqa: F401  (a training script has it imported; datasets imports it lazily)

        print(json.dumps({"files": measure_files, "parquet": measure_parquet, "rank": measure_rank}[args.run](args)))
        return

    os.makedirs(args.root, exist_ok=True)
    build_data(args.local, args.files)
    so = f"{args.root}/netvol.so"
    netvol.build(so)
    args.env = {**os.environ, "AIR_VOLUMES_ROOT": f"{args.root}/Volumes", "AIR_CACHE_DIR": args.cache,
                "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "LD_PRELOAD": so,
                "NETVOL_PREFIX": f"{args.root}/Volumes/", "NETVOL_OPEN_MS": "10", "NETVOL_MBPS": "200",
                "NETVOL_TRACE": f"{args.root}/trace", "NETVOL_TRACE_BYTES": "1"}
    systems = ("uc-volume",) if args.skip_peers else ("uc-volume", "hf")
    files, parquet = [], {name: [] for name in systems}
    for _ in range(args.repeat):
        fresh(args)
        files.append(emit(result(child(args, "--run", "files"))))
        for name in systems:
            fresh(args)
            parquet[name].append(emit(result(child(args, "--run", "parquet", "--system", name))))
    ranks = {name: emit(ranks_bytes(args, name)) for name in systems}

    def best(runs: list[dict], key: str) -> int:
        return max(r[key] for r in runs)

    summary = {
        "summary": f"uc-volume vs datasets' own loaders, same data, netvol 10 ms / 200 MB/s, best of {args.repeat}",
        "setup_s": min(r["setup_s"] for r in files), "cold_files_s": best(files, "cold_files_s"),
        "warm_files_s": best(files, "warm_files_s"),
        "cold_opens_per_file": max(r["cold_opens"] for r in files) / args.files,
        "warm_opens": max(r["warm_opens"] for r in files),
        "parquet_arrow_rows_s": best(parquet["uc-volume"], "arrow_rows_s"),
        "parquet_python_rows_s": best(parquet["uc-volume"], "python_rows_s"),
        "ranks_volume_bytes_ratio": ranks["uc-volume"]["volume_bytes_ratio"],
    }
    summary.update({"setup_ok": summary["setup_s"] <= 1.0, "cold_ok": summary["cold_files_s"] >= 2400,
                    "warm_ok": summary["warm_files_s"] >= 10000,
                    "ranks_bytes_ok": summary["ranks_volume_bytes_ratio"] <= 1.1})
    if not args.skip_peers:
        fresh(args)
        proc = subprocess.run([sys.executable, "-c", IMAGEFOLDER, f"{args.local}/images", str(args.workers)],
                              env=args.env, capture_output=True, text=True, check=True)
        native = json.loads(proc.stdout.strip().splitlines()[-1])
        native.update({k.replace("_s", "_files_s"): round(args.files / native[k]) for k in ("cold_s", "warm_s")})
        emit(native)
        hf = parquet["hf"]
        summary.update({
            "imagefolder_setup_s": native["setup_s"], "imagefolder_cold_files_s": native["cold_files_s"],
            "cold_vs_imagefolder": round(summary["cold_files_s"] / native["cold_files_s"], 1),
            "hf_parquet_arrow_rows_s": best(hf, "arrow_rows_s"), "hf_parquet_python_rows_s": best(hf, "python_rows_s"),
            "parquet_arrow_vs_hf": round(summary["parquet_arrow_rows_s"] / best(hf, "arrow_rows_s"), 2),
            "parquet_python_vs_hf": round(summary["parquet_python_rows_s"] / best(hf, "python_rows_s"), 2),
            "hf_ranks_volume_bytes_ratio": ranks["hf"]["volume_bytes_ratio"],
        })
        summary["parquet_ok"] = min(summary["parquet_arrow_vs_hf"], summary["parquet_python_vs_hf"]) >= 1
    emit(summary)


if __name__ == "__main__":
    main()
