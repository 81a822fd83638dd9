"""Mixtures through FileStream(sources=[...]): each source's count per epoch, exactly once over a grid, equal
counts, resume on another grid past the first epoch, small pickles and states, and each refusal."""

import io
import json
import pickle
import random
import tarfile
from collections import Counter

import pytest

from air_core import EmptyVolumeError, FileStream, OptionError, StateError, VolumePathError, run_state


@pytest.fixture
def mix(volume):
    """Three folders: chat (60 files), code (30), safety (7), of varied sizes."""
    for name, n in (("chat", 60), ("code", 30), ("safety", 7)):
        volume.files(name, n, size=lambda i, n=n: 40 + (i * 29 + n) % 300)
    return volume


def specs(volume, kind, weights):
    return [{"path": volume.path(name), kind: w} for name, w in zip(("chat", "code", "safety"), weights)]


def source_of(path):
    return path.split("/")[5]


def epoch_paths(volume, sources, world_size, num_workers, epoch, **opts):
    """Every stream's files of `epoch`, by (rank, worker)."""
    out = {}
    for r in range(world_size):
        for w in range(num_workers):
            s = FileStream(sources=sources, rank=r, world_size=world_size, worker=w, num_workers=num_workers, **opts)
            s.set_epoch(epoch)
            out[r, w] = [f.path for f in s]
    return out


@pytest.mark.parametrize("kind, weights, epoch_size, want", [
    ("proportion", [0.6, 0.3, 0.1], 50, {"chat": 30, "code": 15, "safety": 5}),
    ("proportion", [6, 3, 1], None, {"chat": 58, "code": 29, "safety": 10}),  # 97 items by largest remainder
    ("repeat", [0.5, 1, 3], None, {"chat": 30, "code": 30, "safety": 21}),
    ("choose", [10, 45, 7], None, {"chat": 10, "code": 45, "safety": 7}),
])
def test_each_epoch_reads_each_sources_share_exactly_once_over_the_grid(mix, kind, weights, epoch_size, want):
    sources = specs(mix, kind, weights)
    seen_safety = Counter()
    for epoch in range(3):
        got = epoch_paths(mix, sources, 2, 2, epoch, shuffle=True, seed=3, epoch_size=epoch_size)
        paths = [p for part in got.values() for p in part]
        assert Counter(map(source_of, paths)) == want
        single = FileStream(sources=sources, shuffle=True, seed=3, epoch_size=epoch_size)
        single.set_epoch(epoch)
        assert Counter(f.path for f in single) == Counter(paths)  # one stream reads the grid's multiset
        seen_safety.update(p for p in paths if source_of(p) == "safety")
    if kind == "repeat":  # 7 files, 3 times each per epoch
        assert set(seen_safety.values()) == {9}


def test_a_large_source_is_read_without_repeats_until_it_is_exhausted(mix):
    sources = specs(mix, "choose", [25, 30, 7])
    chat = Counter()
    for epoch in range(2):
        got = epoch_paths(mix, sources, 3, 1, epoch, shuffle=True)
        chat.update(p for part in got.values() for p in part if source_of(p) == "chat")
    assert len(chat) == 50 and set(chat.values()) == {1}  # 2 x 25 of 60: none twice yet


def test_equalize_gives_every_rank_as_many_items(mix):
    sources = specs(mix, "repeat", [0.5, 1, 3])  # 81 items over 4 ranks
    for equalize, per_rank in (("pad", 21), ("drop", 20)):
        got = epoch_paths(mix, sources, 4, 2, 1, shuffle=True, equalize=equalize)
        counts = Counter()
        for (r, _), paths in got.items():
            counts[r] += len(paths)
        assert set(counts.values()) == {per_rank}
        assert len(FileStream(sources=sources, rank=1, world_size=4, equalize=equalize)) == per_rank


def read_some(streams, rng, most):
    delivered, states = [], []
    for s in streams:
        it = iter(s)
        delivered += [next(it).path for _ in range(rng.randint(0, most))]
        states.append(s.state_dict())
    return delivered, states


@pytest.mark.parametrize("kind, weights", [("repeat", [0.5, 1, 2.5]), ("choose", [20, 45, 9])])
def test_a_resume_past_the_first_epoch_on_other_grids_is_exactly_once(mix, kind, weights):
    sources = specs(mix, kind, weights)
    opts = dict(sources=sources, shuffle=True, seed=11, equalize="none")
    rng = random.Random(4)
    uninterrupted = Counter(p for part in epoch_paths(mix, sources, 1, 1, 2, shuffle=True, seed=11).values()
                            for p in part)
    streams = []
    for r in range(2):
        for w in range(2):
            s = FileStream(rank=r, world_size=2, worker=w, num_workers=2, **opts)
            s.set_epoch(2)
            streams.append(s)
    delivered, states = read_some(streams, rng, 12)
    run = json.loads(json.dumps(run_state(states)))
    assert len(json.dumps(run)) < 2000  # counts, not item lists
    # On 1 rank x 3 workers, stopped again, then on 3 ranks x 1 worker (each stream pickled, as to a worker).
    streams = []
    for w in range(3):
        s = FileStream(rank=0, world_size=1, worker=w, num_workers=3, **opts)
        s.load_state_dict(run)
        streams.append(pickle.loads(pickle.dumps(s)))
    more, states = read_some(streams, rng, 10)
    delivered += more
    run2 = run_state(states)
    for r in range(3):
        s = FileStream(rank=r, world_size=3, **opts)
        s.load_state_dict(run2)
        assert s.epoch == 2
        delivered += [f.path for f in s]
    assert Counter(delivered) == uninterrupted


def test_the_same_grid_resumes_from_a_streams_own_state(mix):
    sources = specs(mix, "proportion", [0.6, 0.3, 0.1])
    s = FileStream(sources=sources, shuffle=True, seed=1, rank=1, world_size=2, epoch_size=40)
    s.set_epoch(4)
    whole = [f.path for f in s]
    it = iter(s)
    first = [next(it).path for _ in range(7)]
    again = FileStream(sources=sources, shuffle=True, seed=1, rank=1, world_size=2, epoch_size=40)
    again.load_state_dict(s.state_dict())
    assert first + [f.path for f in again] == whole


def test_items_taken_again_are_read_on_the_same_rank(mix):
    sources = specs(mix, "repeat", [0.5, 1, 3])
    ranks = {}
    for epoch in range(4):
        for (r, _), paths in epoch_paths(mix, sources, 3, 1, epoch, shuffle=True).items():
            for p in paths:
                ranks.setdefault(p, Counter())[r] += 1
    usual = sum(c.most_common(1)[0][1] for c in ranks.values())
    assert usual >= 0.85 * sum(sum(c.values()) for c in ranks.values())


def test_a_state_of_another_mixture_is_refused_saying_what_changed(mix):
    state = FileStream(sources=specs(mix, "repeat", [1, 1, 1])).state_dict()
    with pytest.raises(StateError, match="saved with 60, 30, 7 items per epoch from the sources, this mixture "
                                         "gives 60, 30, 14 .*weights or epoch_size changed"):
        FileStream(sources=specs(mix, "repeat", [1, 1, 2])).load_state_dict(state)
    with pytest.raises(StateError, match="a mixture of 3 sources, this one has 2"):
        FileStream(sources=specs(mix, "repeat", [1, 1])).load_state_dict(state)
    with pytest.raises(StateError, match=r"not this mixture of \[.*chat, .*code, .*safety\]"):
        FileStream(sources=specs(mix, "repeat", [1, 1, 1])).load_state_dict(
            FileStream(mix.path("chat")).state_dict())
    with pytest.raises(StateError, match=r"different listing of .*chat .*the folder changed since"):
        FileStream(mix.path("chat")).load_state_dict(state)
    mix.write("code/class0/new.bin", b"more")
    with pytest.raises(StateError, match=r"^sources\[1\] \(.*code\): its files are not the ones the state was saved "
                                         "over"):
        FileStream(sources=specs(mix, "repeat", [1, 1, 1])).load_state_dict(state)
    assert len(json.dumps(state)) < 1000


@pytest.mark.parametrize("sources, error, words", [
    ("chat", OptionError, "give a non-empty list of dicts"),
    ([], OptionError, "give a non-empty list of dicts"),
    ([{"proportion": 1}], OptionError, r"sources\[0\]=.*give a dict with the folder's 'path'"),
    ([{"path": "chat", "proportion": 1, "repeat": 2}], OptionError, r"sources\[0\] .*exactly one weight"),
    ([{"path": "chat"}], OptionError, r"sources\[0\] .*exactly one weight"),
    ([{"path": "chat", "proportion": 1}, {"path": "code", "repeat": 1}], OptionError,
     r"sources\[0\] \(.*chat\) has a 'proportion' but sources\[1\] \(.*code\) a 'repeat'"),
    ([{"path": "chat", "proportion": 1}, {"path": "code", "proportion": -1}], OptionError,
     r"sources\[1\] \(.*code\): proportion=-1"),
    ([{"path": "chat", "repeat": 0}, {"path": "code", "repeat": 0}], OptionError, "every source's repeat is 0"),
    ([{"path": "chat", "choose": 5, "shufle": True}], OptionError, r"unknown option 'shufle'.*sources\[0\]"),
    ([{"path": "chat", "choose": 5}, {"path": "nowhere", "choose": 5}], VolumePathError, "nowhere"),
    ([{"path": "chat", "choose": 5}, {"path": "empty", "choose": 5}], EmptyVolumeError, "empty"),
    ([{"path": "chat", "choose": 5, "delta_table": "main.ml.t"}], OptionError, r"asks for a Delta table, a table.s rows.*RowStream\(sources="),
])
def test_bad_sources_are_refused_naming_the_source(mix, sources, error, words):
    (mix.local("empty")).mkdir()
    if isinstance(sources, list):
        sources = [{**s, "path": mix.path(s["path"])} if "path" in s else s for s in sources]
    with pytest.raises(error, match=words):
        FileStream(sources=sources)


def test_epoch_size_with_repeat_or_choose_and_options_beside_sources_are_refused(mix):
    with pytest.raises(OptionError, match="epoch_size=10 goes with 'proportion'"):
        FileStream(sources=specs(mix, "choose", [1, 2, 3]), epoch_size=10)
    with pytest.raises(OptionError, match="give include= in each source's dict"):
        FileStream(sources=specs(mix, "choose", [1, 2, 3]), include="*.bin")
    with pytest.raises(OptionError, match="sizes the epochs of a mixture"):
        FileStream(mix.path("chat"), epoch_size=10)


def test_a_mixture_of_loose_files_names_no_door_that_would_refuse_a_source_too(mix):
    """A WebDataset source is neither loose files nor a table's rows: no mixture reads it, so no hint to RowStream."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tf:
        info = tarfile.TarInfo("k0.txt")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"hi"))
    mix.write("tars/a.tar", out.getvalue())
    with pytest.raises(OptionError, match=r"sources\[1\] \(.*tars\) is read in mode 'webdataset': a mixture reads "
                                          r"loose files \(mode 'files'\) or tables' rows \(modes parquet, json, csv, "
                                          r"text\), not mode 'webdataset'; give mode='files' in its dict") as got:
        FileStream(sources=[{"path": mix.path("chat"), "choose": 2},
                            {"path": mix.path("tars"), "choose": 1, "mode": "auto"}])
    assert "RowStream" not in str(got.value)


def test_a_mixture_of_a_source_in_another_mode_is_refused(mix):
    mix.write("rows/a.jsonl", '{"x": 1}\n')
    with pytest.raises(OptionError, match=r"sources\[1\] \(.*rows\) is read in mode 'json' \(what its files are\), "
                                          r"a table's rows, in a mixture of loose files: mix tables' rows with "
                                          r"RowStream\(sources=\[...\]\), or give mode='files'"):
        FileStream(sources=[{"path": mix.path("chat"), "choose": 2},
                            {"path": mix.path("rows"), "choose": 1, "mode": "auto"}])
    with pytest.raises(OptionError, match=r"sources\[1\] \(.*rows\) asks for mode 'json', a table's rows, in a "
                                          r"mixture of loose files: mix tables' rows with RowStream\(sources=\[...\]\)"):
        FileStream(sources=[{"path": mix.path("chat"), "choose": 2},
                            {"path": mix.path("rows"), "choose": 1, "mode": "json"}])

