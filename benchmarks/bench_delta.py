"""Delta -> Parquet export beside deltalake's own `to_pyarrow_dataset` + `pyarrow.dataset.write_dataset`.

The table (3.2M rows over 16 commits and a delete, partitioned, ~110 MB) lives
under `/Volumes/bench/ml/raw/delta`, emulated as a network volume by netvol
(10 ms per open, 200 MB/s per stream); both write their Parquet beside it on
the volume. The baseline reads through deltalake's own file system (its
default) and through a `SubTreeFileSystem` (the fix for its abort at exit).
Each export runs in a fresh process, its imports of pyarrow and deltalake
timed (export_delta imports them when called: 0.2 s here); the three
alternate, `--rounds` times, and the summary compares median rows/s. A last
run exports a version already exported (nothing to write).

Then the export is streamed back on the same files, each reader in a fresh
process with an empty cache, the four taking turns `--rounds` times: HF's
`parquet` builder against `uc-volume`, and Ray's `read_parquet` against
`read_uc_volume`. Imports and Ray's start are not timed; the rest is.

Prints one JSON line per measurement, then the summaries.

`--before REV` measures the export alone on REV's code and on this code
instead, this script's export run by both trees' code in fresh processes
taking turns (which goes first alternates), `--rounds` each: two trees run
minutes apart, as `before_after.py` runs them, drift with the machine by
more than the change. It writes results/delta_before_after.json, shown in
RESULTS.md.

    python benchmarks/bench_delta.py [--rounds 3] [--before REV]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
from pathlib import Path

from common import REPO, VOLUME, checked_out, emit, measure, short_sha

TABLE = f"{VOLUME}/delta/reviews"
OUT = f"{VOLUME}/delta-exports"
COMMITS, ROWS_PER_COMMIT = 16, 200_000

MAKE = r"""
import json, sys
import numpy as np, pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path, commits, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
words = np.array(["good", "bad", "fine", "great", "slow", "fast", "cheap", "loud"])
for c in range(commits):
    ids = np.arange(c * n, (c + 1) * n)
    text = [" ".join(w) for w in words[rng.integers(0, len(words), (n, 6))]]
    write_deltalake(path, pa.table({"id": ids, "score": rng.random(n), "stars": rng.integers(1, 6, n),
                                    "text": text, "split": np.where(ids % 10 == 0, "test", "train")}),
                    partition_by=["split"], mode="append")
DeltaTable(path).delete("stars = 1 AND id < 400000")
print(json.dumps({"made": path, "version": DeltaTable(path).version()}))
"""

BASELINE = r"""
import json, os, sys, time
t, cpu = time.perf_counter(), time.process_time()
import pyarrow.dataset as pads, pyarrow.fs as pafs  # timed, as export_delta's imports of both are
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
fs = pafs.SubTreeFileSystem(sys.argv[1], pafs.LocalFileSystem()) if sys.argv[3] == "subtree" else None
pads.write_dataset(dt.to_pyarrow_dataset(filesystem=fs), sys.argv[2], format="parquet")
dt_s, cpu_s = time.perf_counter() - t, time.process_time() - cpu
rows = pads.dataset(sys.argv[2], format="parquet").count_rows()
print(json.dumps({"system": f"deltalake to_pyarrow_dataset({sys.argv[3]} fs) + write_dataset", "rows": rows,
                  "seconds": round(dt_s, 3), "cpu_s": round(cpu_s, 3), "rows_per_s": round(rows / dt_s)}), flush=True)
os._exit(0)  # deltalake's file system can abort the interpreter at exit (exit 134)
"""

OURS = r"""
import json, sys, time
from air_core.delta import export_delta
t, cpu = time.perf_counter(), time.process_time()
r = export_delta(sys.argv[1], sys.argv[2])
dt_s, cpu_s = time.perf_counter() - t, time.process_time() - cpu
print(json.dumps({"system": "air_core.export_delta", "rows": r.rows, "files": len(r.files), "skipped": r.skipped,
                  "seconds": round(dt_s, 3), "cpu_s": round(cpu_s, 3), "rows_per_s": round(r.rows / dt_s),
                  "code": __import__("air_core").__file__}))
"""


def _made() -> bool:
    from deltalake import DeltaTable

    return os.path.isdir(f"{TABLE}/_delta_log") and DeltaTable(TABLE).version() == COMMITS  # appends + delete


def _make_table() -> None:
    """The benchmark's table, made unless it is there already."""
    if not _made():
        shutil.rmtree(TABLE, ignore_errors=True)
        measure(MAKE, TABLE, str(COMMITS), str(ROWS_PER_COMMIT), slow=False)


STREAM = r"""
import glob, json, os, sys, time
reader, path = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))
if reader.startswith("ray"):
    import ray
    ray.init(num_cpus=2, object_store_memory=512 << 20, include_dashboard=False, log_to_driver=False)
    ray.data.range(2).materialize()  # workers up before the clock starts
    from air_ray import read_uc_volume
else:  # datasets imports torch lazily when iterating (1-2 s): not reading, so not timed, for either reader
    import datasets, air_hf, torch
t = time.perf_counter()
if reader.startswith("hf"):
    ds = (datasets.load_dataset("parquet", data_files=files, split="train", streaming=True) if reader == "hf-native"
          else datasets.load_dataset("uc-volume", data_dir=path, split="train", streaming=True))
    batches = (b.num_rows for b in ds.with_format("arrow").iter(batch_size=8192))
else:
    ds = ray.data.read_parquet(files) if reader == "ray-native" else read_uc_volume(path)
    batches = (b.num_rows for b in ds.iter_batches(batch_size=8192, batch_format="pyarrow"))
rows = sum(batches)
dt = time.perf_counter() - t
print(json.dumps({"system": f"stream export: {reader}", "rows": rows, "seconds": round(dt, 3),
                  "rows_per_s": round(rows / dt)}), flush=True)
os._exit(0)  # measured; an interpreter exiting with datasets, torch and pyarrow threads can abort (SIGABRT)
"""

EXPORT_PATH = r"""
import json, sys
from air_core.delta import export_delta
print(json.dumps({"path": export_delta(sys.argv[1], sys.argv[2]).path}))
"""


def stream_back(results: list[dict], rounds: int) -> None:
    """The export's files through each front door and the native reader of its ecosystem, taking turns."""
    path = measure(EXPORT_PATH, TABLE, f"{OUT}/stream", slow=False)["path"]
    rates: dict[str, list[float]] = {"hf-native": [], "hf-ours": [], "ray-native": [], "ray-ours": []}
    for _ in range(rounds):
        for reader, got in rates.items():
            emit(measure(STREAM, reader, path), results)
            got.append(results[-1]["rows_per_s"])
    median = {reader: statistics.median(got) for reader, got in rates.items()}
    emit({"summary": "stream export", "rounds": rounds, "rows_per_s_median": median,
          "hf_ours_over_native": round(median["hf-ours"] / median["hf-native"], 2),
          "ray_ours_over_native": round(median["ray-ours"] / median["ray-native"], 2)}, results)


def main(rounds: int = 3) -> list[dict]:
    _make_table()
    shutil.rmtree(OUT, ignore_errors=True)
    results: list[dict] = []
    runs: dict[str, list[dict]] = {"ours": [], "own": [], "subtree": []}
    for k in range(rounds):
        for fs in ("own", "subtree"):
            emit(measure(BASELINE, TABLE, f"{OUT}/{fs}-{k}", fs), results)
            runs[fs].append(results[-1])
        emit(measure(OURS, TABLE, f"{OUT}/ours-{k}"), results)
        runs["ours"].append(results[-1])
    emit(measure(OURS, TABLE, f"{OUT}/ours-0"), results)  # this version is there already
    speed = {k: statistics.median(r["rows_per_s"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    emit({"summary": "delta export", "rounds": rounds, "rows_per_s_median": speed, "cpu_s_median": cpu,
          "ratio_ours_over_deltalake_fs": round(speed["ours"] / speed["own"], 2),
          "ratio_ours_over_subtree_fs": round(speed["ours"] / speed["subtree"], 2),
          "skip_s": results[-1]["seconds"]}, results)
    stream_back(results, rounds)
    shutil.rmtree(OUT, ignore_errors=True)
    return results


def before_after(rev: str, rounds: int) -> None:
    """The export on `rev`'s code and on this code, in turns; medians to results/delta_before_after.json."""
    _make_table()
    shutil.rmtree(OUT, ignore_errors=True)
    samples: dict[str, list[int]] = {"before": [], "after": []}
    with checked_out(rev) as tree:
        for k in range(rounds):
            for side, code in [("before", tree), ("after", REPO)][:: 1 if k % 2 == 0 else -1]:
                r = measure(OURS, TABLE, f"{OUT}/{side}-{k}", env={"PYTHONPATH": str(code)})
                if not r.pop("code").startswith(str(code)) or r["skipped"]:
                    raise SystemExit(f"{side}: not an export by {code}'s code: {r}")
                print(json.dumps({"code": side, **r}), flush=True)
                samples[side].append(r["rows_per_s"])
    shutil.rmtree(OUT, ignore_errors=True)
    before, after = (statistics.median(samples[side]) for side in ("before", "after"))
    figure = {"measure": "export_delta, rows/s (as bench_delta)", "samples": rounds, "before": before,
              "after": after, "ratio": round(after / before, 3)}
    print(json.dumps(figure))
    (Path(__file__).parent / "results" / "delta_before_after.json").write_text(json.dumps(
        {"command": f"python bench_delta.py --before {rev} --rounds {rounds}", "before": short_sha(rev),
         "after": short_sha("HEAD"), "figures": [figure], "samples": samples}, indent=1) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", metavar="REV", help="the export alone, on REV's code and this code in turns")
    args = ap.parse_args()
    if args.before:
        before_after(args.before, args.rounds)
    else:
        main(args.rounds)
