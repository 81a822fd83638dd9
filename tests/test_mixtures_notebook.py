"""notebooks/mixtures.ipynb runs from top to bottom on the venv's python3 kernel, realising the asked proportions."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # a Jupyter kernel

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "mixtures.ipynb"


def test_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("AIR_VOLUMES_ROOT", raising=False)
    monkeypatch.delenv("AIR_CACHE_DIR", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    for epoch in range(3):
        assert f"{epoch:>5}  60% → 60.00%  30% → 30.00%  10% → 10.00%" in printed
    assert "chat files seen after 3 epochs: 3000 of 3000" in printed
    assert "the uninterrupted epoch: True" in printed and "'chat': 750, 'safety': 120" in printed
    for epoch in range(3):
        assert f"rows, epoch {epoch}: sft_chat 70% → 70.00%  sft_code 30% → 30.00%  (1000 rows)" in printed
    assert "chat rows seen after 3 epochs: 2000 of 2000, the most times one came: 2" in printed
