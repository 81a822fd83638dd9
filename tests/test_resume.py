"""Resume planning (air_core.planning.resume): exactly once across chained resumes, and each rank keeps its own files;
and the same resumes as the pure-Python planner it replaced, item for item."""

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st
from test_plan import OPTS, old_rank_shares, old_worker_share, outcome, plan, rank_shares

from air_core import OptionError, StateError
from air_core.grid import Grid
from air_core.planning import resume
from air_core.planning.resume import VERSION, check_version, upgrade
from air_core.planning.shares import Planning


# The resume planners called with the planning's fields as loose keywords, as the cases draw them.
def resume_plan(sizes, grid, state, *, epoch=0, **planning):
    return resume.plan_resume(sizes, grid, state, planning=Planning(**planning), epoch=epoch).tolist()


def delivered(sizes, state, **planning):
    return resume.delivered(sizes, state, planning=Planning(**planning))


def stop(sizes, run, world_size, num_workers, consumed, opts):
    """Run one level on (world_size x num_workers) from `run`, each stream consuming consumed(rank, worker, n)."""
    streams, got = [], []
    for r in range(world_size):
        for w in range(num_workers):
            items = resume_plan(sizes, Grid(r, world_size, w, num_workers), run, **opts)
            n = consumed(r, w, len(items))
            got += items[:n]
            streams.append({"grid": [r, world_size, w, num_workers], "consumed": n})
    return {"epoch": 0, "resumed_from": run, "streams": streams}, got


def rest(sizes, run, world_size, opts):
    """Every rank's remaining items when resuming `run` on world_size ranks of one worker."""
    return [resume_plan(sizes, Grid(r, world_size), run, **opts) for r in range(world_size)]


def test_delivered_recovers_what_streams_consumed_across_chained_resumes():
    rng = random.Random(3)
    sizes = [rng.randint(1, 1000) for _ in range(97)]
    opts = dict(shuffle=True, seed=1)
    streams = [{"grid": [r, 2, w, 2], "consumed": rng.randint(0, 20), "resumed_from": None, "epoch": 0}
               for r in range(2) for w in range(2)]
    run = {"epoch": 0, "streams": streams}  # stream states gathered as they are: each carries resumed_from
    got = delivered(sizes, run, **opts)
    want = set()
    for s in streams:
        want |= set(plan(sizes, Grid(*s["grid"]), **opts)[: s["consumed"]])
    assert got == want
    # A second resume on a 3 x 1 grid excludes the first run's items and adds its own.
    second = [{"grid": [r, 3, 0, 1], "consumed": 5, "resumed_from": run, "epoch": 0} for r in range(3)]
    got2 = delivered(sizes, {"epoch": 0, "streams": second}, **opts)
    assert got < got2 and len(got2) == len(got) + 15


@pytest.mark.parametrize("equalize", ["none", "pad", "drop"])
def test_a_resume_on_as_many_ranks_keeps_each_rank_on_its_own_files(equalize):
    # In step-locked training every rank has consumed as much as the others; its workers need not have.
    rng = random.Random(7)
    sizes = [rng.randint(1, 5000) for _ in range(203)]
    opts = dict(shuffle=True, seed=2, equalize=equalize)
    own = rank_shares(sizes, world_size=4, **opts)
    run, got = stop(sizes, None, 4, 2, lambda r, w, n: [9, 4][w], opts)
    left = rest(sizes, run, 4, opts)
    for r in range(4):
        assert set(left[r]) <= set(own[r])  # read from this node's cache: no file moved to another rank
    assert len({len(share) for share in left}) == len({len(share) for share in own})
    if equalize == "none":
        assert Counter(got + [i for share in left for i in share]) == Counter(range(203))


@pytest.mark.parametrize("equalize", ["pad", "drop"])
def test_ranks_that_consumed_unequally_get_the_rest_dealt_again_evenly(equalize):
    rng = random.Random(8)
    sizes = [rng.randint(1, 5000) for _ in range(120)]
    opts = dict(equalize=equalize)
    run, got = stop(sizes, None, 3, 1, lambda r, w, n: [3, 10, 0][r], opts)
    left = rest(sizes, run, 3, opts)
    assert len({len(share) for share in left}) == 1  # equal counts: no rank waits at the end
    assert not set(got) & {i for share in left for i in share}


@pytest.mark.parametrize("seed", range(60))
def test_chained_resumes_on_changing_grids_deliver_every_item_once(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 3000) for _ in range(rng.randint(1, 150))]
    equalize = rng.choice(["none", "none", "pad", "drop"])
    opts = dict(shuffle=rng.random() < 0.5, seed=seed, balance=rng.choice(["bytes", "stride"]), equalize=equalize)
    run, got = None, []
    for _ in range(rng.randint(1, 4)):
        world, workers = rng.choice([1, 2, 3, 4]), rng.choice([1, 2, 3])
        equal = rng.random() < 0.5  # step-locked ranks, or streams that stopped anywhere
        take = rng.randint(0, 12)
        run, level = stop(sizes, run, world, workers,
                          lambda r, w, n: min(n, take if equal else rng.randint(0, 12)), opts)
        got += level
    assert delivered(sizes, run, **opts) == set(got)
    world = rng.choice([1, 2, 3, 4])
    left = [i for share in rest(sizes, run, world, opts) for i in share]
    if equalize == "none":
        assert Counter(got + left) == Counter(range(len(sizes)))
    elif equalize == "drop":
        assert max(Counter(got + left).values()) == 1  # leaves items out, never repeats one
    else:
        assert set(got + left) == set(range(len(sizes)))  # repeats items, never leaves one out


def test_earlier_states_are_refused_where_the_new_shuffle_would_misread_them():
    shuffled = {"seed": 0, "shuffle": True, "balance": "bytes", "equalize": "none"}
    stream = {"epoch": 0, "fingerprint": "fp", "plan": shuffled, "grid": [0, 2, 0, 1], "consumed": 5,
              "resumed_from": None}
    for version in (2, None):  # None: version 1, which saved none
        saved = {**stream, "version": version} if version else stream
        with pytest.raises(StateError, match="shuffled the epoch in another order"):
            check_version(saved)
        check_version({**saved, "consumed": 0})  # at the epoch's start: nothing was read in the old order
        check_version({**saved, "plan": {**shuffled, "shuffle": False}})  # unshuffled plans are unchanged
    run = {"version": 2, "epoch": 0, "fingerprint": "fp", "plan": shuffled, "resumed_from": None,
           "streams": [{"grid": [0, 2, 0, 1], "consumed": 0}, {"grid": [1, 2, 0, 1], "consumed": 3}]}
    with pytest.raises(StateError, match="another order"):
        check_version(run)
    check_version({**run, "version": VERSION})
    unshuffled = {**run, "plan": {**shuffled, "shuffle": False}}
    check_version({**unshuffled, "resumed_from": dict(unshuffled)})  # version 2 resumed resumes as this one
    with pytest.raises(StateError, match="resumes a resume"):
        check_version({k: v for k, v in unshuffled.items() if k != "version"} | {"resumed_from": unshuffled})


class OldPlanner:
    """The resume planner before numpy, verbatim but for its plan functions: the reference in test_plan."""

    def __init__(self, sizes, epoch, opts):
        self.sizes, self.epoch, self.opts = sizes, epoch, opts
        self._shares, self._streams, self._delivered = {}, {}, {}

    def stream(self, run, grid):
        key = (id(run), grid)
        if key not in self._streams:
            share = self.shares(run, grid.world_size)[grid.rank]
            self._streams[key] = old_worker_share(share, self.sizes, worker=grid.worker,
                                                  num_workers=grid.num_workers, balance=self.opts["balance"])
        return self._streams[key]

    def shares(self, run, world_size):
        key = (id(run), world_size)
        if key not in self._shares:
            if run is None:
                out = old_rank_shares(self.sizes, world_size=world_size, epoch=self.epoch, **self.opts)
            else:
                out = self._kept(run, world_size) or old_rank_shares(
                    self.sizes, world_size=world_size, epoch=self.epoch, exclude=self.delivered(run), **self.opts)
            self._shares[key] = out
        return self._shares[key]

    def _kept(self, run, world_size):
        streams = run["streams"]
        if not streams or any(Grid(*s["grid"]).world_size != world_size for s in streams):
            return None
        first = streams[0]
        prior = first["resumed_from"] if "resumed_from" in first else run.get("resumed_from")
        own = self.shares(prior, world_size)
        taken = [Counter() for _ in own]
        for s in streams:
            g = Grid(*s["grid"])
            taken[g.rank].update(self.stream(prior, g)[: s["consumed"]])

        def take(counts, item):
            if counts[item]:
                counts[item] -= 1
                return True
            return False

        kept = [[i for i in share if not take(gone, i)] for share, gone in zip(own, taken)]
        spread = max(map(len, own)) - min(map(len, own))
        return kept if max(map(len, kept)) - min(map(len, kept)) <= spread else None

    def delivered(self, run):
        if id(run) not in self._delivered:
            shared = run.get("resumed_from")
            out = set(self.delivered(shared)) if shared else set()
            for s in run["streams"]:
                prior = s["resumed_from"] if "resumed_from" in s else shared
                if prior and prior is not shared:
                    out |= self.delivered(prior)
                out.update(self.stream(prior, Grid(*s["grid"]))[: s["consumed"]])
            self._delivered[id(run)] = out
        return self._delivered[id(run)]


LEVELS = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3), st.booleans(), st.integers(0, 9)),
                  min_size=1, max_size=4)  # (world_size, num_workers, step-locked ranks, items each stream reads)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 7, 5000]) | st.integers(0, 10**6), max_size=60), opts=OPTS,
       levels=LEVELS, carried=st.booleans(), data=st.data())
def test_same_resumes_as_the_pure_python_planner(sizes, opts, levels, carried, data):
    opts = dict(opts)
    epoch = opts.pop("epoch")
    run = None
    for world, workers, equal, take in levels:
        streams = []
        for r in range(world):
            for w in range(workers):
                grid = Grid(r, world, w, workers)
                want = outcome(OldPlanner(sizes, epoch, opts).stream, run, grid)
                assert outcome(resume_plan, sizes, grid, run, epoch=epoch, **opts) == want
                if want is OptionError:
                    return
                n = min(len(want), take if equal else data.draw(st.integers(0, take)))
                streams.append({"grid": [r, world, w, workers], "consumed": n})
        if carried:  # stream states gathered as they are: each carries its resumed_from
            run = {"epoch": epoch, "streams": [{**s, "resumed_from": run} for s in streams]}
        else:
            run = {"epoch": epoch, "resumed_from": run, "streams": streams}
        assert delivered(sizes, run, **opts) == OldPlanner(sizes, epoch, opts).delivered(run)


def test_a_padded_repeat_read_before_its_first_occurrence_takes_the_first_off_the_rest():
    sizes = [1, 5000, 5000, 7, 7, 7, 1]
    opts = dict(seed=0, shuffle=False, balance="bytes", equalize="pad")
    assert rank_shares(sizes, world_size=2, **opts)[0] == [1, 4, 5, 1]  # item 1 repeated to pad rank 0
    assert [plan(sizes, Grid(0, 2, w, 3), **opts) for w in range(3)] == [[1], [1], [4, 5]]
    consumed = {(0, 1): 1, (0, 2): 1, (1, 2): 2}  # worker 1 read the repeat, worker 0 not the first
    run = {"epoch": 0, "resumed_from": None,
           "streams": [{"grid": [r, 2, w, 3], "consumed": consumed.get((r, w), 0)} for r in range(2) for w in range(3)]}
    assert rest(sizes, run, 2, opts) == [[5, 1], [2, 3]] == [OldPlanner(sizes, 0, opts).stream(run, Grid(r, 2))
                                                             for r in range(2)]


def test_upgrade_renames_the_plan_options_of_earlier_states_at_every_level():
    options = {"seed": 0, "shuffle": False, "balance": "bytes", "equalize": "none"}
    inner = {"version": 2, "epoch": 0, "fingerprint": "fp", "plan": options, "resumed_from": None,
             "streams": [{"grid": [0, 1, 0, 1], "consumed": 3}]}
    outer = {**inner, "resumed_from": inner, "streams": [{"grid": [0, 2, 0, 1], "consumed": 1}]}
    got = upgrade(outer)
    assert got["options"] == got["resumed_from"]["options"] == options
    assert "plan" not in got and "plan" not in got["resumed_from"]
    assert got["version"] == got["resumed_from"]["version"] == VERSION
    assert upgrade(got) == got  # this version's states pass as they are
