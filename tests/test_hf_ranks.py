"""uc-volume across real torchrun ranks: split by shard, workers, netvol's trace, and Trainer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import torchrun

pytestmark = pytest.mark.slow  # torchrun

SCRIPTS = Path(__file__).parent / "scripts"


def read_ranks(out: Path, n: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


def test_three_ranks_two_workers_read_each_file_once(volume, netvol_so, tmp_path):
    expected = volume.files("imgs", 50)
    out, trace = tmp_path / "out", tmp_path / "trace"
    out.mkdir()
    trace.touch()
    env = {"LD_PRELOAD": netvol_so, "NETVOL_PREFIX": str(volume.root) + "/", "NETVOL_OPEN_MS": "10",
           "NETVOL_TRACE": str(trace)}
    torchrun(SCRIPTS / "hf_ranks.py", 3, volume.path("imgs"), str(tmp_path / "hf"), str(out), env=env)
    ranks = read_ranks(out, 3)
    assert {r["shards"] for r in ranks} == {2}  # of 6: world_size x num_workers
    for epoch in range(2):
        every = [p for r in ranks for p in r["epochs"][epoch]]
        assert sorted(every) == expected  # all files, none twice
        assert all(abs(len(r["epochs"][epoch]) - 50 / 3) < 2 for r in ranks)
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # set_epoch reshuffled
    # netvol's own record: setup opened no file, epoch 1 opened each file once, epoch 2 none.
    opens = [line.split(" ", 1)[1] for line in trace.read_text().splitlines() if line.startswith("open ")]
    before, after_first, after_second = ranks[0]["trace_marks"]
    assert before == 0 and after_second == after_first
    assert sorted(opens[before:after_first]) == sorted(str(volume.local(p[len(volume.vol) + 1:])) for p in expected)
    equal = [r["equalized"] for r in ranks]
    assert [len(e) for e in equal] == [18, 18, 18]  # 6 shards of ceil(50 / 6) = 9, 2 per rank
    assert set(p for e in equal for p in e) == set(expected)


def test_trainer_on_two_ranks_trains_on_disjoint_halves(volume, tmp_path):
    volume.files("imgs", 34)  # equalize="drop": 4 shards of 8 (2 files left out)
    out = tmp_path / "out"
    out.mkdir()
    torchrun(SCRIPTS / "hf_trainer.py", 2, volume.path("imgs"), str(tmp_path / "hf"), str(out), "4")
    ranks = read_ranks(out, 2)
    seen = [r["seen"] for r in ranks]
    assert {r["shards"] for r in ranks} == {4}
    assert [len(s) for s in seen] == [16, 16]  # 4 steps x batch 4, one epoch of each half
    assert not set(seen[0]) & set(seen[1]) and len(set(seen[0] + seen[1])) == 32
    assert set(seen[0] + seen[1]) <= set(range(34))
