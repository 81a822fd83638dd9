"""JSON Lines through uc-volume beside HF's `json` builder, Ray's `read_json` and pyarrow's parser, under netvol.

Two cases, each its own data under the emulated volume (NETVOL_OPEN_MS=10, NETVOL_MBPS=200):
`big`, one JSON Lines file of 1 GB, and `many`, 64 files of 16 MB (`--scale` shrinks both: the
file, and each of the 64 files). Records are chat-like, a few hundred bytes to a few KB:
`{"id": int, "messages": [{"role": "user", "content": str}, {"role": "assistant", "content": str}],
"source": str}`, ids 0..N-1 over the case.

One run measures, each in fresh processes with netvol preloaded and a trace of the bytes read per
process (NETVOL_TRACE_BYTES=1, one trace file per rank):

- uc-volume, 2 ranks x 2 DataLoader workers: `load_dataset("uc-volume", data_dir=..., streaming=True,
  world_size=2, num_workers=2)` and `air_hf.split_for_rank(ds, rank=r, world_size=2)`, two rank
  processes sharing one fresh node cache, each through `DataLoader(ds, num_workers=2, batch_size=256)`
  whose collate counts the rows and sums their ids: a first epoch (the cache empty) and a second
  (`set_epoch(1)`, the cache warm);
- air_core-rows, the same 2 ranks x 2 workers through the core's own door for PyTorch:
  `air_core.torch.UCVolumeDataset(folder, mode="rows")` (rank and world size from RANK / WORLD_SIZE) in
  `air_core.torch.DataLoader(ds, num_workers=2, batch_size=256)`, the same collate;
- hf-json, the same 2 ranks x 2 workers: `load_dataset("json", data_files=..., streaming=True)` and
  `datasets.distributed.split_dataset_by_node` (with one file, every rank reads all of it);
- air_core-rowstream, the same 2 ranks x 2 workers through the core's own door: a DataLoader over
  `air_core.RowStream(folder, rank=r, world_size=2)`, each worker's stream yielding Arrow tables of 256
  rows (`batch_size=None`), the collate counting rows and summing ids as above: the door for consumers of
  Arrow, measured beside the targets, which are for rows;
- uc-volume-arrow and hf-json-arrow: the same 2 ranks, each reading its share in its own process as
  Arrow batches (`ds.with_format("arrow").iter(batch_size=4096)`), no DataLoader: what the readers
  deliver without `datasets`' one-row-at-a-time step;
- ray-read_json: `ray.data.read_json(folder)` in one process, `iter_batches`, two executions; and
  air_ray-read_uc_volume: `read_uc_volume(folder)` the same way, the second execution on a warm cache;
- pyarrow-parse: `pyarrow.json.read_json` of every file, no netvol: the parse ceiling.

Per system: rows/s per rank and in all (rows over the slowest rank's epoch), CPU µs a row (a rank's own
and its DataLoader workers', from getrusage), bytes read from the volume (setup, first epoch, second
epoch) as a multiple of the data's bytes, and whether the rows are complete (for the ranks: the counts
add to the records, and the ids' sum is 0+1+...+(N-1)). A summary line per case
sets the targets beside the figures, for uc-volume and air_core-rows: volume bytes across ranks (setup and
first epoch) <= 1.05x the data; first-epoch rows/s >= 2x hf-json's and >= 0.7x the parse ceiling; a second
epoch reads nothing. A run's rows/s move 10-20% from one run to the next, so uc-volume, air_core-rows and
pyarrow-parse run `--rounds` times (default 3), taking turns: each counts by its median round, and its ratio
to the ceiling is the median of the rounds' ratios (each round's against that round's parse).

    python benchmarks/bench_lines.py [--root /tmp/air-bench-lines] [--scale 1] [--cases big,many] [--rounds 3]
                                     [--keep]

The data (2 x 1 GB at scale 1) is written under --root and removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from statistics import median

from ranks import (cleanup, cpu_s, emit, epochs, one_process, prepare, ranks, ray_executions,
                   tables_dataset)

VOLUME = "/Volumes/main/bench/lines"
CASES = {"big": "one JSON Lines file of 1 GB", "many": "64 JSON Lines files of 16 MB"}
BIG_BYTES, MANY_FILES, MANY_BYTES = 1_000_000_000, 64, 16_000_000  # 16 MB < a span (16 MiB): one span a file
WORLD, WORKERS, BATCH = 2, 2, 256
SYSTEMS = ("uc-volume", "air_core-rows", "hf-json", "air_core-rowstream", "uc-volume-arrow", "hf-json-arrow",
           "ray-read_json", "air_ray-read_uc_volume", "pyarrow-parse")
RANKED = ("uc-volume", "air_core-rows", "hf-json", "air_core-rowstream", "uc-volume-arrow", "hf-json-arrow")
# The two sides of the ratio to the parse ceiling, run --rounds times, taking turns: a run moves 10-20%.
ROUNDED = ("uc-volume", "air_core-rows", "pyarrow-parse")
TARGETS = {"bytes": 1.05, "vs_hf": 2.0, "vs_parse": 0.7}


# -- the data ---------------------------------------------------------------------------------

WORDS = ("the of and to in is that for it as with was on be at by this had not are but from or have an they "
         "which one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some could time these two may then do first any my "
         "now such like our over man me even most made after also did many before must through back years where "
         "much your way well down should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same another know while "
         "last might us great old year off come since against go came right used take three model data train "
         "loss token answer question explain python function error value list please thanks")
SOURCES = ["sharegpt", "oasst", "ultrachat", "synthetic", "dolly"]


class Records:
    """Chat-like JSON lines with ids from 0, their contents cut from one seeded pool of words."""

    def __init__(self, seed: int = 0) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)
        words = self.rng.choice(WORDS.split(), size=1_000_000)
        self.pool = " ".join(words.tolist())
        self.next_id = 0
        self.pending: list[bytes] = []  # made, not written yet (last first)

    def lines(self, n: int) -> list[bytes]:
        import numpy as np

        rng, pool = self.rng, self.pool
        ask = np.exp(rng.uniform(np.log(40), np.log(1500), n)).astype(int)  # log-uniform lengths
        say = np.exp(rng.uniform(np.log(100), np.log(4000), n)).astype(int)
        at = rng.integers(0, len(pool) - 4000, (n, 2))
        src = rng.integers(0, len(SOURCES), n)
        out = []
        for k in range(n):
            out.append(json.dumps({"id": self.next_id, "messages": [
                {"role": "user", "content": pool[at[k, 0]:at[k, 0] + ask[k]]},
                {"role": "assistant", "content": pool[at[k, 1]:at[k, 1] + say[k]]}],
                "source": SOURCES[src[k]]}).encode() + b"\n")
            self.next_id += 1
        return out


def write_file(path: str, target: int, records: Records) -> int:
    """Records into `path` until the next would take it past `target` bytes (that one opens the next file);
    returns how many."""
    n, size = 0, 0
    with open(path, "wb") as f:
        while True:
            if not records.pending:
                records.pending = records.lines(4096)[::-1]
            line = records.pending[-1]
            if size + len(line) > target:
                return n
            f.write(records.pending.pop())
            size += len(line)
            n += 1


def build_data(local: str, scale: float) -> dict:
    """Both cases under `local` (kept when they were written at this scale); their records and bytes."""
    stamp = Path(local, "data.json")
    if stamp.exists() and json.loads(stamp.read_text()).get("scale") == scale:
        return json.loads(stamp.read_text())
    shutil.rmtree(local, ignore_errors=True)
    info = {"scale": scale}
    for case in CASES:
        os.makedirs(f"{local}/{case}")
        records = Records(seed=1 if case == "big" else 2)
        if case == "big":
            rows = write_file(f"{local}/big/chat.jsonl", int(BIG_BYTES * scale), records)
        else:
            rows = sum(write_file(f"{local}/many/part-{k:03d}.jsonl", int(MANY_BYTES * scale), records)
                       for k in range(MANY_FILES))
        files = sorted(os.listdir(f"{local}/{case}"))
        info[case] = {"rows": rows, "files": len(files),
                      "bytes": sum(os.path.getsize(f"{local}/{case}/{f}") for f in files)}
    stamp.write_text(json.dumps(info))
    return info


def data_files(local: str, case: str) -> list[str]:
    return [f"{local}/{case}/{f}" for f in sorted(os.listdir(f"{local}/{case}"))]


# -- measurements, each run in its own process ------------------------------------------

def count(rows: list[dict]) -> tuple[int, int]:
    """The DataLoader's collate: what crosses the process boundary is two numbers a batch."""
    return len(rows), sum(r["id"] for r in rows)


def count_table(table) -> tuple[int, int]:
    """The collate of a DataLoader of Arrow tables (`batch_size=None`), and a Ray batch's count: two numbers a
    table."""
    import pyarrow.compute as pc

    return table.num_rows, pc.sum(table.column("id")).as_py() or 0


def measure_rank(args) -> dict:
    """One of the ranks (RANK / WORLD_SIZE set): set up, wait for the others, two epochs, each after a barrier."""
    import datasets
    from torch.utils.data import DataLoader

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    arrow = args.system.endswith("-arrow")
    t = time.perf_counter()
    if args.system == "air_core-rowstream":
        from air_core import RowStream

        ds = tables_dataset(RowStream(f"{VOLUME}/{args.case}", rank=rank, world_size=world), BATCH)
    elif args.system == "air_core-rows":
        from air_core.torch import UCVolumeDataset

        ds = UCVolumeDataset(f"{VOLUME}/{args.case}", mode="rows")  # rank and world size from the environment
    elif args.system.startswith("uc-volume"):
        import air_hf

        ds = datasets.load_dataset("uc-volume", data_dir=f"{VOLUME}/{args.case}", split="train", streaming=True,
                                   cache_dir=args.hf_cache, world_size=world, num_workers=WORKERS)
        ds = air_hf.split_for_rank(ds, rank=rank, world_size=world)
    else:
        from datasets.distributed import split_dataset_by_node

        ds = datasets.load_dataset("json", data_files=data_files(args.local, args.case), split="train",
                                   streaming=True, cache_dir=args.hf_cache)
        ds = split_dataset_by_node(ds, rank=rank, world_size=world)
    out = {"system": args.system, "case": args.case, "rank": rank, "setup_s": round(time.perf_counter() - t, 3),
           "num_shards": getattr(ds, "num_shards", None)}
    if arrow:  # no DataLoader: this process reads its shards in turn, as Arrow batches
        def loader_pass():
            return map(count_table, ds.with_format("arrow").iter(batch_size=4096))
    elif args.system == "air_core-rowstream":
        loader_pass = DataLoader(ds, batch_size=None, num_workers=WORKERS, collate_fn=count_table).__iter__
    elif args.system == "air_core-rows":  # the core's own loader, as its users take it
        from air_core.torch import DataLoader as CoreLoader

        loader_pass = CoreLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count).__iter__
    else:
        loader = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count)
        loader_pass = loader.__iter__
    return epochs(ds, loader_pass, Path(args.sync), out)


def measure_ray(args) -> dict:
    """Ray in one process: two executions of `read_json` (or of ours, the second on a warm cache)."""
    import ray

    def make():
        if args.system == "air_ray-read_uc_volume":
            from air_ray import read_uc_volume

            return read_uc_volume(f"{VOLUME}/{args.case}")
        return ray.data.read_json(f"{args.local}/{args.case}")
    return ray_executions(make, count_table, {"system": args.system, "case": args.case})


def measure_parse(args) -> dict:
    """The ceiling: pyarrow's JSON parser over every file of the case from local disk (no netvol), best of 2."""
    import pyarrow.compute as pc
    import pyarrow.json as pj

    best = cpu_best = None
    for _ in range(2):
        cpu, t = cpu_s(), time.perf_counter()
        rows = ids = 0
        for path in data_files(args.local, args.case):
            table = pj.read_json(path)
            rows += table.num_rows
            ids += pc.sum(table.column("id")).as_py()
            del table
        dt, cpu = time.perf_counter() - t, cpu_s() - cpu
        best, cpu_best = (dt, cpu) if best is None or dt < best else (best, cpu_best)
    return {"system": "pyarrow-parse", "case": args.case, "first_s": round(best, 3), "first_rows": rows,
            "first_id_sum": ids, "first_rows_s": round(rows / best),
            "first_cpu_us_per_row": round(cpu_best / rows * 1e6, 2)}


# -- the run ----------------------------------------------------------------------------------

def summary(case: str, info: dict, got: dict[str, list[dict]]) -> dict:
    """The case's figures beside its targets. A system run in rounds counts by its median round (by first-epoch
    rows/s), and its ratio to the parse ceiling is the median of each round's ratio to that round's parse."""
    def pick(system: str) -> dict | None:
        runs = sorted(got.get(system, []), key=lambda r: r["first_rows_s"])
        return runs[(len(runs) - 1) // 2] if runs else None

    def vs_parse(system: str) -> float:
        return round(median(a["first_rows_s"] / b["first_rows_s"]
                            for a, b in zip(got[system], got["pyarrow-parse"])), 2)

    hf, parse = pick("hf-json"), pick("pyarrow-parse")
    out = {"summary": f"JSON Lines, {CASES[case]} (scale {info['scale']}): {info[case]['rows']:,} records, "
                      f"{info[case]['bytes'] / 1e6:,.0f} MB; {WORLD} ranks x {WORKERS} DataLoader workers, "
                      "netvol 10 ms / 200 MB/s",
           "case": case, "scale": info["scale"], "rows": info[case]["rows"], "bytes": info[case]["bytes"],
           "rounds": {s: [r["first_rows_s"] for r in got[s]] for s in ROUNDED if s in got},
           "targets": {"volume_bytes_ratio": f"<= {TARGETS['bytes']}", "vs_hf_json": f">= {TARGETS['vs_hf']}",
                       "vs_parse": f">= {TARGETS['vs_parse']}", "second_bytes": "0"}}
    for prefix, system in (("", "uc-volume"), ("core_", "air_core-rows")):
        runs, r = got.get(system, []), pick(system)
        if r:  # bytes and completeness: the worst round's
            volume, second = (max(x[k] for x in runs) for k in ("volume_bytes_ratio", "second_bytes_ratio"))
            out.update({f"{prefix}rows_s": r["first_rows_s"], f"{prefix}rows_s_per_rank": r["first_rows_s_per_rank"],
                        f"{prefix}second_rows_s": r["second_rows_s"], f"{prefix}volume_bytes_ratio": volume,
                        f"{prefix}second_bytes_ratio": second,
                        f"{prefix}complete": all(x["first_complete"] and x["second_complete"] for x in runs),
                        f"{prefix}bytes_ok": volume <= TARGETS["bytes"], f"{prefix}second_ok": second == 0})
            if hf:
                out[f"{prefix}vs_hf_json"] = round(r["first_rows_s"] / hf["first_rows_s"], 2)
                out[f"{prefix}vs_hf_ok"] = out[f"{prefix}vs_hf_json"] >= TARGETS["vs_hf"]
            if parse:
                out[f"{prefix}vs_parse"] = vs_parse(system)
                out[f"{prefix}vs_parse_ok"] = out[f"{prefix}vs_parse"] >= TARGETS["vs_parse"]
    if hf:
        out.update({"hf_rows_s": hf["first_rows_s"], "hf_rows_s_per_rank": hf["first_rows_s_per_rank"],
                    "hf_volume_bytes_ratio": hf["volume_bytes_ratio"],
                    "hf_second_bytes_ratio": hf["second_bytes_ratio"]})
    if "ray-read_json" in got:
        r = got["ray-read_json"][0]
        out.update({"ray_rows_s": r["first_rows_s"], "ray_bytes_ratio": r["first_bytes_ratio"]})
    if "air_ray-read_uc_volume" in got:
        r = got["air_ray-read_uc_volume"][0]
        out.update({"air_ray_rows_s": r["first_rows_s"], "air_ray_second_rows_s": r["second_rows_s"],
                    "air_ray_bytes_ratio": r["first_bytes_ratio"],
                    "air_ray_second_bytes_ratio": r["second_bytes_ratio"]})
    if parse:
        out["parse_rows_s"] = parse["first_rows_s"]
    ours_arrow, hf_arrow = pick("uc-volume-arrow"), pick("hf-json-arrow")
    if ours_arrow:  # beside the targets: what our reader gives with no per-row Python (one process a rank)
        out.update({"arrow_rows_s": ours_arrow["first_rows_s"], "arrow_second_rows_s": ours_arrow["second_rows_s"],
                    "arrow_volume_bytes_ratio": ours_arrow["volume_bytes_ratio"]})
        if parse:
            out["arrow_vs_parse"] = round(ours_arrow["first_rows_s"] / parse["first_rows_s"], 2)
    if hf_arrow:
        out["hf_arrow_rows_s"] = hf_arrow["first_rows_s"]
        if ours_arrow:
            out["arrow_vs_hf_json_arrow"] = round(ours_arrow["first_rows_s"] / hf_arrow["first_rows_s"], 2)
    tables = pick("air_core-rowstream")
    if tables:  # the core's Arrow tables through a DataLoader: beside the targets, which are for rows
        out.update({"rowstream_rows_s": tables["first_rows_s"], "rowstream_second_rows_s": tables["second_rows_s"],
                    "rowstream_volume_bytes_ratio": tables["volume_bytes_ratio"],
                    "rowstream_second_bytes_ratio": tables["second_bytes_ratio"]})
        if hf:
            out["rowstream_vs_hf_json"] = round(tables["first_rows_s"] / hf["first_rows_s"], 2)
        if parse:
            out["rowstream_vs_parse"] = round(tables["first_rows_s"] / parse["first_rows_s"], 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default="/tmp/air-bench-lines", help="work folder (data, caches, traces, netvol.so)")
    p.add_argument("--scale", type=float, default=1.0, help="data size: 1 is a 1 GB file and 64 files of 16 MB")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    p.add_argument("--rounds", type=int, default=3,
                   help="runs of each of " + ", ".join(ROUNDED) + ", taking turns; the summary takes medians")
    p.add_argument("--keep", action="store_true", help="keep the data under --root for the next run")
    p.add_argument("--run", choices=["rank", "ray", "parse"], help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--sync", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.local = f"{args.root}/Volumes{VOLUME[len('/Volumes'):]}"
    args.cache, args.hf_cache, args.script = f"{args.root}/cache", f"{args.root}/hf", __file__
    if args.run:
        if args.run == "rank":
            import torch  # noqa: F401  (a training script has it imported; datasets imports it lazily)
        run = {"rank": measure_rank, "ray": measure_ray, "parse": measure_parse}[args.run]
        print(json.dumps(run(args)))
        return

    info = prepare(args, build_data)
    systems = [s for s in args.systems.split(",") if s]
    try:
        for case in args.cases.split(","):
            got: dict[str, list[dict]] = {}
            once = [s for s in systems if s not in ROUNDED]
            turns = [s for s in systems if s in ROUNDED]
            # The rounds first, before the Ray measurements: parses after them ran 20-25% slower in one run.
            for k, system in [(k, s) for k in range(args.rounds) for s in turns] + [(0, s) for s in once]:
                got.setdefault(system, []).append(emit({**measure(args, system, case, info[case]), "round": k}))
            emit(summary(case, info, got))
    finally:
        cleanup(args)


def measure(args, system: str, case: str, data: dict) -> dict:
    """One measurement of `system` over `case`, in processes of its own."""
    if system in RANKED:
        return ranks(args, system, case, data, world=WORLD, workers=0 if system.endswith("-arrow") else WORKERS)
    run = "ray" if system.startswith(("ray", "air_ray")) else "parse"
    return one_process(args, run, system, case, data, slow=system != "pyarrow-parse")


if __name__ == "__main__":
    main()
