"""notebooks/media_records.ipynb runs from top to bottom on the venv's python3 kernel."""

from __future__ import annotations

import pytest

from conftest import run_notebook

pytestmark = pytest.mark.slow  # a Jupyter kernel, DataLoader workers


def test_notebook_runs(tmp_path, monkeypatch):
    nb, printed = run_notebook("media_records.ipynb", tmp_path, monkeypatch)
    # the image-caption folder: splits, its image a feature, into TRL's shape
    assert "train: IterableDataset({\n        features: ['image', 'caption']" in printed
    assert "user [{'type': 'image', 'image': 'PngImageFile'}, {'type': 'text', 'text': 'Describe the picture.'}]" \
        in printed
    # the LLaVA set: its conversations mapped, its image a list of one
    assert ("'messages': [{'role': 'user', 'content': 'What is in the picture?'}, {'role': 'assistant', 'content': "
            "'It is a red circle.'}" in printed)
    assert "'images': [<PIL.JpegImagePlugin.JpegImageFile image mode=RGB size=48x48" in printed
    assert printed.count("conversational: True") == 2
    assert "'images': List(Image(mode=None, decode=True))" in printed
    assert "rank 0: 30 records, 30 images" in printed and "shards: 4 | each record once: True" in printed
    assert "broken/chat.jsonl, line 2: the record names 'part-0/missing.jpg'" in printed and "['a']" in printed
    assert "(12, 48, 48, 3) ('a red circle', 'a red square', 'a red triangle')" in printed
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1  # the grid of captioned images
