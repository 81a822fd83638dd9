"""notebooks/mixtures.ipynb runs from top to bottom on the venv's python3 kernel, realising the asked proportions."""

from __future__ import annotations

import pytest

from conftest import run_notebook

pytestmark = pytest.mark.slow  # a Jupyter kernel


def test_notebook_runs(tmp_path, monkeypatch):
    _, printed = run_notebook("mixtures.ipynb", tmp_path, monkeypatch)
    for epoch in range(3):
        assert f"{epoch:>5}  60% → 60.00%  30% → 30.00%  10% → 10.00%" in printed
    assert "chat files seen after 3 epochs: 3000 of 3000" in printed
    assert "the uninterrupted epoch: True" in printed and "'chat': 750, 'safety': 120" in printed
    for epoch in range(3):
        assert f"rows, epoch {epoch}: sft_chat 70% → 70.00%  sft_code 30% → 30.00%  (1000 rows)" in printed
    assert "chat rows seen after 3 epochs: 2000 of 2000, the most times one came: 2" in printed
