"""notebooks/hf_streaming.ipynb runs from top to bottom on the venv's python3 kernel."""

from __future__ import annotations

import pytest

from conftest import run_notebook

pytestmark = pytest.mark.slow  # a Jupyter kernel, DataLoader workers


def test_notebook_runs(tmp_path, monkeypatch):
    nb, printed = run_notebook("hf_streaming.ipynb", tmp_path, monkeypatch)
    assert "shards: 2\n" in printed and "shards: 6 | rows per rank: [80, 80, 80]" in printed
    assert "nothing twice: True" in printed and "4000 rows" in printed
    assert "1          240" in printed  # the second epoch's line of the throughput table
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1  # the grid of decoded images
