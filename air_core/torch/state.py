"""A DataLoader's saved progress: what every rank delivered, in a compact form. Pure: dicts in, dicts out.

A run's progress is

    {"version": 3, "epoch": e, "fingerprint": ..., "options": {...},
     "resumed_from": <an earlier progress of epoch e> or None,
     "streams": [{"grid": [rank, world_size, worker, num_workers], "consumed": n}, ...]}

Each stream delivered the first `consumed` items of its plan, planned over what
`resumed_from` had left. Resumes within an epoch chain through `resumed_from`,
held once per level: this is the run state `air_core.run_state` makes, which
`FileStream.load_state_dict` resumes on any grid (see `air_core.planning.resume`).

`DataLoader.state_dict()` returns `encode(progress)`: `{"version": 3, "run":
<progress as JSON text>}`. Two leaves whatever the grid, so a fresh loader's
`state_dict()` is a template that `torch.distributed.checkpoint.load` fills in
(it loads only the keys of its template, and a nested state's keys vary with
the number of streams).
"""

from __future__ import annotations

import json
from typing import Any

from ..doors import VERSION, StateError, upgrade

_KEYS = ("version", "epoch", "fingerprint", "options", "resumed_from", "streams")


def fresh(epoch: int, fingerprint: str, options: dict) -> dict[str, Any]:
    """The progress of a run about to start `epoch` with nothing delivered."""
    return {"version": VERSION, "epoch": epoch, "fingerprint": fingerprint, "options": dict(options),
            "resumed_from": None, "streams": []}


def report(epoch: int, finished: bool, resumed_from: dict | None, streams: list[dict]) -> dict[str, Any]:
    """One rank's progress, to be gathered from every rank and merged."""
    return {"epoch": epoch, "finished": finished, "resumed_from": resumed_from,
            "streams": sorted(streams, key=lambda s: s["grid"])}


def merge(reports: list[dict], fingerprint: str, options: dict) -> dict[str, Any]:
    """Every rank's report -> the run's saved state (the next epoch once every rank finished this one)."""
    epochs = {r["epoch"] for r in reports}
    if len(epochs) > 1:
        raise StateError(
            f"ranks are in different epochs ({sorted(epochs)}): call state_dict() on every rank at the "
            "same step of the same epoch"
        )
    if any(r["resumed_from"] != reports[0]["resumed_from"] for r in reports):
        raise StateError(
            "ranks resumed from different states: load the same state_dict on every rank, then start "
            "iterating on every rank before saving again"
        )
    epoch = epochs.pop()
    if all(r["finished"] for r in reports):
        return fresh(epoch + 1, fingerprint, options)
    streams = [s for r in reports for s in r["streams"]]
    before = reports[0]["resumed_from"]
    if not streams and before is not None:
        return before  # nothing delivered since the resume: the run stands where it was
    state = fresh(epoch, fingerprint, options)
    state["resumed_from"], state["streams"] = before, streams
    return state


def encode(progress: dict) -> dict[str, Any]:
    """The saved form of a run's progress."""
    return {"version": VERSION, "run": json.dumps(progress, separators=(",", ":"))}


def decode(saved: Any) -> dict[str, Any]:
    """The progress in a saved DataLoader state; a StateError saying why when it is not one."""
    if isinstance(saved, dict) and "per_worker" in saved:
        raise StateError(
            "this state was saved by databricks.air.data's DataLoader, whose per-worker offsets follow "
            "another partition: start the epoch again, or finish it with the loader that saved it"
        )
    if not isinstance(saved, dict) or set(saved) != {"version", "run"}:
        raise StateError(f"not a saved DataLoader state (expected the keys 'version' and 'run'): {saved!r:.200}")
    if saved["version"] not in range(2, VERSION + 1):
        raise StateError(f"DataLoader state version {saved['version']!r} is not supported; this version "
                         f"reads versions 2 to {VERSION}")
    try:
        progress = json.loads(saved["run"])
    except (TypeError, ValueError) as e:
        raise StateError(f"the saved DataLoader state is damaged: {e}") from None
    return _check(upgrade(progress))  # an earlier version's progress is read unless its plans differ


def _check(progress: Any) -> dict[str, Any]:
    if not isinstance(progress, dict) or any(k not in progress for k in _KEYS):
        raise StateError(f"the saved DataLoader state is damaged (expected the keys {list(_KEYS)}): "
                         f"{progress!r:.200}")
    if progress["resumed_from"] is not None and _check(progress["resumed_from"])["epoch"] != progress["epoch"]:
        raise StateError("the saved DataLoader state is damaged: it resumed from another epoch")
    return progress


def is_fresh(state: dict) -> bool:
    """Whether the progress is an epoch's start: nothing delivered yet."""
    return not state["streams"] and state["resumed_from"] is None

