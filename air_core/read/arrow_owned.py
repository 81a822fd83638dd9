"""Bytes handed to Arrow's own threads must be Arrow's: a Python object there can abort the process at exit.

pyarrow parses JSON and CSV blocks, and decodes a Parquet row group's
columns, on its CPU thread pool; it pre-buffers a Parquet file's ranges by
reads on its I/O thread pool. A task on either pool may drop the last
reference to its input after the caller already has its table. When the
input is Python memory (`bytes`, an `mmap`, a Python file), dropping it
takes the GIL; in a process that is exiting, a thread that asks for the GIL
is ended in place, and its unwinding through Arrow's C++ destructors calls
`std::terminate`: the process prints "terminate called without an active
exception" and exits 134 after its work is done (seen here in 5 of 50 runs
reading a Parquet file by row-group ranges, cores busy). Every read that
Arrow runs on a pool is therefore given a buffer that Arrow owns, or,
where the input is a Python file, runs on the calling thread (no threads,
no pre-buffering).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def owned(data) -> pa.Buffer:
    """`data` (any bytes-like object) copied into a buffer Arrow allocated (16 MiB: ~3 ms here)."""
    buffer = pa.allocate_buffer(len(data))
    if len(data):
        np.frombuffer(buffer, np.uint8)[:] = np.frombuffer(data, np.uint8)
    return buffer
