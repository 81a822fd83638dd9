"""Each read task's part read on the node that owns it, wherever Ray runs the task.

Ray Data places a read operator's tasks alike, so a plain
`ray.data.read_datasource` may run a part's task on any node. The part is
owned by one node (rendezvous hashing of its bucket, see `placement`), and
that node's cache holds it from the first execution on. A task that runs on
its part's owner reads it there; one that runs elsewhere asks the owner's
`NodeReader` (an actor pinned to that node, one per node for the job) to
read it, and passes on the blocks it streams back: the bytes then cross
between nodes once more, but never come from the volume again.

An owner that is gone, or that yields no block within `OWNER_WAIT_S`
(busy), never blocks the job: the task reads the part where it runs,
skipping the rows the owner had already sent, so every row is delivered
once. The owner's read is then cancelled: one still queued never runs, and
one running stops at its next block, so it holds none of the owner's
`READS_PER_OWNER` slots for a part read elsewhere.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import pyarrow as pa
import ray
from ray.actor import ActorHandle
from ray.exceptions import GetTimeoutError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

OWNER_WAIT_S = 60.0
# Parts a node reads at once for tasks elsewhere: about the read tasks a node runs at once itself.
READS_PER_OWNER = 16

ReadFn = Callable[[], Iterator[pa.Table]]


@ray.remote(num_cpus=0, max_concurrency=READS_PER_OWNER)
class NodeReader:
    """Reads parts on its node, through its node's cache, for read tasks that run on other nodes."""

    def read(self, read_fn: ReadFn) -> Iterator[pa.Table]:
        yield from read_fn()


def readers(nodes: Iterable[str]) -> dict[str, ActorHandle]:
    """One `NodeReader` per node, pinned there, found by name if this job made it already.

    Made by the process that plans the reads (the driver), so they live as long as the job.
    """
    namespace = ray.get_runtime_context().namespace
    return {node: NodeReader.options(  # type: ignore[attr-defined]
        name=f"air-node-reader-{node}", namespace=namespace, get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote() for node in nodes}


def owned(read_fn: ReadFn, owner: str, reader: ActorHandle) -> ReadFn:
    """`read_fn`, run on `owner` (by its `reader` when the task runs elsewhere), else where the task runs."""

    def read_on_owner() -> Iterator[pa.Table]:
        if ray.get_runtime_context().get_node_id() == owner:
            yield from read_fn()
            return
        sent = 0
        stream = reader.read.options(num_returns="streaming").remote(read_fn)
        try:
            while True:
                ready, _ = ray.wait([stream], timeout=OWNER_WAIT_S)
                if not ready:
                    raise GetTimeoutError(f"no block from node {owner} in {OWNER_WAIT_S:.0f} s")
                try:
                    ref = next(stream)
                except StopIteration:
                    return
                table = ray.get(ref)
                sent += table.num_rows
                yield table
        except RayTaskError as e:  # the read itself failed there: it would fail here too
            raise e.as_instanceof_cause() from None
        except RayError:  # the owner is gone or busy: read here what it had not sent
            ray.cancel(stream)
            yield from _after(read_fn(), sent)

    return read_on_owner


def _after(tables: Iterator[pa.Table], rows: int) -> Iterator[pa.Table]:
    """`tables` without their first `rows` rows."""
    for table in tables:
        if rows >= table.num_rows:
            rows -= table.num_rows
            continue
        yield table.slice(rows) if rows else table
        rows = 0
