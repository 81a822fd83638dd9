"""Volume paths and listings: shapes, clear errors, skipping, globs, fingerprints."""

import os
import pickle

import pytest
from hypothesis import given, strategies as st

from air_core import AirError, EmptyVolumeError, FileStream, VolumePathError
from air_core.io.listing import list_folder
from air_core.manifest import Manifest
from air_core.io import listing, transport
from air_core.io.volume import parse


def test_volume_and_dbfs_paths_map_onto_the_local_root(volume):
    vp = parse("dbfs:/Volumes/main/ml/raw/images/")
    assert vp.path == "/Volumes/main/ml/raw/images"
    assert vp.volume == "/Volumes/main/ml/raw"
    assert vp.local == str(volume.local("images"))


def test_a_source_is_resolved_from_one_parse_of_its_path(volume, monkeypatch):
    # Every layer below resolve_source (export pointer, pack pointer, listing, Source) takes the VolumePath
    # it parsed; a parse of a VolumePath hands it back.
    from air_core import resolve_source
    from air_core.io import volume as volume_mod

    volume.write("images/a.jpg", b"a")
    texts = []
    real = volume_mod.parse

    def counted(path):
        if not isinstance(path, volume_mod.VolumePath):
            texts.append(path)
        return real(path)

    monkeypatch.setattr(volume_mod, "parse", counted)
    source = resolve_source(volume.path("images"))
    assert texts == [volume.path("images")]
    assert (source.path, source.local) == (volume.path("images"), str(volume.local("images")))
    vp = real(volume.path("images"))
    assert real(vp) is vp


@pytest.mark.parametrize("bad", ["/tmp/data", "Volumes/a/b/c", "/Volumes/a/b", "s3://bucket/x", "/Volumes//b/c/d"])
def test_malformed_paths_say_the_expected_shape(volume, bad):
    with pytest.raises(VolumePathError, match=r"expected /Volumes/<catalog>/<schema>/<volume>"):
        FileStream(bad)


def test_dotdot_is_refused(volume):
    with pytest.raises(VolumePathError, match=r"'\.\.' is not allowed"):
        FileStream("/Volumes/main/ml/raw/images/../../other/v")


def test_missing_path_and_missing_volume(volume):
    with pytest.raises(VolumePathError, match="does not exist"):
        FileStream(volume.path("nothing"))
    with pytest.raises(VolumePathError, match="the volume /Volumes/main/ml/gone itself is not there"):
        FileStream("/Volumes/main/ml/gone/x")


def test_a_file_where_a_folder_is_expected(volume):
    volume.write("one.txt", "x")
    with pytest.raises(VolumePathError, match="is a file, but a folder is expected"):
        FileStream(volume.path("one.txt"))


def test_empty_folder_and_hidden_only_folder(volume):
    volume.local("empty").mkdir()
    with pytest.raises(EmptyVolumeError, match="holds no file"):
        FileStream(volume.path("empty"))
    volume.write("hidden/.x", "1")
    volume.write("hidden/_delta_log/0.json", "{}")
    with pytest.raises(EmptyVolumeError, match="skipped"):
        list_folder(volume.path("hidden"))


def test_globs_that_match_nothing_name_themselves(volume):
    volume.files("d", 3)
    with pytest.raises(EmptyVolumeError, match=r"include=\['\*\.png'\]"):
        list_folder(volume.path("d"), include="*.png")


def test_symlink_out_of_the_volume_is_refused(volume, tmp_path):
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "s.txt").write_text("governed elsewhere")
    volume.files("d", 2)
    os.symlink(outside, volume.local("d/link"))
    with pytest.raises(VolumePathError, match="outside the volume"):
        list_folder(volume.path("d"))
    os.symlink(tmp_path / "secret" / "s.txt", volume.local("f.txt"))
    with pytest.raises(VolumePathError, match="outside the volume"):
        list_folder(volume.path(""))


def test_symlink_inside_the_volume_is_followed_once(volume):
    volume.files("real", 4)
    os.symlink(volume.local("real"), volume.local("alias"))
    os.symlink(volume.local(""), volume.local("real/loop"))  # a cycle must not recurse forever
    m = list_folder(volume.path(""))
    assert len(m) == 4


def test_a_file_removed_while_its_folder_is_read_is_left_out(volume, monkeypatch):
    expected = volume.files("d", 6)
    scandir, removed = os.scandir, []

    class Removing:  # the folder's entries are read, then a file goes before its entry is looked at
        def __init__(self, path):
            self.it = scandir(path)

        def __enter__(self):
            entries = list(self.it.__enter__())
            if entries and not entries[0].is_dir():
                os.remove(entries[0].path)
                removed.append(volume.path(os.path.relpath(entries[0].path, volume.local("."))))
            return iter(entries)

        def __exit__(self, *exc):
            return self.it.__exit__(*exc)

    monkeypatch.setattr(os, "scandir", Removing)
    listed = [f"{volume.path('d')}/{rel}" for rel in list_folder(volume.path("d")).paths.tolist()]
    assert removed and listed == sorted(set(expected) - set(removed))
    for name in "abc":  # the same for the folder reads of the cache of packs, Delta exports and uc://
        volume.write(f"e/{name}", b"x")
    files, _ = transport.entries(str(volume.local("e")))
    assert sorted(name for name, _, _ in files) == sorted(set("abc") - {os.path.basename(removed[-1])})


def test_listing_is_recursive_sorted_filtered_and_fingerprinted(volume):
    paths = volume.files("d", 30)
    volume.write("d/.hidden", "x")
    volume.write("d/_SUCCESS", "")
    volume.write("d/notes.txt", "keep out")
    m = list_folder(volume.path("d"), exclude="*.txt")
    assert [m.volume_path(i) for i in range(len(m))] == paths
    assert m.sizes[0] == os.path.getsize(volume.local("d/class0/f00000.bin"))
    assert list(list_folder(volume.path("d"), include="class1/*").paths) == list(
        p for p in m.paths if p.startswith("class1/"))
    again = list_folder(volume.path("d"), exclude="*.txt")
    assert again.fingerprint == m.fingerprint
    volume.write("d/class0/f00000.bin", b"changed")
    assert list_folder(volume.path("d"), exclude="*.txt").fingerprint != m.fingerprint


@given(st.lists(st.text(alphabet="aApPqQrReEtT.[{@`/\u0130\u00e9", min_size=1, max_size=12), max_size=30),
       st.sampled_from([".parquet", ".PARQUET", ".jpg", "t"]),
       st.lists(st.sampled_from(["", "t", ".T", "@", "`", "{", ".pArquet", "qrET.aq.t"]), max_size=3))
def test_suffix_mask_is_endswith_ignoring_ascii_case(paths, suffix, more):
    m = Manifest.from_rows("/Volumes/c/s/v/d", [(p, 1, 1) for p in paths])
    assert m.paths.endswith(suffix).tolist() == [p.lower().endswith(suffix.lower()) for p in paths]
    several = (suffix, *more)  # one pass for several, as str.endswith takes them
    assert m.paths.endswith(several).tolist() == [p.lower().endswith(tuple(s.lower() for s in several))
                                                  for p in paths]


@pytest.fixture
def in_processes(monkeypatch):
    """Listings hand every folder but the top one to 3 worker processes; yields how many were started."""
    started = []
    popen = listing.subprocess.Popen

    def spy(*args, **kwargs):
        started.append(1)
        return popen(*args, **kwargs)

    monkeypatch.setattr(listing, "HAND_OFF_SECONDS", 0.0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})  # this process may run on 3 cores
    monkeypatch.setattr(listing.subprocess, "Popen", spy)
    return started


@pytest.mark.slow
def test_a_listing_handed_to_worker_processes_is_the_same_listing(volume, in_processes):
    for k in range(7):
        volume.files(f"d/part{k}", 20 + k)
        volume.write(f"d/part{k}/notes.txt", "x")
        volume.write(f"d/part{k}/_SUCCESS", "")
    volume.write("d/top.bin", "at the top")
    os.symlink(volume.local("d/part1"), volume.local("d/part5/alias"))  # a link to a folder another worker lists
    os.symlink(volume.local("d"), volume.local("d/part2/loop"))  # and a cycle
    for options in ({}, {"exclude": "*.txt"}, {"include": "part3/*"}, {"extensions": ["TXT"]}):
        handed = list_folder(volume.path("d"), **options)
        started = len(in_processes)
        assert started == 3
        with pytest.MonkeyPatch.context() as m:
            m.setattr(listing, "HAND_OFF_SECONDS", 1e9)
            alone = list_folder(volume.path("d"), **options)
        assert len(in_processes) == started  # the same listing, made in this process alone
        in_processes.clear()
        # Each worker lists the link or its target once; the one that meets the link lists under both names.
        linked = [p for p in handed.paths if p.startswith("part5/alias/")]
        assert [p for p in handed.paths if not p.startswith("part5/alias/")] == list(alone.paths)
        assert linked in ([], [p.replace("part1/", "part5/alias/", 1) for p in alone.paths if p.startswith("part1/")])
    assert len(list_folder(volume.path("d"), exclude=["*.txt", "part5/alias/*"])) == sum(20 + k for k in range(7)) + 1


@pytest.mark.slow
def test_a_worker_process_error_is_raised_as_if_listed_here(volume, in_processes, tmp_path, monkeypatch):
    for k in range(4):
        volume.files(f"d/part{k}", 3)
    (tmp_path / "secret").mkdir()
    os.symlink(tmp_path / "secret", volume.local("d/part2/link"))
    with pytest.raises(VolumePathError, match="outside the volume"):
        list_folder(volume.path("d"))
    os.unlink(volume.local("d/part2/link"))
    monkeypatch.setattr(listing.sys, "executable", "/bin/false")  # a worker that dies without a word
    with pytest.raises(AirError, match=r"in a worker process failed \(exit code 1\)"):
        list_folder(volume.path("d"))
    monkeypatch.setattr(listing.sys, "executable", "/nowhere/python")  # no worker can start: listed here
    assert len(list_folder(volume.path("d"))) == 12


@given(st.lists(st.text(alphabet="ab/é.", min_size=1, max_size=8), min_size=1, max_size=25, unique=True), st.data())
def test_paths_taken_together_are_the_paths_one_at_a_time(paths, data):
    m = Manifest.from_rows("/Volumes/c/s/v/d", sorted((p, 1, 1) for p in paths))
    items = data.draw(st.lists(st.integers(0, len(paths) - 1), max_size=40))
    one_by_one = [m.paths[i] for i in items]
    assert m.paths.take(items) == one_by_one
    assert m.paths.lengths(items).tolist() == [len(p.encode()) for p in one_by_one]


@given(st.lists(st.text(alphabet="ab/é.", min_size=1, max_size=8), min_size=1, max_size=25, unique=True), st.data())
def test_a_subset_is_the_listing_of_its_items_in_their_order_and_survives_pickling(paths, data):
    m = Manifest.from_rows("/Volumes/c/s/v/d", sorted((p, len(p), 7 * len(p)) for p in paths))
    items = data.draw(st.lists(st.integers(0, len(paths) - 1), max_size=40))
    part = pickle.loads(pickle.dumps(m.subset(items)))
    assert (part.root, part.fingerprint, len(part)) == (m.root, m.fingerprint, len(items))
    assert [(part.paths[k], int(part.sizes[k]), int(part.mtimes[k])) for k in range(len(part))] == m.rows(items)
    assert part.paths.tolist() == m.paths.take(items)


def test_volume_rows_are_remembered_boundedly_and_equal_a_fresh_decode():
    rows = [(f"class{i % 3}/f{i:04d}.jpg", 10 + i, 1_000 + i) for i in range(300)]
    m = Manifest.from_rows("/Volumes/c/s/v/d", sorted(rows))
    m.remembered = 100
    items = [5, 77, 3, 299, 0]
    first = m.volume_rows(items)
    assert first == [(f"/Volumes/c/s/v/d/{p}", s, t) for p, s, t in m.rows(items)]
    again = m.volume_rows(items)
    assert again == first and all(a[0] is b[0] for a, b in zip(again, first))  # the same strings: not decoded
    assert m.volume_rows([3, 5, 6]) == [(f"/Volumes/c/s/v/d/{p}", s, t) for p, s, t in m.rows([3, 5, 6])]
    for lo in range(0, 300, 40):  # a pass over more items than are remembered: none kept from then on
        chunk = list(range(lo, min(lo + 40, 300)))
        assert m.volume_rows(chunk) == [(f"/Volumes/c/s/v/d/{p}", s, t) for p, s, t in m.rows(chunk)]
        assert m._decoded is None or len(m._decoded) <= 100
    assert m._decoded is None
    fresh = m.volume_rows(items)
    assert fresh == first and not any(a[0] is b[0] for a, b in zip(fresh, first))  # decoded again: none kept


# -- what a listing looks at: only what it keeps ----------------------------------------------------------


@pytest.fixture
def looked_at(volume, monkeypatch):
    """The folders a listing opens and the files it stats (volume paths), listed in this process alone."""
    opened, stated = [], []
    scandir = os.scandir
    root = str(volume.local(""))

    def named(path: str) -> str | None:
        return volume.path(os.path.relpath(path, root)) if path.startswith(root) else None

    class Entry:
        def __init__(self, entry):
            self._entry = entry

        def __getattr__(self, name):
            return getattr(self._entry, name)

        def stat(self, **kwargs):
            stated.append(named(self._entry.path))
            return self._entry.stat(**kwargs)

    class Counted:
        def __init__(self, path):
            if named(path) is not None:  # not the node cache's own folders
                opened.append(named(path))
            self.it = scandir(path)

        def __enter__(self):
            return (Entry(e) for e in self.it.__enter__())

        def __exit__(self, *exc):
            return self.it.__exit__(*exc)

    monkeypatch.setattr(listing, "MAX_PROCESSES", 1)
    monkeypatch.setattr(os, "scandir", Counted)
    return opened, stated


def test_a_file_left_out_costs_no_stat_and_a_folder_excluded_whole_is_not_opened(volume, looked_at):
    opened, stated = looked_at
    volume.files("d/images", 9)
    volume.write("d/a.txt", "a")
    volume.write("d/b.bin", "b")
    m = list_folder(volume.path("d"), exclude=["images/*", "*.bin"])
    assert list(m.paths) == ["a.txt"]
    assert stated == [volume.path("d/a.txt")]
    assert opened == [volume.path("d")]
    stated.clear()
    assert list(list_folder(volume.path("d"), include="*.txt").paths) == ["a.txt"]
    assert stated == [volume.path("d/a.txt")]  # nine files under images/ listed by name, none looked at


def test_records_beside_media_list_one_medium_of_each_extension_a_folder(volume, looked_at):
    from air_core.io.listing import list_records

    opened, stated = looked_at
    for split in ("train", "test"):
        for i in range(20):
            volume.write(f"ds/{split}/img/{i:02d}.png", b"p")
        volume.write(f"ds/{split}/img/notes.txt", "n")
        volume.write(f"ds/{split}/metadata.jsonl", "{}\n")
        volume.write(f"ds/{split}/extra.csv", "a\n1\n")
    volume.write("ds/README.md", "r")
    m = list_records(volume.path("ds"), metadata=["metadata.jsonl"], records=[".jsonl", ".csv"])
    expected = ["README.md"] + [f"{s}/{f}" for s in ("test", "train")
                                for f in ("extra.csv", "img/00.png", "img/notes.txt", "metadata.jsonl")]
    assert list(m.paths) == expected
    assert sorted(stated) == sorted(volume.path(f"ds/{p}") for p in expected)  # 40 images: 2 stats
    assert len(opened) == 5  # every folder is read, for the names
    assert list_records(volume.path("ds"), metadata=["metadata.jsonl"], records=[".jsonl"]).fingerprint == \
        list_records(volume.path("ds"), metadata=["metadata.jsonl"], records=[".jsonl"]).fingerprint


def test_records_that_name_media_are_listed_without_the_media(volume, looked_at):
    from air_core import resolve_source

    opened, stated = looked_at
    for i in range(12):
        volume.write(f"llava/images/part{i % 3}/{i}.png", b"p")
    volume.write("llava/chat.jsonl", '{"image": "part0/0.png"}\n')
    volume.write("llava/notes.txt", "n")
    source = resolve_source(volume.path("llava"), media={"image": "image"}, media_dir="images")
    assert list(source.manifest.paths) == ["chat.jsonl"]
    assert opened == [volume.path("llava")]  # the media folder is never opened
    assert stated == [volume.path("llava/chat.jsonl")]
    opened.clear(), stated.clear()
    volume.write("hf/metadata.jsonl", '{"file_name": "a/0.png"}\n')
    for i in range(30):
        volume.write(f"hf/a/{i}.png", b"p")
    source = resolve_source(volume.path("hf"))
    assert list(source.manifest.paths) == ["metadata.jsonl"]
    assert source.reader.media() == {"image": "image"}
    assert sorted(stated) == [volume.path("hf/a/0.png"), volume.path("hf/metadata.jsonl")]
