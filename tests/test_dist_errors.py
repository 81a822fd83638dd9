"""An error on rank 0 while every rank waits on it reaches every rank, under torchrun, even one that does not
pickle."""

from pathlib import Path

import pytest
from conftest import torchrun

pytestmark = pytest.mark.slow  # torchrun

SCRIPT = Path(__file__).parent / "scripts" / "rank0_error.py"


@pytest.mark.parametrize("kind,original", [
    ("unpicklable", "Unpicklable: the volume went away"),
    ("unloadable", "Unloadable: /Volumes/main/ml/raw/d: the volume went away"),
])
def test_rank_zero_error_that_does_not_pickle_reaches_every_rank(tmp_path, kind, original):
    out = tmp_path / "out"
    out.mkdir()
    torchrun(SCRIPT, 2, kind, str(tmp_path / "cache"), str(out), timeout=120)  # a waiting rank would time out
    got = [(out / f"rank{r}.txt").read_text() for r in range(2)]
    assert got[0] == original  # rank 0 raises its own error
    assert got[1] == f"RankZeroError: rank 0 failed to list the files every rank reads: {original}"
