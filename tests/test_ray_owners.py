"""A part read by its owner node's NodeReader; a lost, failing or busy owner never blocks nor duplicates rows."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

pytestmark = pytest.mark.slow  # a Ray cluster


def _blocks(fail_in_actor_after: int | None = None, sleep_in_actor: float = 0.0):
    """A read function of 5 blocks of 10 rows; in an actor it may die after some blocks, or stall first."""
    import ray

    def read():
        in_actor = ray.get_runtime_context().get_actor_id() is not None
        if in_actor and sleep_in_actor:
            time.sleep(sleep_in_actor)
        for k in range(5):
            if in_actor and fail_in_actor_after is not None and k == fail_in_actor_after:
                os._exit(1)
            yield pa.table({"id": list(range(10 * k, 10 * k + 10))})

    return read


def _slow_on_the_owner(every_s: float):
    """A read function of 50 one-row blocks; in an actor, each block comes `every_s` seconds after the last."""
    import ray

    def read():
        in_actor = ray.get_runtime_context().get_actor_id() is not None
        for k in range(50):
            if in_actor:
                time.sleep(every_s)
            yield pa.table({"id": [k]})

    return read


def _on_the_owner_only():
    """A read function of 5 blocks of 10 rows, read in an actor only: a task that reads it where it runs fails."""
    import ray

    def read():
        if ray.get_runtime_context().get_actor_id() is None:
            raise AssertionError("read by the task, not by the owner: the owner had no free slot")
        for k in range(5):
            yield pa.table({"id": list(range(10 * k, 10 * k + 10))})

    return read


def _ids(tables) -> list[int]:
    return [i for t in tables for i in t.column("id").to_pylist()]


def test_an_owner_elsewhere_reads_the_part_and_streams_it_back(ray_cluster):
    from air_ray import owners

    here = ray_cluster.get_runtime_context().get_node_id()
    reader = owners.readers([here])[here]
    # Posing as a task on another node than the owner's: the owner's reader reads.
    assert _ids(owners.owned(_blocks(), "another-node", reader)()) == list(range(50))
    assert _ids(owners.owned(_blocks(), here, reader)()) == list(range(50))  # on the owner: read in place


def test_an_owner_that_dies_mid_part_leaves_the_rest_to_the_task(ray_cluster):
    from air_ray import owners

    reader = owners.NodeReader.options(max_restarts=0).remote()
    assert _ids(owners.owned(_blocks(fail_in_actor_after=2), "another-node", reader)()) == list(range(50))
    gone = owners.NodeReader.remote()
    ray_cluster.kill(gone)
    assert _ids(owners.owned(_blocks(), "another-node", gone)()) == list(range(50))


def test_a_busy_owner_does_not_hold_the_task(ray_cluster, monkeypatch):
    from air_ray import owners

    monkeypatch.setattr(owners, "OWNER_WAIT_S", 0.5)
    reader = owners.NodeReader.remote()
    began = time.monotonic()
    assert _ids(owners.owned(_blocks(sleep_in_actor=30), "another-node", reader)()) == list(range(50))
    assert time.monotonic() - began < 10
    ray_cluster.kill(reader)


def test_a_part_read_elsewhere_frees_the_owners_slot(ray_cluster, monkeypatch):
    from air_ray import owners

    reader = owners.NodeReader.options(max_concurrency=1).remote()  # one slot
    monkeypatch.setattr(owners, "OWNER_WAIT_S", 0.5)
    # A block a second: too slow, so the task reads the part itself; the owner's read, 50 s long, is cancelled.
    assert _ids(owners.owned(_slow_on_the_owner(every_s=1.0), "another-node", reader)()) == list(range(50))
    monkeypatch.setattr(owners, "OWNER_WAIT_S", 30.0)
    # The slot is free again within a block: the next part is read by the owner (were it still held, the
    # owner would send nothing for 30 s and the task would read the part itself).
    assert _ids(owners.owned(_on_the_owner_only(), "another-node", reader)()) == list(range(50))
    ray_cluster.kill(reader)


def test_a_read_that_fails_on_the_owner_raises_its_own_error(ray_cluster):
    from air_core.errors import RecordError
    from air_ray import owners

    def bad():
        raise RecordError("/Volumes/c/s/v/a.jsonl, line 3: not a valid JSON object")
        yield

    reader = owners.NodeReader.remote()
    with pytest.raises(RecordError, match="line 3"):
        list(owners.owned(bad, "another-node", reader)())
