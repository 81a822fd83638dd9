"""First epochs under stuck reads: FileStream with stalls injected beside the same run without them.

2,000 JPEGs of ~147 KiB under the emulated volume; each round reads them cold
(an empty cache) through `air_core.FileStream` (one process, 64 fetch
threads), once without faults and once with `NETVOL_HANG_PCT` of reads
stalled for `NETVOL_HANG_MS`. Stalls are drawn at random (the draw is mixed
with the pid), so a round may meet none, one or several; every round is
reported. Extra reads are counted twice: by the cache (`stats.hedged`) and by
the netvol trace (opens beyond one per file), which sees them independently
of our code.

Usage: python benchmarks/bench_stalls.py [--rounds 3] [--hang-pct 0.05] [--hang-ms 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from common import emit, image_volume, measure

OURS = r"""
import json, os, sys, time
from air_core import FileStream
stream = FileStream(sys.argv[1])
t = time.perf_counter()
n = sum(len(f.read_bytes()) for f in stream)
dt = time.perf_counter() - t
with open(os.environ["NETVOL_TRACE"]) as f:
    opens = sum(line.startswith("open ") for line in f)
s = stream.cache.stats
print(json.dumps({"files": len(stream.manifest), "bytes": n, "cold_s": round(dt, 3),
                  "files_per_s": round(len(stream.manifest) / dt, 1), "hedged": s.hedged, "misses": s.misses,
                  "volume_opens": opens}))
"""


def one(folder: str, label: str, round_: int, **faults: str) -> dict:
    trace = tempfile.mktemp(prefix="air-bench-trace-")
    try:
        r = measure(OURS, folder, env={"NETVOL_TRACE": trace, **faults})
    finally:
        if os.path.exists(trace):
            os.unlink(trace)
    r.update(system="air_core.FileStream", case=label, round=round_, **{k.lower(): v for k, v in faults.items()},
             extra_reads_pct=round(100 * (r["volume_opens"] - r["files"]) / r["files"], 2))
    return r


def main() -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hang-pct", default="0.05")
    p.add_argument("--hang-ms", default="20000")
    args = p.parse_args()
    nested, _ = image_volume()
    results: list[dict] = []
    for k in range(args.rounds):
        emit(one(nested, "no stalls", k), results)
        emit(one(nested, "stalls", k, NETVOL_HANG_PCT=args.hang_pct, NETVOL_HANG_MS=args.hang_ms), results)
    calm = [r for r in results if r["case"] == "no stalls"]
    stalled = [r for r in results if r["case"] == "stalls"]
    emit({"summary": True, "rounds": args.rounds,
          "cold_s_median": {"no stalls": statistics.median(r["cold_s"] for r in calm),
                            "stalls": statistics.median(r["cold_s"] for r in stalled)},
          "stalls_over_no_stalls_worst": round(max(s["cold_s"] / c["cold_s"] for s, c in zip(stalled, calm)), 2),
          "stalls_over_no_stalls_median": round(statistics.median(s["cold_s"] / c["cold_s"]
                                                                  for s, c in zip(stalled, calm)), 2),
          "extra_reads_pct_no_stalls_max": max(r["extra_reads_pct"] for r in calm),
          "extra_reads_pct_stalls_max": max(r["extra_reads_pct"] for r in stalled)}, results)
    return results


if __name__ == "__main__":
    main()
