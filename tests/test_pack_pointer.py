"""A pack's small files (its pointer, a generation's marker) written by packers at once: each write goes
through a hidden name of its own, so writers that share a process id (threads here; processes on two machines
of one volume) never mix their bytes."""

from __future__ import annotations

import os
import threading

from air_core.io import volume as volumes
from air_core.packs.store import POINTER, write_whole

WRITERS = 8
ROUNDS = 500


def test_writers_sharing_a_process_id_each_write_the_file_whole(volume):
    volume.local("packed").mkdir()
    target = volumes.parse(volume.path(f"packed/{POINTER}")).local
    payloads = [str(w).encode() * 4000 for w in range(WRITERS)]
    start, errors = threading.Barrier(WRITERS), []

    def writer(payload: bytes) -> None:
        start.wait()
        try:
            for _ in range(ROUNDS):
                write_whole(target, payload)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with open(target, "rb") as f:
        assert f.read() in payloads
    assert os.listdir(volume.local("packed")) == [POINTER]  # no hidden copy left behind
