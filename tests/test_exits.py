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


def test_arrow_reads_a_parquet_file_by_ranges_only_on_the_consumers_thread(volume, monkeypatch):
    """The exits' cause, checked directly: a Python file read on one of Arrow's threads (its I/O pool pre-buffers
    ranges) can leave that thread the last reference to Python memory, and it aborts the process at exit."""
    import threading

    import datasets

    import air_hf  # noqa: F401
    from air_core.read import parquet_io

    _layouts(volume)
    readers, read = set(), parquet_io._Ranges.read

    def recorded(self, size=-1):
        readers.add(threading.current_thread().name)
        return read(self, size)

    monkeypatch.setattr(parquet_io._Ranges, "read", recorded)
    rows = datasets.load_dataset("uc-volume", data_dir=volume.path("parquet"), split="train", streaming=True)
    assert sum(1 for _ in rows) == ROWS
    assert readers == {threading.current_thread().name}


@pytest.mark.slow
@pytest.mark.parametrize("stop_after", [None, ROWS // 2], ids=["whole", "abandoned"])
@pytest.mark.parametrize("layout", [
    "parquet", "jsonl", "files"])
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
