"""netvol: a local folder that behaves like a network volume, for the tests and benchmarks.

`build(out)` compiles `netvol.c` into a library to load with `LD_PRELOAD`;
every process started with it (and every process those start) sees remote
paths under `NETVOL_PREFIX` with a network's latency, bandwidth, faults and
object-storage write semantics, and can trace what crossed it. README.md
beside this file lists the variables.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("netvol.c")


class Unavailable(RuntimeError):
    """netvol cannot be built here; the message says what to install."""


def build(out: str | os.PathLike) -> str:
    """Compile netvol into the shared library `out` (replaced whole, never half-written); returns its path.

    Uses `$CC`, else `cc`. Raises `Unavailable` where no C compiler is found.
    """
    cc = shutil.which(os.environ.get("CC") or "cc")
    if cc is None:
        raise Unavailable("netvol (the network-volume emulator) needs a C compiler: "
                          "install one (e.g. `apt-get install gcc`) or point $CC at it")
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    proc = subprocess.run([cc, "-O2", "-Wall", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE), "-ldl"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise Unavailable(f"netvol did not compile with {cc}:\n{proc.stderr.strip()}")
    os.replace(tmp, out)
    return str(out)
