"""The mixture planner (air_core.planning.mixture): exact counts per source, every item once before any repeats,
a pure function of its inputs, dealt over any grid and resumed exactly once; and its refusals."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, reject, settings, strategies as st

from air_core import OptionError
from air_core.grid import Grid
from air_core.planning import mixture as mx
from air_core.planning.resume import plan_resume
from air_core.planning.shares import Planning

KINDS = ("proportion", "repeat", "choose")


@st.composite
def mixtures(draw):
    """(sizes per source, kind, weights, epoch_size) of a mixture of 1-4 small sources."""
    n = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
    kind = draw(st.sampled_from(KINDS))
    if kind == "proportion":
        weights = draw(st.lists(st.sampled_from([0, 0.1, 0.25, 0.5, 1, 3]), min_size=len(n), max_size=len(n)))
    elif kind == "repeat":
        weights = draw(st.lists(st.sampled_from([0, 0.3, 0.5, 1, 2, 2.5]), min_size=len(n), max_size=len(n)))
    else:
        weights = draw(st.lists(st.integers(0, 60), min_size=len(n), max_size=len(n)))
    if not any(weights):
        weights[0] = 1
    epoch_size = draw(st.one_of(st.none(), st.integers(1, 150))) if kind == "proportion" else None
    seed = draw(st.integers(0, 5))
    sizes = [np.random.default_rng(seed + i).integers(1, 500, k) for i, k in enumerate(n)]
    return sizes, kind, weights, epoch_size, seed


def epoch_of(sizes, kind, weights, epoch_size, seed, epoch):
    try:
        counts = mx.source_counts([len(s) for s in sizes], kind, weights, epoch_size=epoch_size)
    except OptionError as e:  # weights too small for one item: refused, see test_bad_weights_...
        assert "an epoch of no items" in str(e)
        reject()
    return mx.Mixture(sizes, counts).epoch(epoch, seed), counts


@given(mixtures(), st.integers(0, 30))
@settings(max_examples=150, deadline=None)
def test_every_epoch_holds_each_sources_count_exactly(mix, epoch):
    sizes, kind, weights, epoch_size, seed = mix
    ep, counts = epoch_of(sizes, kind, weights, epoch_size, seed, epoch)
    assert np.bincount(ep.source_of(ep.items), minlength=len(sizes)).tolist() == counts
    if kind == "proportion":
        assert sum(counts) == (epoch_size or sum(len(s) for s in sizes))
        quotas = np.array(weights) / sum(weights) * sum(counts)
        assert (np.abs(np.array(counts) - quotas) < 1).all()  # largest remainder: within one of the quota
    elif kind == "choose":
        assert counts == list(weights)
    else:
        assert abs(sum(counts) - sum(w * len(s) for w, s in zip(weights, sizes))) <= 0.5 + 1e-9
    assert (ep.sizes == np.concatenate(sizes)[ep.items]).all()


@given(st.integers(1, 50), st.integers(0, 120), st.integers(0, 3), st.integers(1, 25))
@settings(max_examples=200, deadline=None)
def test_a_source_gives_every_item_once_before_any_twice_across_epochs(n, k, seed, epochs):
    whole, r = divmod(k, n)
    seen = np.zeros(n, np.int64)
    for e in range(epochs):
        got = mx.picks(n, k, seed=seed, epoch=e, source=1)
        assert len(got) == k and (np.diff(got) >= 0).all()
        seen += np.bincount(got, minlength=n) - whole  # every item `whole` times each epoch, then the walk
        # After e + 1 epochs the walk is at (e + 1) * r: each item was taken once per completed cycle, and the
        # items of the cycle under way once more.
        done, partial = divmod((e + 1) * r, n)
        assert sorted(seen.tolist()) == [done] * (n - partial) + [done + 1] * partial


@given(st.integers(2, 60), st.data(), st.integers(0, 3), st.integers(0, 4))
@settings(max_examples=300, deadline=None)
def test_no_epoch_holds_an_item_twice_where_its_walk_wraps_into_the_next_pass(n, data, seed, source):
    # Both kinds of wrap: r <= n/2 (a pass's head defers the tail's items) and r > n/2, where a pass is only a
    # head and a tail and runs of such passes nest their heads.
    k = data.draw(st.integers(1, n))
    wrapped = [e for e in range(60) if e * k % n + k > n]
    for e in data.draw(st.lists(st.sampled_from(wrapped), max_size=6)) if wrapped else []:
        got = mx.picks(n, k, seed=seed, epoch=e, source=source)
        assert len(np.unique(got)) == k, f"epoch {e} of {k} of {n} items holds an item twice"


@given(mixtures(), st.integers(0, 40))
@settings(max_examples=150, deadline=None)
def test_a_source_holding_no_more_than_its_items_gives_an_epoch_none_twice(mix, epoch):
    sizes, kind, weights, epoch_size, seed = mix
    ep, counts = epoch_of(sizes, kind, weights, epoch_size, seed, epoch)
    for i, (s, k) in enumerate(zip(sizes, counts)):
        if k <= len(s):
            mine = ep.items[ep.source_of(ep.items) == i]
            assert len(np.unique(mine)) == k, f"source {i}: {k} of {len(s)} items, one twice in epoch {epoch}"


def test_forty_items_at_eighteen_an_epoch_never_repeat_one_in_an_epoch():
    for e in range(40):
        assert len(set(mx.picks(40, 18, seed=5, epoch=e, source=0).tolist())) == 18


def test_a_small_source_repeats_whole_plus_a_sample():
    got = Counter(mx.picks(3, 7, seed=0, epoch=4, source=0).tolist())
    assert sorted(got.values()) == [2, 2, 3]


@given(mixtures(), st.integers(0, 10))
@settings(max_examples=60, deadline=None)
def test_an_epoch_is_a_pure_function_of_its_inputs_computed_without_the_ones_before(mix, epoch):
    sizes, kind, weights, epoch_size, seed = mix
    later, counts = epoch_of(sizes, kind, weights, epoch_size, seed, epoch)
    shared = mx.Mixture(sizes, counts)  # what its epochs share (homes per world size, the interleave) kept
    for e in range(epoch):
        epoch_of(sizes, kind, weights, epoch_size, seed, e)
        for world_size in (2, 3):
            shared.epoch(e, seed).deal_order(world_size)
    again, _ = epoch_of([s.copy() for s in sizes], kind, list(weights), epoch_size, seed, epoch)
    for other in (again, shared.epoch(epoch, seed)):
        assert (later.items == other.items).all() and (later.sizes == other.sizes).all()
        assert (later.deal_order(3) == other.deal_order(3)).all()
        assert (other.items_at(np.arange(len(other.items))[::-1]) == other.items[::-1]).all()


@given(mixtures(), st.integers(1, 9))
@settings(max_examples=40, deadline=None)
def test_the_deal_order_depends_on_the_order_of_sizes_alone_however_large(mix, world_size):
    sizes, kind, weights, epoch_size, seed = mix
    ep, counts = epoch_of(sizes, kind, weights, epoch_size, seed, 2)
    # Sizes near 2**62 bytes leave too few bits to pack (rank, size, slot) in an int64: sorted another way.
    huge = mx.Mixture([s << 53 for s in sizes], counts).epoch(2, seed)
    assert (huge.deal_order(world_size) == ep.deal_order(world_size)).all()


def shares(ep, world_size, num_workers, equalize, run=None, shuffle=True):
    """Every stream's slots after resuming `run`, through the resume planner, in the mixture's deal order."""
    planning = Planning(seed=9, shuffle=shuffle, equalize=equalize)
    return {(r, w): plan_resume(ep.sizes, Grid(r, world_size, w, num_workers), run, planning=planning, epoch=2,
                                deal_order=ep.deal_order).tolist()
            for r in range(world_size) for w in range(num_workers)}


@given(mixtures(), st.integers(1, 5), st.integers(1, 3), st.sampled_from(["none", "pad", "drop"]))
@settings(max_examples=100, deadline=None)
def test_the_streams_of_any_grid_read_the_epochs_items_once_with_equal_counts_when_asked(mix, world_size,
                                                                                         num_workers, equalize):
    sizes, kind, weights, epoch_size, seed = mix
    ep, _ = epoch_of(sizes, kind, weights, epoch_size, seed, 3)
    if equalize == "drop" and len(ep.items) < world_size:
        return
    got = shares(ep, world_size, num_workers, equalize)
    per_rank = Counter()
    for (r, _), slots in got.items():
        per_rank[r] += len(slots)
    slots = [s for part in got.values() for s in part]
    if equalize == "none":
        assert sorted(slots) == list(range(len(ep.items)))  # every slot once: the epoch's multiset of items
        assert max(per_rank.values()) - min(per_rank.values(), default=0) <= 1
    else:
        assert len(set(per_rank.values())) == 1 and len(per_rank) == world_size
        held = set(slots)
        assert held == set(range(len(ep.items))) if equalize == "pad" else len(held) == len(slots)


def test_an_item_taken_in_several_epochs_is_read_on_the_same_rank():
    rng = np.random.default_rng(0)
    sizes = [rng.integers(1000, 2000, 400), rng.integers(1000, 2000, 60)]
    counts = mx.source_counts([400, 60], "repeat", [0.5, 2])  # 200 of the first, the second twice over
    mixture, ranks = mx.Mixture(sizes, counts), {}
    for epoch in range(4):
        ep = mixture.epoch(epoch, 1)
        got = shares(ep, 4, 1, "none", shuffle=True)
        for (r, _), slots in got.items():
            assert (ep.items_at(np.asarray(slots, np.int64)) == ep.items[slots]).all()
            for item in ep.items[slots]:
                ranks.setdefault(int(item), Counter())[r] += 1
    usual = sum(c.most_common(1)[0][1] for c in ranks.values())
    assert usual >= 0.9 * sum(sum(c.values()) for c in ranks.values())
    # and the ranks' bytes stay balanced, within what drawing part of a source's items leaves to chance
    bytes_ = [ep.sizes[s].sum() for s in got.values()]
    assert max(bytes_) - min(bytes_) <= 0.05 * np.mean(bytes_)


@given(mixtures(), st.data())
@settings(max_examples=60, deadline=None)
def test_chained_resumes_on_changing_grids_read_the_rest_of_the_epoch_once(mix, data):
    sizes, kind, weights, epoch_size, seed = mix
    ep, _ = epoch_of(sizes, kind, weights, epoch_size, seed, 5)
    run, got = None, []
    for _ in range(data.draw(st.integers(1, 3))):
        world_size, num_workers = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
        streams = []
        for (r, w), slots in shares(ep, world_size, num_workers, "none", run).items():
            n = data.draw(st.integers(0, len(slots)))
            got += slots[:n]
            streams.append({"grid": [r, world_size, w, num_workers], "consumed": n})
        run = {"epoch": 2, "resumed_from": run, "streams": streams}
    for slots in shares(ep, data.draw(st.integers(1, 4)), 1, "none", run).values():
        got += slots
    assert sorted(got) == list(range(len(ep.items)))


@given(st.lists(st.integers(0, 60), min_size=1, max_size=5).filter(any))
@settings(max_examples=200, deadline=None)
def test_the_interleave_orders_each_sources_picks_evenly_ties_to_the_earlier_source(counts):
    """Source i's j-th pick at (2j + 1)/2k_i of the way, in exact fractions: the order the slots follow."""
    from fractions import Fraction

    by_place = sorted((Fraction(2 * j + 1, 2 * k), i, j) for i, k in enumerate(counts) for j in range(k))
    starts = np.cumsum([0] + counts)
    assert mx.Mixture([np.ones(max(k, 1), np.int64) for k in counts], counts).interleave.tolist() == [
        int(starts[i]) + j for _, i, j in by_place]


@given(mixtures(), st.integers(0, 6), st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_an_epoch_planned_a_few_slots_at_a_time_is_the_same_epoch(mix, epoch, world_size):
    """The planner builds its arrays a block at a time (bounded temporaries at 10**7 slots): blocks of 3
    give the same slots, items and deal order as one block."""
    whole, _ = epoch_of(*mix, epoch)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mx, "_BLOCK", 3)
        blocks, _ = epoch_of(*mix, epoch)
        assert blocks.items.tolist() == whole.items.tolist()
        assert blocks.sizes.tolist() == whole.sizes.tolist()
        assert blocks.deal_order(world_size).tolist() == whole.deal_order(world_size).tolist()


def test_planning_ten_million_items_over_three_sources_deals_every_slot_once():
    # How long it takes (arrays, no Python loop per item) is measured by benchmarks/bench_mixture.py.
    rng = np.random.default_rng(0)
    sizes = [rng.integers(1, 1 << 20, n) for n in (5_000_000, 3_000_000, 2_000_000)]
    counts = mx.source_counts([len(s) for s in sizes], "proportion", [0.6, 0.3, 0.1])
    order = mx.Mixture(sizes, counts).epoch(7, 0).deal_order(8)
    assert len(order) == 10_000_000 and (np.bincount(order, minlength=10_000_000) == 1).all()


@pytest.mark.parametrize("kind, weights, epoch_size, words", [
    ("proportion", [0.5, -0.1], None, "source 1: proportion=-0.1"),
    ("repeat", [0, 0], None, "every source's repeat is 0"),
    ("choose", [3, 1.5], None, "source 1: choose=1.5"),
    ("repeat", [1, 2], 10, "epoch_size=10 goes with 'proportion'"),
    ("choose", [1, 2], 10, "epoch_size=10 goes with 'proportion'"),
    ("proportion", [1, 1], 0, "epoch_size=0"),
    ("proportion", [1, float("nan")], None, "source 1: proportion=nan"),
    ("repeat", [1, "2"], None, "source 1: repeat='2'"),
    ("repeat", [0.01, 0], None, "rounds to an epoch of no items"),
])
def test_bad_weights_are_refused_naming_the_source(kind, weights, epoch_size, words):
    with pytest.raises(OptionError, match=words.replace("(", r"\(").replace(")", r"\)")):
        mx.source_counts([10, 20], kind, weights, epoch_size=epoch_size)


def test_numpy_numbers_are_weights_and_a_float_is_its_decimal_form():
    assert mx.source_counts([10, 10], "choose", [np.int64(3), 4]) == [3, 4]
    assert mx.source_counts([10, 20], "repeat", [np.float64(0.1), 0.05]) == [1, 1]  # exactly a tenth, not 0.0999…


def test_an_empty_source_is_refused_by_name():
    with pytest.raises(OptionError, match="/Volumes/c/s/v/b holds no items"):
        mx.source_counts([10, 0], "repeat", [1, 1], names=["/Volumes/c/s/v/a", "/Volumes/c/s/v/b"])


@given(st.lists(st.integers(0, 30), min_size=1, max_size=6).filter(any), st.integers(1, 200), st.integers(0, 5))
@settings(max_examples=100, deadline=None)
def test_a_tables_rows_per_epoch_are_exact_and_none_comes_twice_before_every_one_came(rows, k, seed):
    seen = Counter()
    for epoch in range(6):
        ranges = mx.row_ranges(rows, k, seed=seed, epoch=epoch, source=2)
        assert sum(b - a for _, a, b in ranges) == k and ranges == sorted(ranges)
        assert all(0 <= a < b <= rows[u] for u, a, b in ranges)
        seen.update((u, i) for u, a, b in ranges for i in range(a, b))
        every = [seen[u, i] for u, n in enumerate(rows) for i in range(n)]
        assert max(every) - min(every) <= 1
    assert ranges == mx.row_ranges(list(rows), k, seed=seed, epoch=5, source=2)  # from (seed, epoch) alone


@given(st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(any), st.data(), st.integers(0, 5))
@settings(max_examples=200, deadline=None)
def test_no_epoch_of_a_table_holds_a_row_twice_where_its_walk_wraps_into_the_next_pass(rows, data, seed):
    # Wraps of both kinds, as for items; a unit the cut splits may give its first rows to the next pass's head.
    total = sum(rows)
    k = data.draw(st.integers(1, total))
    for epoch in range(3 * total // k + 2):
        taken = Counter((u, i) for u, a, b in mx.row_ranges(rows, k, seed=seed, epoch=epoch, source=1)
                        for i in range(a, b))
        assert max(taken.values()) == 1, f"epoch {epoch} of {k} of {rows} rows holds a row twice"
