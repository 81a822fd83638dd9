"""Pack SRC into DST in this process, optionally dying by SIGKILL partway; prints the PackResult as JSON.

Usage: pack_run.py SRC DST SHARD_SIZE [KILL_AT]
KILL_AT (optional): the number of files put onto the volume (shards, their offsets, the index) after
which the process kills itself with SIGKILL before the next one is there: halfway through copying it, or, for
a shard (copied as it is built), once copied whole under its hidden name, before it gets its name.
"""

import dataclasses
import json
import os
import signal
import sys

import air_core
from air_core.packs import write as pack_module
src, dst, shard_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
kill_at = int(sys.argv[4]) if len(sys.argv) > 4 else None
copy = pack_module._copy_onto_volume
copied = 0


def copy_then_die(local: str, target: str) -> None:
    global copied
    if copied == kill_at:  # die halfway through writing this file onto the volume
        folder, name = os.path.split(target)
        with open(local, "rb") as f, open(os.path.join(folder, f".{name}.dying.part"), "wb") as out:
            out.write(f.read(os.path.getsize(local) // 2))
            out.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    copy(local, target)
    copied += 1


def publish_then_die(tmp: str, target: str) -> None:
    global copied
    if copied == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    publish(tmp, target)
    copied += 1


publish = pack_module._publish_shard
pack_module._copy_onto_volume = copy_then_die
pack_module._publish_shard = publish_then_die
result = air_core.pack(src, dst, shard_size=shard_size, row_group_size=shard_size // 4, threads=8)
print(json.dumps(dataclasses.asdict(result)))
