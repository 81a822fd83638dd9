"""Resuming a run mid-epoch: what it delivered, and who reads the rest. Pure: dicts and numbers in, lists out.

A run's state is

    {"version": 3, "epoch": e, "fingerprint": ..., "plan": {...}, "resumed_from": <run state> or None,
     "streams": [{"grid": [rank, world_size, worker, num_workers], "consumed": n}, ...]}

Each stream delivered the first `consumed` items of its plan, and the plans of
a resumed run share out what `resumed_from` had left, so resumes chain. (A
stream may carry its own `resumed_from` instead: `state_dict()`s gathered as
they are.)

Who reads the rest: on as many ranks as the run had, each rank keeps what is
left of its own share, so every node's cache still holds the files it reads.
On another number of ranks, or when keeping would leave the shares less even
than the plan made them (ranks that consumed unequal amounts), the rest is
dealt again over the new grid.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from .errors import StateError
from .grid import Grid
from .plan import Balance, Equalize, rank_shares, worker_share

# 2: a resume on as many ranks keeps each rank on its own share; version 1 dealt
# the rest again, so its chained resumes would be read as other plans than ran.
# 3: shuffled epochs take another order (one numpy can compute at scale), so a
# shuffled state saved mid-epoch by an earlier version names other items.
VERSION = 3


def check_version(state: dict) -> None:
    """Refuse a stream or run state whose resumes this version would plan otherwise.

    A state without a version is from version 1 (unless it gathers stream
    states of this version by hand). Earlier versions planned as this one does
    except for the shuffled order, and version 1 also for resumed resumes: a
    state is refused when it depends on what differs.
    """
    streams = state.get("streams", ())
    version = state.get("version", VERSION if streams and all(s.get("version") == VERSION for s in streams) else 1)
    if version == VERSION:
        return
    if version not in (1, 2):
        raise StateError(f"state version {version!r} is not supported; this version reads {VERSION}")
    levels = [state, *streams]
    if state.get("plan", {}).get("shuffle", True) and any(s.get("consumed") or s.get("resumed_from") for s in levels):
        raise StateError(
            f"this state was saved mid-epoch by an earlier version (state version {version}), which shuffled "
            "the epoch in another order: finish the epoch with that version, or start the epoch again"
        )
    if version == 1 and any(s.get("resumed_from") for s in levels):
        raise StateError(
            "this state was saved by an earlier version, which planned resumed epochs differently, and it "
            "resumes a resume: resume from the state it resumed (its 'resumed_from'), or start the epoch again"
        )


def run_state(states: Sequence[dict]) -> dict:
    """A whole run's state from every stream's `state_dict()`, for resuming on any grid.

    The streams of one run were resumed from the same state (or none), so their
    `resumed_from` is kept once, at the run level: repeated in every stream, it
    would multiply the state's size by the number of streams at each chained
    resume. Raises `StateError` when the states are not from one run.
    """
    if not states:
        raise StateError("no stream states to gather: pass the state_dict() of every stream of the run")
    first = states[0]
    for s in states:
        check_version(s)
    for key in ("epoch", "fingerprint", "plan", "resumed_from"):
        if any(s[key] != first[key] for s in states):
            raise StateError(
                f"the stream states differ in {key!r}: gather the state_dict() of every stream of one run, "
                "at one point of one epoch"
            )
    return {"version": VERSION, "epoch": first["epoch"], "fingerprint": first["fingerprint"],
            "plan": dict(first["plan"]), "resumed_from": first["resumed_from"],
            "streams": [{"grid": list(s["grid"]), "consumed": s["consumed"]} for s in states]}


def plan(
    sizes: Sequence[int],
    grid: Grid,
    run: dict | None,
    *,
    epoch: int = 0,
    seed: int = 0,
    shuffle: bool = False,
    balance: Balance = "bytes",
    equalize: Equalize = "none",
) -> list[int]:
    """The items one stream reads in `epoch` after resuming `run` (None: from the epoch's start), in order."""
    planner = _Planner(sizes, epoch, dict(seed=seed, shuffle=shuffle, balance=balance, equalize=equalize))
    return planner.stream(run, grid)


def delivered(
    sizes: Sequence[int],
    run: dict,
    *,
    seed: int = 0,
    shuffle: bool = False,
    balance: Balance = "bytes",
    equalize: Equalize = "none",
) -> set[int]:
    """The items a run had delivered, from its streams' saved positions."""
    return _Planner(sizes, run["epoch"], dict(seed=seed, shuffle=shuffle, balance=balance,
                                              equalize=equalize)).delivered(run)


class _Planner:
    """Shares and deliveries of one epoch's chain of resumes, each level computed once.

    Levels are keyed by object identity: streams that share one `resumed_from`
    object cost one computation, so chained resumes cost linear, not
    exponential, time in their depth.
    """

    def __init__(self, sizes: Sequence[int], epoch: int, opts: dict) -> None:
        self.sizes, self.epoch, self.opts = sizes, epoch, opts
        self._shares: dict[tuple[int, int], list[list[int]]] = {}
        self._streams: dict[tuple[int, Grid], list[int]] = {}
        self._delivered: dict[int, set[int]] = {}

    def stream(self, run: dict | None, grid: Grid) -> list[int]:
        key = (id(run), grid)
        if key not in self._streams:  # asked twice per stream: for its rank's remainder and for the delivered set
            share = self.shares(run, grid.world_size)[grid.rank]
            self._streams[key] = worker_share(share, self.sizes, worker=grid.worker, num_workers=grid.num_workers,
                                              balance=self.opts["balance"])
        return self._streams[key]

    def shares(self, run: dict | None, world_size: int) -> list[list[int]]:
        """Every rank's items after resuming `run` on `world_size` ranks."""
        key = (id(run), world_size)
        if key not in self._shares:
            if run is None:
                out = rank_shares(self.sizes, world_size=world_size, epoch=self.epoch, **self.opts)
            else:
                out = self._kept(run, world_size) or rank_shares(
                    self.sizes, world_size=world_size, epoch=self.epoch, exclude=self.delivered(run), **self.opts)
            self._shares[key] = out
        return self._shares[key]

    def _kept(self, run: dict, world_size: int) -> list[list[int]] | None:
        """What is left of each rank's own share, if the run had `world_size` ranks and that stays as even."""
        streams = run["streams"]
        if not streams or any(Grid(*s["grid"]).world_size != world_size for s in streams):
            return None
        first = streams[0]
        prior = first["resumed_from"] if "resumed_from" in first else run.get("resumed_from")
        own = self.shares(prior, world_size)
        taken = [Counter() for _ in own]  # a count per item: a padded share holds an item twice
        for s in streams:
            g = Grid(*s["grid"])
            taken[g.rank].update(self.stream(prior, g)[: s["consumed"]])
        kept = [[i for i in share if not _take(gone, i)] for share, gone in zip(own, taken)]
        spread = max(map(len, own)) - min(map(len, own))
        return kept if max(map(len, kept)) - min(map(len, kept)) <= spread else None

    def delivered(self, run: dict) -> set[int]:
        if id(run) not in self._delivered:
            shared = run.get("resumed_from")
            out = set(self.delivered(shared)) if shared else set()
            for s in run["streams"]:
                prior = s["resumed_from"] if "resumed_from" in s else shared
                if prior and prior is not shared:  # a stream that carries its own
                    out |= self.delivered(prior)
                out.update(self.stream(prior, Grid(*s["grid"]))[: s["consumed"]])
            self._delivered[id(run)] = out
        return self._delivered[id(run)]


def _take(counts: Counter, item: int) -> bool:
    """Count one occurrence of `item` off; whether there was one."""
    if counts[item]:
        counts[item] -= 1
        return True
    return False
