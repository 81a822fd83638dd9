"""notebooks/hf_streaming.ipynb runs from top to bottom on the venv's python3 kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # a Jupyter kernel, DataLoader workers

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "hf_streaming.ipynb"


def test_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("AIR_VOLUMES_ROOT", raising=False)
    monkeypatch.delenv("AIR_CACHE_DIR", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "shards: 2\n" in printed and "shards: 6 | rows per rank: [80, 80, 80]" in printed
    assert "nothing twice: True" in printed and "4000 rows" in printed
    assert "1          240" in printed  # the second epoch's line of the throughput table
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1  # the grid of decoded images
