"""Registration on the lowest and the highest `datasets` the hf extra allows (>=4.0,<6)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow  # pip installs datasets, subprocesses

SMOKE = Path(__file__).parent / "scripts" / "hf_smoke.py"
LOWEST = "4.0.0"


@pytest.fixture(scope="module")
def lowest_datasets(tmp_path_factory) -> str:
    """datasets==4.0.0 installed into a folder of its own (its dependencies come from this venv)."""
    target = tmp_path_factory.mktemp("datasets-lowest")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                           f"datasets=={LOWEST}"], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot install datasets=={LOWEST} (no package index?): {proc.stderr[-300:]}")
    return str(target)


@pytest.mark.parametrize("which", ["lowest", "installed"])
def test_end_to_end_on_the_supported_range(volume, tmp_path, request, which):
    expected = volume.files("files", 12)
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(30))}), buf, row_group_size=8)
    volume.write("tab/part=a/x.parquet", buf.getvalue())
    env = dict(os.environ)
    if which == "lowest":
        env["PYTHONPATH"] = os.pathsep.join([request.getfixturevalue("lowest_datasets"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, str(SMOKE), volume.path("files"), volume.path("tab"),
                          str(tmp_path / "hf")], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["version"] == (LOWEST if which == "lowest" else datasets.__version__)
    assert got["shards"] == 4
    assert sorted(got["halves"][0] + got["halves"][1]) == expected and len(got["halves"][0]) == 6
    assert got["loader"] == expected
    assert got["parquet_rows"] == list(range(30)) and got["parquet_columns"] == ["id", "part"]
    assert "unknown option 'worker_count'" in got["error"]
