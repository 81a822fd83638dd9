"""Where this process sits in a job, and how its ranks agree on one listing.

Ranks come from torch.distributed when a process group is up, then from
torchrun's `RANK` / `WORLD_SIZE`, then (0, 1). Workers come from
`torch.utils.data.get_worker_info()`. Every value can be given explicitly.
torch is never imported here: if it is not imported yet, this process is
neither in a process group nor a DataLoader worker.

Every rank must plan from the same listing. Under a process group rank 0
lists and broadcasts; without one (torchrun before `init_process_group`)
every rank lists and the fingerprints are compared through torchrun's store.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from typing import Any, Callable, NamedTuple

from .errors import AirError, ManifestMismatchError, OptionError
from .manifest import Manifest, load_listing, save_listing


class RankZeroError(AirError, RuntimeError):
    """Raised on the other ranks when rank 0 failed at a step every rank waits on; names rank 0's error.

    Only the error's type and message cross: the error itself may not survive pickling.
    """


def process_group() -> Any | None:
    """`torch.distributed` when a process group is initialised, else None (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    return torch.distributed


def detect_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): explicit values, else torch.distributed, else torchrun's env, else (0, 1)."""
    if rank is not None and world_size is not None:
        return rank, world_size
    group = process_group()
    if group is not None:
        found = group.get_rank(), group.get_world_size()
    elif "WORLD_SIZE" in os.environ or "RANK" in os.environ:
        if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
            raise OptionError(
                "only one of RANK and WORLD_SIZE is set in the environment: launch with torchrun, "
                "or pass rank= and world_size= explicitly"
            )
        found = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        found = 0, 1
    return (found[0] if rank is None else rank), (found[1] if world_size is None else world_size)


def detect_worker(worker: int | None = None, num_workers: int | None = None) -> tuple[int, int]:
    """(worker, num_workers): explicit values, else the DataLoader worker info, else (0, 1)."""
    found = 0, 1
    torch = sys.modules.get("torch")
    if torch is not None:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            found = info.id, info.num_workers
    return (found[0] if worker is None else worker), (found[1] if num_workers is None else num_workers)


_frozen_in: int | None = None


def freeze_inherited() -> None:
    """In a DataLoader worker, once: move the objects alive now to a generation the collector skips.

    A full collection writes to every object it visits, so a forked worker's
    first one copies every page of the objects it inherited from its parent:
    with torch and a 10^7-file listing loaded, 31 MB more per worker (PSS),
    measured. `air_core.torch.DataLoader` freezes before forking; this covers
    the plain `torch.utils.data.DataLoader` and datasets' workers. Costs
    nothing to call again (one check).
    """
    global _frozen_in
    torch = sys.modules.get("torch")
    if _frozen_in != os.getpid() and torch is not None and torch.utils.data.get_worker_info() is not None:
        gc.freeze()
        _frozen_in = os.getpid()


class _Failure(NamedTuple):
    """An error on rank 0 as it crosses to the other ranks: `Type: message`, as a traceback ends."""

    error: str


def list_once(make: Callable[[], Manifest], folder: str) -> Manifest:
    """The listing `make()` returns, made once per job when a process group is up.

    Rank 0 lists and saves the listing into `folder` (the node cache's), and
    every rank maps that file: ranks on rank 0's machine share its pages, and
    only ranks that cannot find the file (another machine, another cache
    folder) receive the listing itself from rank 0. An error on rank 0 is
    raised there, and on every other rank (which would otherwise wait on rank 0
    for ever) as a `RankZeroError` naming its type and message.

    Without a process group every rank lists for itself and `check_same`
    compares the fingerprints through torchrun's rendezvous store.
    """
    group = process_group()
    if group is None or group.get_world_size() == 1:
        m = make()
        check_same(m)
        return m
    box: list = [None]
    mine: Manifest | None = None
    error: Exception | None = None
    if group.get_rank() == 0:
        try:
            mine = make()
            box[0] = (save_listing(mine, folder), mine.fingerprint)
        except Exception as e:
            # Its text, not the error: one that does not pickle would fail here and leave the others waiting.
            error, box[0] = e, _Failure("".join(traceback.format_exception_only(e)).strip())
    group.broadcast_object_list(box, src=0)
    if error is not None:
        raise error
    if isinstance(box[0], _Failure):
        raise RankZeroError(f"rank 0 failed to list the files every rank reads: {box[0].error}")
    if mine is None:
        mine = load_listing(*box[0])
    missing: list = [None] * group.get_world_size()
    group.all_gather_object(missing, mine is None)
    if any(missing):
        box = [mine if group.get_rank() == 0 else None]
        group.broadcast_object_list(box, src=0)
        if mine is None:
            mine = box[0]
            save_listing(mine, folder)  # for this machine's DataLoader workers
    return mine


_checks: dict[str, int] = {}


def check_same(manifest: Manifest) -> None:
    """Raise `ManifestMismatchError` unless every rank holds the same fingerprint.

    Uses the process group when there is one, else torchrun's agent store
    (`TORCHELASTIC_USE_AGENT_STORE`); a single process has nothing to compare.
    """
    group = process_group()
    if group is not None and group.get_world_size() > 1:
        prints: list = [None] * group.get_world_size()
        group.all_gather_object(prints, manifest.fingerprint)
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        prints = _exchange_through_store(manifest)
    else:
        return
    if len(set(prints)) > 1:
        raise ManifestMismatchError(
            f"ranks listed different files under {manifest.root} (fingerprints by rank: {prints}): the folder "
            "changed while the job started, or ranks were given different options; retry once writes are "
            "done, or pass the same `manifest=` to every rank"
        )


def _exchange_through_store(manifest: Manifest) -> list[str]:
    from datetime import timedelta

    from torch.distributed import TCPStore

    # Ranks make their streams in the same order, so the n-th listing of a path matches across ranks.
    n = _checks[manifest.root] = _checks.get(manifest.root, 0) + 1
    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                     timeout=timedelta(seconds=300))
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    key = f"air/manifest/{manifest.root}/{n}"
    store.set(f"{key}/{rank}", manifest.fingerprint)
    return [store.get(f"{key}/{r}").decode() for r in range(world)]
