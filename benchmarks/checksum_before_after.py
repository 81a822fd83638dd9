"""A cold epoch of 2,000 loose files, on this code and on an earlier revision's, in many processes taking turns.

Made for a change that adds work to each copy into the node cache (a checksum
of every copy, hashed back from the page cache after the kernel's copy): its
cost is a few per cent at most, inside what one process's cold epoch moves
from one run to the next here (the same code measured 0.84-1.17x itself in
8 pairs). So each tree runs `--processes` fresh processes, the trees taking
turns (which goes first alternates), each one cold epoch of bench_core's
`FileStream` over its 2,000 JPEGs under netvol, with an empty cache of its
own, timed from the first item asked for to the last file's bytes read. It
prints every sample, the medians of each tree, their ratio and the spread
of the ratios of the pairs, and writes them to
results/checksum_before_after.json, shown in RESULTS.md.

Usage: TMPDIR=/dev/shm python benchmarks/checksum_before_after.py --rev REV [--processes 8]
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

from common import NETVOL, REPO, checked_out, compiled, image_volume, netvol_so, short_sha

HERE = Path(__file__).resolve().parent
FIGURES = {"files_s": "cold epoch, files/s", "cpu_ms": "cold epoch, CPU ms a file (all threads)"}

ONE = r"""
import json, sys, time
from air_core import FileStream

stream = FileStream(sys.argv[1])
files = iter(stream)
t, cpu = time.perf_counter(), time.process_time()
n = sum(1 for f in files if f.read_bytes() is not None)
seconds = time.perf_counter() - t
print(json.dumps({"files_s": n / seconds, "cpu_ms": (time.process_time() - cpu) / n * 1000}))
"""


def one(tree: Path, folder: str) -> dict:
    cache = tempfile.mkdtemp(prefix="air-bench-cache-")
    env = {**os.environ, "PYTHONPATH": str(tree), "AIR_CACHE_DIR": cache, **NETVOL, "LD_PRELOAD": netvol_so()}
    env.pop("AIR_VOLUMES_ROOT", None)
    try:
        # Run from the empty cache folder: `-c` puts the working folder first on sys.path, where a tree's
        # air_core would shadow PYTHONPATH's.
        out = subprocess.run([sys.executable, "-c", ONE, folder], env=env, cwd=cache, capture_output=True, text=True,
                             timeout=600)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rev", required=True, help="the revision before the change")
    p.add_argument("--processes", type=int, default=8, help="fresh processes per tree")
    args = p.parse_args()
    folder, _ = image_volume()
    compiled(REPO)
    samples: dict[str, list[dict]] = {"before": [], "after": []}
    with checked_out(args.rev) as before:
        trees = {"before": before, "after": REPO}
        for k in range(args.processes):
            for side in (("before", "after") if k % 2 == 0 else ("after", "before")):
                samples[side].append(one(trees[side], folder))
                print(json.dumps({"side": side, "round": k, **samples[side][-1]}), flush=True)
    figures = []
    for key, measure in FIGURES.items():
        b, a = ([s[key] for s in samples[side]] for side in ("before", "after"))
        pairs = [y / x for x, y in zip(b, a)]
        figures.append({"measure": measure, "samples": args.processes, "before": statistics.median(b),
                        "after": statistics.median(a), "ratio": statistics.median(a) / statistics.median(b),
                        "pairs": [min(pairs), max(pairs)]})
    record = {"command": f"checksum_before_after.py --rev {args.rev} --processes {args.processes}",
              "before": short_sha(args.rev), "after": short_sha("HEAD"), "figures": figures}
    (HERE / "results" / "checksum_before_after.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
