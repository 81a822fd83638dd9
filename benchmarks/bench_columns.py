"""Parquet column projections: `columns=["text"]` of a wide table through uc-volume beside HF's `parquet` builder and
Ray's `read_parquet`, under netvol.

Two cases, each one Parquet file under the emulated volume (NETVOL_OPEN_MS=10, NETVOL_MBPS=200): `wide`, 2,000
rows of a 20 KB incompressible binary `image`, a short `text` and an `id`, in row groups of 200 (40 MB), and
`wide10`, the same ten times larger (20,000 rows, 400 MB). `--scale` multiplies the rows of both.

Each measurement runs in a fresh process with netvol preloaded, an empty node cache and HF cache, and a trace
of the bytes it read from the volume (NETVOL_TRACE_BYTES=1), over two passes (the second on a warm node cache),
timed from `load_dataset` (or Ray's read) on, with torch, `datasets` and `air_hf` imported before, as a training
script has them:

- uc-volume: `load_dataset("uc-volume", data_dir=..., columns=["text"], streaming=True)`, iterated row by row;
- hf-parquet: `load_dataset("parquet", data_files=..., columns=["text"], streaming=True)`, the same;
- air_ray-read_uc_volume: `read_uc_volume(folder, columns=["text"])`, `iter_batches`;
- ray-read_parquet: `ray.data.read_parquet(folder).select_columns(["text"])` (Ray 2.60's spelling of
  `columns=`, pushed down into the read), `iter_batches`;
- uc-volume-all: uc-volume with every column, the read that projections must leave as fast as it was:
  with `--before REV` also on REV's code, the two taking turns (`uc-volume-all@before`).

Every reader counts the rows and the sum of the ids each row's text starts with, so "complete" means every row
once. uc-volume, hf-parquet and the uc-volume-all pair run `--rounds` times (default 3), taking turns; each
counts by its median round. A summary line per case sets the targets beside the figures: bytes from the
volume <= 1.5x HF's builder's; rows/s >= each peer's (HF's builder and Ray's `read_parquet`); every column no
slower than before (the median of the rounds' ratios, when `--before` is given).

    python benchmarks/bench_columns.py [--root /tmp/air-bench-columns] [--scale 1] [--cases wide,wide10]
                                       [--rounds 3] [--before REV] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import nullcontext
from statistics import median

from common import checked_out, short_sha
from ranks import EPOCHS, cleanup, emit, one_process, prepare, ray_executions, trace_bytes

VOLUME = "/Volumes/main/bench/columns"
CASES = {"wide": 2_000, "wide10": 20_000}  # rows; row groups of 200, a 20 KB image a row
IMAGE, GROUP = 20_000, 200
SYSTEMS = ("uc-volume", "hf-parquet", "air_ray-read_uc_volume", "ray-read_parquet", "uc-volume-all")
ROUNDED = ("uc-volume", "hf-parquet")
TARGETS = {"bytes_vs_hf": 1.5, "vs_peers": 1.0, "all_vs_before": 1.0}


def build_data(local: str, scale: float) -> dict:
    """One Parquet file a case under `local/<case>/`, kept from an earlier run at the same scale."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    info: dict = {"scale": scale}
    for case, rows in CASES.items():
        rows = max(GROUP, int(rows * scale))
        path = f"{local}/{case}/part-0.parquet"
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            rng = np.random.default_rng(0)
            with pq.ParquetWriter(path + ".tmp", pa.schema([("id", pa.int64()), ("text", pa.string()),
                                                             ("image", pa.binary())])) as w:
                for start in range(0, rows, GROUP):
                    ids = range(start, min(rows, start + GROUP))
                    w.write_table(pa.table({
                        "id": list(ids), "text": [f"{i} a caption of row {i}" for i in ids],
                        "image": [rng.bytes(IMAGE) for _ in ids]}), row_group_size=GROUP)
            os.replace(path + ".tmp", path)
        meta = pq.ParquetFile(path).metadata
        text = sum(meta.row_group(g).column(1).total_compressed_size for g in range(meta.num_row_groups))
        info[case] = {"rows": rows, "bytes": os.path.getsize(path), "text_chunk_bytes": text,
                      "row_groups": meta.num_row_groups}
    return info


def ids_of(texts) -> int:
    return sum(int(t.split(" ", 1)[0]) for t in texts)


def count_batch(batch) -> tuple[int, int]:
    return batch.num_rows, ids_of(batch.column("text").to_pylist())


def measure_hf(args) -> dict:
    """Two passes over the HF streaming dataset, row by row, in this process."""
    import datasets
    import torch  # noqa: F401  (a training script has it imported; a streaming load_dataset imports it)

    import air_hf  # noqa: F401  (registers uc-volume, imported at the top of a script: not timed)
    try:
        from air_core.io.held_open import close_idle
    except ImportError:  # a --before tree's code, which holds no file open
        def close_idle() -> None:
            pass

    columns = None if args.system.startswith("uc-volume-all") else ["text"]
    out = {"system": args.system, "case": args.case}
    before, opens = trace_bytes()
    datasets_ds = None
    for name in EPOCHS:
        t = time.perf_counter()
        if datasets_ds is None:
            if args.system.startswith("uc-volume"):
                datasets_ds = datasets.load_dataset("uc-volume", data_dir=f"{VOLUME}/{args.case}", split="train",
                                                    streaming=True, cache_dir=args.hf_cache, columns=columns)
            else:
                datasets_ds = datasets.load_dataset("parquet", data_files=f"{args.local}/{args.case}/*.parquet",
                                                    split="train", streaming=True, cache_dir=args.hf_cache,
                                                    columns=columns)
        rows = ids = 0
        for row in datasets_ds:
            rows += 1
            ids += int(row["text"].split(" ", 1)[0])
        dt = time.perf_counter() - t
        # netvol traces a file's bytes when it is closed: close what our reader holds open for its next read.
        close_idle()
        nbytes, n_opens = trace_bytes()
        out.update({f"{name}_s": round(dt, 3), f"{name}_rows": rows, f"{name}_id_sum": ids,
                    f"{name}_rows_s": round(rows / dt), f"{name}_bytes": nbytes - before,
                    f"{name}_opens": n_opens - opens})
        before, opens = nbytes, n_opens
    return out


def measure_ray(args) -> dict:
    import ray

    def make():
        if args.system == "air_ray-read_uc_volume":
            from air_ray import read_uc_volume

            return read_uc_volume(f"{VOLUME}/{args.case}", columns=["text"])
        return ray.data.read_parquet(f"{args.local}/{args.case}").select_columns(["text"])
    return ray_executions(make, count_batch, {"system": args.system, "case": args.case})


def measure(args, system: str, case: str, data: dict) -> dict:
    """One measurement in a process of its own; `...@before` runs on the `--before` tree's code."""
    run = "ray" if "ray" in system else "hf"
    env = args.env
    if system.endswith("@before"):
        args.env = {**env, "PYTHONPATH": str(args.before_tree)}
    try:
        r = one_process(args, run, system, case, data[case])
    finally:
        args.env = env
    r["first_bytes_vs_text"] = round(r["first_bytes"] / data[case]["text_chunk_bytes"], 2)
    return r


def summary(case: str, info: dict, got: dict[str, list[dict]]) -> dict:
    def pick(system: str) -> dict | None:
        runs = sorted(got.get(system, []), key=lambda r: r["first_rows_s"])
        return runs[(len(runs) - 1) // 2] if runs else None

    data = info[case]
    ours, hf = pick("uc-volume"), pick("hf-parquet")
    ray_ours, ray = pick("air_ray-read_uc_volume"), pick("ray-read_parquet")
    out = {"summary": f"Parquet projection, columns=['text'] of {data['rows']:,} rows with a 20 KB image column "
                      f"({data['bytes'] / 1e6:,.0f} MB, {data['row_groups']} row groups); netvol 10 ms / 200 MB/s",
           "case": case, "scale": info["scale"], "rows": data["rows"], "bytes": data["bytes"],
           "text_chunk_bytes": data["text_chunk_bytes"],
           "rounds": {s: [r["first_rows_s"] for r in got[s]] for s in got if len(got[s]) > 1},
           "targets": {"bytes_vs_hf": f"<= {TARGETS['bytes_vs_hf']}", "vs_hf": ">= 1", "vs_ray": ">= 1",
                       "all_vs_before": ">= 1 (spread straddling 1 counts)"}}
    complete = all(r[f"{e}_rows"] == data["rows"] and r[f"{e}_id_sum"] == data["rows"] * (data["rows"] - 1) // 2
                   for runs in got.values() for r in runs for e in EPOCHS)
    out["complete"] = complete
    if ours and hf:
        bytes_ratio = max(r["first_bytes"] for r in got["uc-volume"]) / max(1, min(r["first_bytes"]
                                                                                 for r in got["hf-parquet"]))
        out.update(rows_s=ours["first_rows_s"], hf_rows_s=hf["first_rows_s"],
                   volume_bytes=max(r["first_bytes"] for r in got["uc-volume"]), hf_volume_bytes=hf["first_bytes"],
                   second_bytes=max(r["second_bytes"] for r in got["uc-volume"]),
                   bytes_vs_hf=round(bytes_ratio, 2), bytes_ok=bytes_ratio <= TARGETS["bytes_vs_hf"],
                   vs_hf=round(median(a["first_rows_s"] / b["first_rows_s"]
                                      for a, b in zip(got["uc-volume"], got["hf-parquet"])), 2))
        out["vs_hf_ok"] = out["vs_hf"] >= TARGETS["vs_peers"]
    if ray_ours and ray:
        out.update(ray_ours_rows_s=ray_ours["first_rows_s"], ray_rows_s=ray["first_rows_s"],
                   ray_ours_volume_bytes=ray_ours["first_bytes"], ray_volume_bytes=ray["first_bytes"],
                   vs_ray=round(ray_ours["first_rows_s"] / ray["first_rows_s"], 2))
        out["vs_ray_ok"] = out["vs_ray"] >= TARGETS["vs_peers"]
    if "uc-volume-all@before" in got:
        ratios = [a["first_rows_s"] / b["first_rows_s"]
                  for a, b in zip(got["uc-volume-all"], got["uc-volume-all@before"])]
        out.update(all_rows_s=pick("uc-volume-all")["first_rows_s"],
                   all_before_rows_s=pick("uc-volume-all@before")["first_rows_s"],
                   all_vs_before=round(median(ratios), 2), all_vs_before_spread=[round(min(ratios), 2),
                                                                                   round(max(ratios), 2)],
                   before=info["before"])
        out["all_ok"] = out["all_vs_before_spread"][1] >= TARGETS["all_vs_before"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default="/tmp/air-bench-columns", help="work folder (data, caches, traces, netvol.so)")
    p.add_argument("--scale", type=float, default=1.0, help="rows: 1 is 2,000 and 20,000")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    p.add_argument("--rounds", type=int, default=3, help="runs of the systems taking turns; the summary takes medians")
    p.add_argument("--before", metavar="REV", help="also read every column on REV's code, in turns with this code's")
    p.add_argument("--keep", action="store_true", help="keep the data under --root for the next run")
    p.add_argument("--run", choices=["hf", "ray"], help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.local = f"{args.root}/Volumes{VOLUME[len('/Volumes'):]}"
    args.cache, args.hf_cache, args.script = f"{args.root}/cache", f"{args.root}/hf", __file__
    if args.run:
        print(json.dumps({"hf": measure_hf, "ray": measure_ray}[args.run](args)))
        return

    info = prepare(args, build_data)
    info["before"] = short_sha(args.before) if args.before else None
    try:
        with (checked_out(args.before) if args.before else nullcontext()) as tree:
            args.before_tree = tree
            rounded = [*ROUNDED, *(("uc-volume-all", "uc-volume-all@before") if tree else ())]
            once = [s for s in SYSTEMS if s not in rounded]
            for case in args.cases.split(","):
                got: dict[str, list[dict]] = {}
                for k in range(args.rounds):
                    for system in rounded[:: 1 if k % 2 == 0 else -1]:  # both orders
                        got.setdefault(system, []).append(emit({**measure(args, system, case, info), "round": k}))
                for system in once:
                    got.setdefault(system, []).append(emit({**measure(args, system, case, info), "round": 0}))
                emit(summary(case, info, got))
    finally:
        cleanup(args)


if __name__ == "__main__":
    main()
