"""Resuming a run mid-epoch: what it delivered, and who reads the rest. Pure: dicts and numbers in, lists out.

A stream's state (`StreamState`, what `FileStream.state_dict()` and
`RowStream.state_dict()` give) and a run's (`RunState`, what `run_state`
gathers from them) are plain dicts of the shapes declared below: each stream
delivered the first `consumed` items of its plan (a `RowStream`: whole runs,
then rows of the next), and the plans of a resumed run share out what
`resumed_from` had left, so resumes chain. (A stream may carry its own
`resumed_from` instead: `state_dict()`s gathered as they are.)

Who reads the rest: on as many ranks as the run had, each rank keeps what is
left of its own share, so every node's cache still holds the files it reads.
On another number of ranks, or when keeping would leave the shares less even
than the plan made them (ranks that consumed unequal amounts), the rest is
dealt again over the new grid.

`options` are the run's `shares.Planning` as a dict (seed, shuffle, balance, equalize); states of
versions 1 and 2 called them `plan`, and `upgrade` renames them.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypedDict

import numpy as np

from ..errors import StateError
from ..grid import Grid
from .shares import Deal, Epoch, Planning, worker_parts


class Options(TypedDict):
    """A plan's options: the same in every stream of a run."""

    seed: int
    shuffle: bool
    balance: str
    equalize: str


class StreamPosition(TypedDict):
    """Where one stream of a run stands: its place in the grid, [rank, world_size, worker, num_workers], and what it
    delivered (`FileStream`: items; `RowStream`: [whole runs, rows of the next])."""

    grid: list[int]
    consumed: int | list[int]


class StreamState(StreamPosition):
    """One stream's `state_dict()`: its position, the plan it is in, and the files or records it left out."""

    version: int
    epoch: int
    fingerprint: str
    options: Options
    skipped: list
    resumed_from: RunState | None


class RunState(TypedDict):
    """A whole run's state (`run_state`): every stream's position in one plan, the run it resumed, if any."""

    version: int
    epoch: int
    fingerprint: str
    options: Options
    resumed_from: RunState | None
    streams: list[StreamPosition]


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


def upgrade(state: dict) -> dict:
    """`state` in this version's form, once `check_version` accepts it (older names renamed)."""
    check_version(state)
    return _renamed(state)


def _renamed(state: dict) -> dict:
    out = {("options" if k == "plan" else k): v for k, v in state.items()}
    if "epoch" in out:  # a state, not a stream's position in one
        out["version"] = VERSION
    if out.get("resumed_from"):
        out["resumed_from"] = _renamed(out["resumed_from"])
    if "streams" in out:
        out["streams"] = [_renamed(s) for s in out["streams"]]
    return out


def run_state(states: Sequence[StreamState]) -> RunState:
    """A whole run's state from every stream's `state_dict()`, for resuming on any grid.

    The streams of one run were resumed from the same state (or none), so their
    `resumed_from` is kept once, at the run level: repeated in every stream, it
    would multiply the state's size by the number of streams at each chained
    resume. Raises `StateError` when the states are not from one run.
    """
    if not states:
        raise StateError("no stream states to gather: pass the state_dict() of every stream of the run")
    states = [upgrade(s) for s in states]
    first = states[0]
    for key in ("epoch", "fingerprint", "options", "resumed_from"):
        if any(s[key] != first[key] for s in states):
            raise StateError(
                f"the stream states differ in {key!r}: gather the state_dict() of every stream of one run, "
                "at one point of one epoch"
            )
    return {"version": VERSION, "epoch": first["epoch"], "fingerprint": first["fingerprint"],
            "options": dict(first["options"]), "resumed_from": first["resumed_from"],
            "streams": [{"grid": list(s["grid"]), "consumed": s["consumed"]} for s in states]}


def plan_resume(
    sizes: Sequence[int],
    grid: Grid,
    state: dict | None,
    *,
    planning: Planning = Planning(),
    epoch: int = 0,
    by_size: np.ndarray | None = None,
    deal_order: Callable[[int], np.ndarray] | None = None,
) -> np.ndarray:
    """The items one stream reads in `epoch` after resuming the run `state` (None: from the epoch's start), in
    order, as an int64 array: a stream that reads them a chunk at a time makes Python ints of a chunk only (a
    DataLoader worker's share of 10^7 files as ints is ~8 MB more).

    `by_size`: `shares.largest_first(sizes)`, when the listing carries it.
    `deal_order`: the order the bytes deal over a number of ranks follows,
    where it depends on that number (a mixture's, `mixture.Epoch.deal_order`);
    default: largest first.
    """
    return _Planner(Epoch(sizes, epoch=epoch, planning=planning, by_size=by_size), deal_order).stream(state, grid)


def delivered(sizes: Sequence[int], state: dict, *, planning: Planning = Planning()) -> set[int]:
    """The items the run `state` had delivered, from its streams' saved positions."""
    planner = _Planner(Epoch(sizes, epoch=state["epoch"], planning=planning))
    return set(np.flatnonzero(planner.delivered(state)).tolist())


class _Planner:
    """Shares and deliveries of one epoch's chain of resumes, as arrays, each level computed once.

    Every level deals in the orders of one `Epoch`, computed once.

    Levels are keyed by object identity: streams that share one `resumed_from`
    object cost one computation, so chained resumes cost linear, not
    exponential, time in their depth.
    """

    def __init__(self, epoch: Epoch, deal_order: Callable[[int], np.ndarray] | None = None) -> None:
        self.epoch, self.sizes, self.balance = epoch, epoch.sizes, epoch.planning.balance
        self._deal_order = deal_order
        self._epochs: dict[int, Epoch] = {}
        self._shares: dict[tuple[int, int], list[np.ndarray]] = {}
        self._first: dict[tuple[None, int, int], np.ndarray] = {}
        self._parts: dict[tuple[int, int, int, int], np.ndarray] = {}
        self._delivered: dict[int, np.ndarray] = {}

    def stream(self, state: dict | None, grid: Grid, consumed: int | None = None) -> np.ndarray:
        """The items of one stream's plan after resuming `state` (the first `consumed` of them)."""
        share = self.share(state, grid.world_size, grid.rank)
        return share[self.positions(state, grid)[:consumed]]

    def positions(self, state: dict | None, grid: Grid) -> np.ndarray:
        """Where one stream's items sit in its rank's share after resuming `state`."""
        key = (id(state), grid.world_size, grid.rank, grid.num_workers)
        if key not in self._parts:  # the rank's deal over its workers, computed once for all of them
            share = self.share(state, grid.world_size, grid.rank)
            self._parts[key] = worker_parts(share, self.sizes, grid.num_workers, self.balance)
        return np.flatnonzero(self._parts[key] == grid.worker)

    def share(self, state: dict | None, world_size: int, rank: int) -> np.ndarray:
        """One rank's items after resuming `state`; at an epoch's start, without dealing the others' in order."""
        if state is None and (id(None), world_size) not in self._shares:
            key = (None, world_size, rank)
            if key not in self._first:
                self._first[key] = Deal(self.dealt(world_size), world_size, excluded=None).share(rank)
            return self._first[key]
        return self.shares(state, world_size)[rank]

    def shares(self, state: dict | None, world_size: int) -> list[np.ndarray]:
        """Every rank's items after resuming `state` on `world_size` ranks."""
        key = (id(state), world_size)
        if key not in self._shares:
            out = None if state is None else self._kept(state, world_size)
            if out is None:
                gone = None if state is None else self.delivered(state)
                if gone is not None and not gone.any():
                    gone = None  # nothing delivered: planned as at the epoch's start
                out = Deal(self.dealt(world_size), world_size, excluded=gone).shares()
            self._shares[key] = out
        return self._shares[key]

    def dealt(self, world_size: int) -> Epoch:
        """The epoch as the deal over `world_size` ranks orders it."""
        if self._deal_order is None:
            return self.epoch
        if world_size not in self._epochs:
            self._epochs[world_size] = self.epoch.dealt_in(self._deal_order(world_size))
        return self._epochs[world_size]

    def _kept(self, state: dict, world_size: int) -> list[np.ndarray] | None:
        """What is left of each rank's own share, if the run had `world_size` ranks and that stays as even."""
        streams = state["streams"]
        if not streams or any(Grid(*s["grid"]).world_size != world_size for s in streams):
            return None
        first = streams[0]
        prior = first["resumed_from"] if "resumed_from" in first else state.get("resumed_from")
        own = self.shares(prior, world_size)
        taken = [np.zeros(len(share), bool) for share in own]
        for s in streams:
            g = Grid(*s["grid"])
            taken[g.rank][self.positions(prior, g)[: s["consumed"]]] = True
        repeated = np.bincount(np.concatenate(own), minlength=len(self.sizes)) > 1  # padding repeats an item or two
        kept = [share[~_first_of_each(share, used, repeated)] for share, used in zip(own, taken)]
        spread = max(map(len, own)) - min(map(len, own))
        return kept if max(map(len, kept)) - min(map(len, kept)) <= spread else None

    def delivered(self, state: dict) -> np.ndarray:
        """A mask of the items the run `state` had delivered."""
        if id(state) not in self._delivered:
            shared = state.get("resumed_from")
            out = self.delivered(shared).copy() if shared else np.zeros(len(self.sizes), bool)
            for s in state["streams"]:
                prior = s["resumed_from"] if "resumed_from" in s else shared
                if prior and prior is not shared:  # a stream that carries its own
                    out |= self.delivered(prior)
                out[self.stream(prior, Grid(*s["grid"]), s["consumed"])] = True
            self._delivered[id(state)] = out
        return self._delivered[id(state)]


def _first_of_each(share: np.ndarray, used: np.ndarray, repeated: np.ndarray) -> np.ndarray:
    """The positions to take off `share` for the items read at `used`: of an item held twice, its first.

    Streams read a padded share's repeat wherever their deal put it; the rest
    keeps the order of the share without one occurrence per item read.
    `repeated` marks the items that may be held twice.
    """
    gone = used.copy()
    for item in np.unique(share[repeated[share]]):
        at = np.flatnonzero(share == item)
        gone[at] = np.arange(len(at)) < used[at].sum()
    return gone
