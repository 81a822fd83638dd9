"""notebooks/records.ipynb runs from top to bottom on the venv's python3 kernel."""

from __future__ import annotations

import pytest

from conftest import run_notebook

pytestmark = pytest.mark.slow  # a Jupyter kernel, DataLoader workers, Ray


def test_notebook_runs(tmp_path, monkeypatch):
    nb, printed = run_notebook("records.ipynb", tmp_path, monkeypatch)
    assert "shards: 4 | rows per rank:" in printed and "each conversation once: True" in printed
    assert "100 batches, 6300 conversations" in printed
    assert "part.jsonl, line 2 (byte offset 26): not a valid JSON object" in printed and "[1, 3]" in printed
    assert "'png': Image(" in printed and "Ray rows: 6300" in printed
    assert "every conversation once: True\n" in printed.rsplit("delivered before", 1)[1]
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1  # the grid of decoded shapes
