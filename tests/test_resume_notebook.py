"""notebooks/trainer_resume.ipynb runs from top to bottom on the venv's python3 kernel, and says what it shows."""

from __future__ import annotations

import pytest

from conftest import run_notebook

pytestmark = pytest.mark.slow  # a Jupyter kernel, four Trainer runs


def test_notebook_runs(tmp_path, monkeypatch):
    _, printed = run_notebook("trainer_resume.ipynb", tmp_path, monkeypatch)
    assert "stopped after 40 steps; checkpoints: ['checkpoint-20', 'checkpoint-40']" in printed
    with_callback, without = printed.split("resumed without the callback", 1)
    assert "resumed: 20 steps trained" in with_callback and "rows of steps 1-40 tokenized again: 0\n" in with_callback
    assert "steps 1-40 then 41-60 train on the rows of the run uninterrupted: True" in with_callback
    assert '"piece_idx": 1' in with_callback  # the stream starts at the second file of its shard
    assert ": 20 steps trained" in without and "rows of steps 1-40 tokenized again: 320\n" in without
