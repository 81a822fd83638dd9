"""Streams read through forked DataLoader workers after their parent read: no deadlock, every row once.

A worker forked while its parent's fetch threads are at work inherits their
locks and handles as they stood at the fork (TRL's `SFTTrainer` always takes
a first row in its constructor): what a process needs is made again in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from air_core import FileStream

from conftest import ROOT, wait_for
from test_cache import slow_env

SCRIPT = ROOT / "tests" / "scripts" / "fork_after_reads.py"


def test_a_forked_child_reads_through_a_cache_handle_of_its_own(volume):
    paths = volume.files("d", 40)
    stream = FileStream(volume.path("d"), rank=0, world_size=1)
    mine = iter(stream)
    next(mine)
    parents = stream.cache
    assert _in_a_child_forked_while_held(parents._lock,
                                         lambda: stream.cache is not parents and sorted(f.path for f in stream) == paths)


def _in_a_child_forked_while_held(lock, check) -> bool:
    """Whether `check()` holds in a child forked while a thread of this process holds `lock`, as a fetch thread
    may at any time."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait()

    threading.Thread(target=hold, daemon=True).start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if check() else 1)
    release.set()
    codes: list[int] = []
    try:
        wait_for(lambda: _exited(pid, codes), 60, "the forked child")
    finally:
        if not codes:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    return codes == [0]


def _exited(pid: int, codes: list[int]) -> bool:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        codes.append(os.waitstatus_to_exitcode(status))
    return bool(done)


@pytest.mark.slow
@pytest.mark.parametrize("door", ["core", "hf"])
def test_workers_forked_while_the_parent_reads_deliver_every_file_once(volume, netvol_so, door):
    paths = volume.files("d", 300, size=lambda i: 20_000 + i)
    env = slow_env(netvol_so, volume)  # 10 ms an open: the parent's reads are in flight at each fork
    out = subprocess.run([sys.executable, str(SCRIPT), door, volume.path("d"), "5"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    passes = json.loads(out.stdout)
    assert len(passes) == 5
    for got in passes:
        assert sorted(got) == paths  # each file exactly once, in every pass


def _chats(volume, rows: int) -> None:
    for part in range(4):
        volume.write(f"chat/part{part}.jsonl", "".join(
            json.dumps({"messages": [{"role": "user", "content": f"row{k} hello"},
                                     {"role": "assistant", "content": "hello there"}]}) + "\n"
            for k in range(part, rows, 4)))


@pytest.mark.slow
def test_sft_trainer_built_on_the_stream_trains_through_forked_workers(volume, netvol_so, tmp_path):
    _chats(volume, 400)
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "scripts" / "sft_forked_workers.py"),
                          volume.path("chat"), str(tmp_path / "out"), "6"], env=slow_env(netvol_so, volume),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"steps": 6}
