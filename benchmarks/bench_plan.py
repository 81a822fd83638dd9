"""Planning at scale: one stream's plan per epoch, and a resume after a 3-level chain, at 10**5..10**7 items.

Synthetic sizes (lognormal around 150 KB); grid 8 ranks x 6 workers, shuffled,
equalize="pad". Each N runs in its own process, so its peak RSS is its own.
Prints one JSON line per N.

Usage: python benchmarks/bench_plan.py [--code ROOT] [--input array|list] [N ...]
  --code ROOT   plan with the air_core under ROOT (e.g. an older checkout, for a comparison)
  --input list  pass sizes as a Python list, as a listing of Python ints does
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

OPTS = dict(seed=1, shuffle=True, balance="bytes", equalize="pad")


def measure(n: int, as_list: bool) -> dict:
    import numpy as np

    from air_core.grid import Grid
    from air_core.planning.shares import Planning, plan_epoch
    from air_core.planning.resume import VERSION, delivered, plan_resume, run_state

    sizes = np.random.default_rng(0).lognormal(np.log(150_000), 1.0, n).astype(np.int64) + 1
    if as_list:
        sizes = sizes.tolist()
    out: dict = {"items": n, "input": "list" if as_list else "array"}

    for epoch in (0, 1):
        with timed(out, f"plan_epoch{epoch}"):
            items = plan_epoch(sizes, Grid(3, 8, 1, 6), planning=Planning(**OPTS), epoch=epoch)
    out["stream_items"] = len(items)
    out["plan_peak_rss_mb"] = peak_rss_mb()

    # A run on 8 x 6, resumed on 8 x 4 (each rank keeps the rest of its share), then on 4 x 6 (the rest dealt
    # again), and now resumed on 8 x 6 (dealt again). Workers stop a few items apart; a state holds only counts.
    state = None
    for level, (world, workers) in enumerate([(8, 6), (8, 4), (4, 6)]):
        share = n // (world * workers * 5)  # each stream read about a fifth of its plan
        streams = [{"version": VERSION, "epoch": 0, "fingerprint": "f", "plan": OPTS, "resumed_from": state,
                    "grid": [r, world, w, workers], "consumed": share - (r + w + level) % 3}
                   for r in range(world) for w in range(workers)]
        state = run_state(streams)
    out["state_json_bytes"] = len(json.dumps(state))
    with timed(out, "resume_plan"):
        rest = plan_resume(sizes, Grid(3, 8, 1, 6), state, planning=Planning(**OPTS))
    out["resume_stream_items"] = len(rest)
    out["resume_peak_rss_mb"] = peak_rss_mb()
    with timed(out, "delivered"):
        done = delivered(sizes, state, planning=Planning(**OPTS))  # a set of Python ints, which alone weighs ~70 bytes per item
    out["delivered"] = len(done)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


@contextmanager
def timed(out: dict, name: str):
    """Record the block's wall and CPU seconds: on a shared machine, wall time also counts others' work."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    out[f"{name}_s"] = round(time.perf_counter() - wall, 3)
    out[f"{name}_cpu_s"] = round(time.process_time() - cpu, 3)


def peak_rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=lambda s: int(float(s)), default=[10**5, 10**6, 10**7])
    parser.add_argument("--code", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--input", choices=("array", "list"), default="array")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        sys.path.insert(0, args.code)
        print(json.dumps(measure(args.sizes[0], args.input == "list")))
        return
    for n in args.sizes:
        subprocess.run([sys.executable, __file__, "--one", "--code", args.code, "--input", args.input, str(n)],
                       check=True)


if __name__ == "__main__":
    main()
