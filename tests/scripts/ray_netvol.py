"""Under netvol, in a Ray of its own: which files the volume served in each execution.

Usage: ray_netvol.py FILES_PATH PARQUET_PATH TRACE
(run with LD_PRELOAD=netvol.so and NETVOL_TRACE=TRACE; Ray's workers inherit them)
Prints one JSON object: the trace's `open` lines per execution, and the files' digests as read.
"""

import hashlib
import json
import sys

import ray

from air_ray import read_uc_volume

files_path, parquet_path, trace = sys.argv[1:4]


def opened_during(run) -> list[str]:
    with open(trace) as f:
        before = len(f.readlines())
    run()
    with open(trace) as f:
        return [line.split(" ", 1)[1].strip() for line in f.readlines()[before:] if line.startswith("open ")]


ray.init(num_cpus=2, object_store_memory=100 << 20, include_dashboard=False, log_to_driver=False)
out = {"files": {}, "parquet": {}}
files = read_uc_volume(files_path, include_bytes=True)
digests = {}
for execution in ("first", "second"):
    rows = []
    out["files"][execution] = opened_during(lambda: rows.extend(files.iter_rows()))
    digests[execution] = {r["path"]: hashlib.sha256(r["bytes"]).hexdigest() for r in rows}
out["digests"] = digests
table = read_uc_volume(parquet_path)
out["parquet_rows"] = []
for execution in ("first", "second"):
    rows = []
    out["parquet"][execution] = opened_during(lambda: rows.extend(table.iter_rows()))
    out["parquet_rows"].append(len(rows))
print(json.dumps(out))
