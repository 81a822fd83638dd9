"""A process that read through a front door exits 0, whether it read everything or left its iterator midway.

A rank that exits 134 after its training finished fails a torchrun job and
marks a Databricks run failed. Exits race: each layout is read in 30 fresh
processes, two at a time so that the cores are busy as on a training node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT

SCRIPT = ROOT / "tests" / "scripts" / "exits.py"
RUNS = 30
ROWS = 2000


def _layouts(volume) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = __import__("random").Random(0)
    images = [rng.randbytes(10_000) for _ in range(ROWS)]
    table = pa.table({"id": range(ROWS), "image": images, "text": [f"caption {i}" for i in range(ROWS)]})
    volume.local("parquet").mkdir()
    pq.write_table(table, volume.local("parquet/part-0.parquet"), row_group_size=100)  # 20 row groups, ranks split
    volume.write("jsonl/part-0.jsonl", "".join(json.dumps({"id": i, "text": "x" * 200}) + "\n" for i in range(ROWS)))
    for i in range(200):
        volume.write(f"files/{i % 4}/{i}.bin", rng.randbytes(1000))


@pytest.mark.slow
@pytest.mark.parametrize("stop_after", [None, ROWS // 2], ids=["whole", "abandoned"])
@pytest.mark.parametrize("layout", [
    # Still 4 of 60 aborted in a full suite run (0 of 60 alone): a Parquet read by ranges still leaves Python
    # memory to one of Arrow's threads somewhere (its I/O pool, reading the Python file, is the suspect).
    pytest.param("parquet", marks=pytest.mark.xfail(reason="a rare abort at exit remains (#43)", strict=False)),
    "jsonl", "files"])
def test_a_process_that_read_through_the_hf_door_exits_0(volume, tmp_path, layout, stop_after):
    _layouts(volume)
    args = [sys.executable, str(SCRIPT), volume.path(layout)] + ([] if stop_after is None else [str(stop_after)])

    def run(i: int) -> subprocess.CompletedProcess:
        env = {**os.environ, "AIR_CACHE_DIR": str(tmp_path / f"cache-{i}")}  # a cold cache each: reads in flight
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(run, range(RUNS)))
    failed = [(r.returncode, r.stderr[-300:]) for r in runs if r.returncode != 0]
    assert not failed, f"{len(failed)} of {RUNS} processes did not exit 0: {failed[:3]}"
