"""Run every benchmark, one after another, and write RESULTS.md, results/*.jsonl and results.png.

Each benchmark runs the reference, the native readers and ours in one run on
the same data under the emulated volume and prints JSON lines; this script
keeps those lines and renders them. `--render` re-renders from saved lines.

Caches (ours, the reference's, Ray's and HF's) go under TMPDIR. On Databricks
they sit on the node's local NVMe disk; on a VM whose virtual disk makes page
cache writes cost 3x more from one hour to the next, run with TMPDIR=/dev/shm
so that every system's cache sits in memory alike.

Usage: TMPDIR=/dev/shm python benchmarks/run_all.py [--only core,hf,stalls,pack,lines,webdataset,media,files_api,mixture,resume,columns,...] [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import compiled, netvol_so

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

BENCHES = {
    "core": ["bench_core.py"],
    "torch": ["bench_torch.py", "--repeat", "6"],
    "hf": ["bench_hf.py", "--repeat", "3", "--root", "{tmp}/air-bench-hf"],
    "ray": ["bench_ray.py", "--netvol", "{netvol}", "--workdir", "{tmp}/air-bench"],
    "delta": ["bench_delta.py", "--rounds", "5"],
    "stalls": ["bench_stalls.py", "--rounds", "5"],
    "scale": ["bench_scale.py"],
    "pack": ["bench_pack.py", "--files", "20000"],
    "lines": ["bench_lines.py", "--root", "{tmp}/air-bench-lines"],
    "webdataset": ["bench_webdataset.py", "--root", "{tmp}/air-bench-wds"],
    "media": ["bench_media.py", "--root", "{tmp}/air-bench-media"],
    "files_api": ["bench_files_api.py", "--root", "{tmp}/air-bench-files-api"],
    "mixture": ["bench_mixture.py"],
    "resume": ["bench_resume.py", "--root", "{tmp}/air-bench-resume"],
    "columns": ["bench_columns.py", "--root", "{tmp}/air-bench-columns", "--before", "e716d33~1"],
}


def run(name: str, tree: Path = HERE.parent, out_dir: Path = RESULTS) -> list[dict]:
    """Run benchmark `name` as `tree`'s own script on `tree`'s code; its lines go to `out_dir`/<name>.jsonl."""
    args = (a.format(netvol=netvol_so(), tmp=tempfile.gettempdir()) for a in BENCHES[name][1:])
    cmd = [sys.executable, str(tree / "benchmarks" / BENCHES[name][0]), *args]
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    compiled(tree)
    out = subprocess.run(cmd, cwd=tree / "benchmarks", env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{name} failed:\n{out.stderr[-4000:]}")
    lines = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"{name}.jsonl", "w") as f:
        f.write(f'{{"command": {json.dumps(" ".join(["python", *BENCHES[name]]))}, '
                f'"wall_s": {time.perf_counter() - t:.1f}, "load_avg": {os.getloadavg()[0]:.2f}}}\n')
        f.writelines(json.dumps(r) + "\n" for r in lines)
    for r in lines:
        print(json.dumps(r), flush=True)
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", help="comma-separated subset of " + ",".join(BENCHES))
    p.add_argument("--render", action="store_true", help="only re-render RESULTS.md from results/*.jsonl")
    args = p.parse_args()
    if not args.render:
        for name in (args.only.split(",") if args.only else BENCHES):
            run(name)
    from render import render

    render(RESULTS, HERE / "RESULTS.md", HERE / "results.png")


if __name__ == "__main__":
    main()
