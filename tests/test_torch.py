"""air_core.torch: the reference's snippets, exactly-once resume on any grid, MLflow timings, DCP on volumes."""

import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, torchrun
from torch.utils.data import IterableDataset

from air_core import OptionError, StateError, VolumePathError
from air_core.torch import DataLoader, UCVolumeDataset, UCVolumeReader, UCVolumeWriter
from air_core.torch import state as state_mod
from air_core.torch import timing

SCRIPT = Path(__file__).parent / "scripts" / "torch_ranks.py"


class Names(IterableDataset):
    """A decoding wrapper: each cached file's first line (the test files name themselves there)."""

    def __init__(self, files):
        self.files = files

    def __iter__(self):
        for path in self.files:
            with open(path, "rb") as f:
                yield f.readline().decode().strip()


def named_files(local_folder: Path, n: int) -> list[str]:
    """n files of varied sizes in nested folders, each naming itself on its first line."""
    names = []
    for i in range(n):
        rel = f"part{i % 3}/sub{i % 2}/f{i:03d}.bin"
        p = local_folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rel.encode() + b"\n" + os.urandom(50 + 97 * (i % 7)))
        names.append(rel)
    return sorted(names)


def names_loader(folder: str, **kwargs) -> DataLoader:
    return DataLoader(Names(UCVolumeDataset(folder, shuffle=True, seed=7)), batch_size=3, collate_fn=list, **kwargs)


def per_rank(out: Path, name: str, ranks: int = 2) -> list:
    """What each rank of a torchrun launch wrote under `name`."""
    return [json.loads((out / f"{name}.rank{r}.json").read_text()) for r in range(ranks)]


def read(out: Path, name: str) -> list:
    """The lists every rank wrote under `name`, joined."""
    return [x for part in per_rank(out, name) for x in part]


def exactly_once(*parts: list[str]) -> list[str]:
    got = [n for part in parts for n in part]
    assert not [n for n, c in Counter(got).items() if c > 1], "a file was delivered twice"
    return sorted(got)


# -- the reference's documented usage, with only the import changed --------------------------------------


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_reference_docstring_example_runs_as_written(volume):
    data = volume.root / "my-catalog" / "my-schema" / "my-volume" / "data"
    names = named_files(data, 20)

    from air_core.torch import DataLoader, UCVolumeDataset  # was: from databricks.air.data import ...

    dataset = UCVolumeDataset("/Volumes/my-catalog/my-schema/my-volume/data")
    loader = DataLoader(dataset, num_workers=4)
    got = []
    for local_path in loader:
        with open(local_path[0], "rb") as f:  # use local_path now; don't keep it for later
            got.append(f.readline().decode().strip())
    assert exactly_once(got) == names


class ImageDataset(IterableDataset):
    """The seeds' wrapper pattern: decode each cached path into a tensor."""

    def __init__(self, files):
        self.files = files

    def __iter__(self):
        from PIL import Image

        for path in self.files:
            with Image.open(path) as image:
                pixels = torch.tensor(list(image.convert("L").getdata()), dtype=torch.uint8).view(4, 4)
            yield pixels, int(pixels[0, 0])


@pytest.mark.slow
def test_image_wrapper_decodes_and_resumes_under_forkserver(volume):
    from PIL import Image

    for i in range(14):
        p = volume.local(f"images/class{i % 2}/img{i:02d}.png")
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("L", (4, 4), color=10 * i).save(p)
    opts = dict(batch_size=4, num_workers=2, multiprocessing_context="forkserver")
    loader = DataLoader(ImageDataset(UCVolumeDataset(volume.path("images"))), **opts)
    iterator = iter(loader)
    pixels, labels = next(iterator)
    assert pixels.shape == (4, 4, 4) and pixels.dtype == torch.uint8
    before = labels.tolist() + next(iterator)[1].tolist()
    state = loader.state_dict()

    resumed = DataLoader(ImageDataset(UCVolumeDataset(volume.path("images"))), **{**opts, "num_workers": 1})
    resumed.load_state_dict(state)
    rest = [v for _, labels in resumed for v in labels.tolist()]
    assert sorted(before + rest) == [10 * i for i in range(14)]


# -- two ranks under torchrun: exactly-once, DCP, MLflow; then resume on the same and on other grids -----


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Launch 1 (save) and launch 2 (resume) of tests/scripts/torch_ranks.py, 2 ranks x 2 workers each."""
    tmp = tmp_path_factory.mktemp("two_ranks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIR_VOLUMES_ROOT", str(tmp / "Volumes"))
        mp.setenv("AIR_CACHE_DIR", str(tmp / "cache"))
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MLFLOW_RUN_ID"):
            mp.delenv(var, raising=False)
        names = named_files(tmp / "Volumes" / "main" / "ml" / "raw" / "data", 50)
        folder, ckpt = "/Volumes/main/ml/raw/data", "/Volumes/main/ml/raw/ckpt/step_3"
        out = tmp / "out"
        out.mkdir()

        from mlflow.tracking import MlflowClient

        tracking = f"file:{tmp / 'mlruns'}"
        client = MlflowClient(tracking)
        run_id = client.create_run(client.create_experiment("loader")).info.run_id
        torchrun(SCRIPT, 2, "save", folder, ckpt, str(out),
                 env={"MLFLOW_RUN_ID": run_id, "MLFLOW_TRACKING_URI": tracking})
        torchrun(SCRIPT, 2, "resume", folder, ckpt, str(out))
        yield SimpleNamespace(names=names, folder=folder, out=out, client=client, run_id=run_id,
                              cache=tmp / "cache")


@pytest.mark.slow
def test_two_ranks_two_workers_read_every_file_once(two_ranks):
    assert exactly_once(read(two_ranks.out, "epoch0")) == two_ranks.names


@pytest.mark.slow
def test_default_workers_per_rank_are_capped_by_the_cores(two_ranks):
    # torchrun's process group is seen: at most 6 workers a rank, and the node's two ranks
    # together ask for no more workers than it has cores (yet at least one each).
    workers = per_rank(two_ranks.out, "dcp")[0]["default_workers"]
    assert 1 <= workers <= 6 and (workers == 1 or 2 * workers <= len(os.sched_getaffinity(0)))


@pytest.mark.slow
def test_dcp_round_trips_model_optimizer_and_loader_state_on_two_ranks(two_ranks):
    for rank in per_rank(two_ranks.out, "dcp"):
        assert rank["model"] and rank["optim"] and rank["data"]
    assert not os.listdir(two_ranks.cache / "staging")  # staged files are gone once published


@pytest.mark.slow
def test_mlflow_file_store_receives_fetch_timings_per_rank(two_ranks):
    for rank in (0, 1):
        for key in ("fetch_seconds", "fetch_seconds_variance", "between_next_seconds",
                    "between_next_seconds_variance"):
            history = two_ranks.client.get_metric_history(two_ranks.run_id, f"dataloader/{key}/rank_{rank}")
            assert history and all(m.value >= 0 for m in history)
    assert not any(per_rank(two_ranks.out, "mlflow_imported"))  # no run: mlflow never imported


@pytest.mark.slow
def test_resume_on_the_same_grid_is_exactly_once(two_ranks):
    out = two_ranks.out
    got = exactly_once(read(out, "before"), read(out, "middle"), read(out, "rest"))
    assert got == two_ranks.names
    assert read(out, "before") and read(out, "middle")
    finished = state_mod.decode(per_rank(out, "finished")[0])
    assert finished["epoch"] == 2 and not finished["streams"]  # the next epoch's start


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize("saved,context,seen", [
    ("dcp", "spawn", ["before"]),                # one resume: saved at 2 x 2, resumed at 1 x 3
    ("state2", "fork", ["before", "middle"]),   # resumed twice: 2 x 2, 2 x 2, then 1 x 3
])
def test_resume_on_another_grid_is_exactly_once(two_ranks, saved, context, seen):
    state = per_rank(two_ranks.out, saved)[0]
    state = state["state"] if saved == "dcp" else state
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIR_VOLUMES_ROOT", str(two_ranks.cache.parent / "Volumes"))
        mp.setenv("AIR_CACHE_DIR", str(two_ranks.cache))
        loader = names_loader(two_ranks.folder, num_workers=3, multiprocessing_context=context)
        loader.load_state_dict(state)
        rest = [n for batch in loader for n in batch]
    assert exactly_once(*(read(two_ranks.out, s) for s in seen), rest) == two_ranks.names


# -- one process ------------------------------------------------------------------------------------


def test_defaults_follow_the_reference(volume, monkeypatch):
    named_files(volume.local("d"), 4)
    dataset = UCVolumeDataset(volume.path("d"))
    with monkeypatch.context() as mp:
        mp.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
        loader = DataLoader(dataset)
    assert loader.num_workers == 48
    assert loader.prefetch_factor == 4 and loader.persistent_workers
    single = DataLoader(dataset, num_workers=0)  # the reference raises here (prefetch_factor without workers)
    assert single.prefetch_factor is None and not single.persistent_workers
    assert len([p for batch in single for p in batch]) == 4
    assert not DataLoader(dataset, num_workers=1, persistent_workers=False).persistent_workers


@pytest.mark.parametrize("cpus, world_size, ranks_on_node, workers", [
    (1, 1, None, 1), (8, 1, None, 8), (64, 1, None, 48),  # a lone process: a worker a core, at most 48
    (64, 1, "1", 48),                                    # a process group of one is a lone process
    (16, 2, "2", 6), (8, 2, "2", 4), (2, 2, "2", 1),     # ranks share the node's cores, at most 6 each
    (1, 2, "2", 1), (3, 8, "8", 1),                      # never fewer than one
    (4, 4, None, 4), (32, 4, None, 6),                   # one rank per node (LOCAL_WORLD_SIZE unset)
    (96, 8, "8", 6), (16, 8, "8", 2),
])
def test_default_num_workers_share_the_cores_among_the_ranks_of_a_node(monkeypatch, cpus, world_size,
                                                                        ranks_on_node, workers):
    from air_core.torch import default_num_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: world_size)
    if ranks_on_node is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", ranks_on_node)
    assert default_num_workers() == workers


def test_dataset_is_small_when_pickled(volume):
    named_files(volume.local("d"), 300)
    dataset = UCVolumeDataset(volume.path("d"))
    blob = pickle.dumps(dataset)
    assert len(blob) < 3000
    assert len(pickle.loads(blob).manifest) == 300


@pytest.mark.slow
def test_each_pass_is_the_next_epoch_and_set_epoch_picks_one(volume):
    names = named_files(volume.local("d"), 24)
    dataset = UCVolumeDataset(volume.path("d"), shuffle=True, seed=1)
    loader = DataLoader(Names(dataset), batch_size=2, num_workers=2, collate_fn=list)
    first, second = ([n for b in loader for n in b] for _ in range(2))
    assert sorted(first) == sorted(second) == names and first != second
    dataset.set_epoch(0)  # persistent workers are started again to see it
    assert [n for b in loader for n in b] == first
    assert state_mod.decode(loader.state_dict())["epoch"] == 1


@pytest.mark.slow
def test_yielded_paths_stay_valid_past_a_full_cache(volume):
    names = named_files(volume.local("d"), 30)
    loader = DataLoader(UCVolumeDataset(volume.path("d"), cache_limit=2000), batch_size=None, num_workers=2)
    paths = list(loader)
    got = []
    for p in paths:  # read after the whole pass: nothing was evicted under the reader
        with open(p, "rb") as f:
            got.append(f.readline().decode().strip())
    assert sorted(got) == names
    assert any(not p.startswith(os.environ["AIR_CACHE_DIR"]) for p in paths)  # past the cap: read in place


@pytest.mark.slow
def test_epoch_boundaries_and_fresh_states(volume):
    names = named_files(volume.local("d"), 10)
    loader = names_loader(volume.path("d"), num_workers=0)
    assert state_mod.decode(loader.state_dict())["epoch"] == 0
    assert sorted(n for b in loader for n in b) == names
    done = loader.state_dict()
    assert state_mod.decode(done)["epoch"] == 1 and not state_mod.decode(done)["streams"]
    again = names_loader(volume.path("d"), num_workers=1)
    again.load_state_dict(done)
    assert sorted(n for b in again for n in b) == names
    assert state_mod.decode(again.state_dict())["epoch"] == 2


def test_a_loader_without_workers_delivers_plain_batches_and_resumes_after_them(volume):
    names = named_files(volume.local("d"), 10)
    loader = names_loader(volume.path("d"), num_workers=0)
    it = iter(loader)
    taken = [next(it), next(it)]
    assert all(isinstance(b, list) and len(b) == 3 and all(isinstance(n, str) for n in b) for b in taken)
    saved = loader.state_dict()
    again = names_loader(volume.path("d"), num_workers=0)
    again.load_state_dict(saved)
    assert exactly_once(*taken, [n for b in again for n in b]) == names


def test_bad_states_fail_clearly(volume):
    named_files(volume.local("d"), 6)
    loader = names_loader(volume.path("d"), num_workers=0)
    with pytest.raises(StateError, match="databricks.air.data"):
        loader.load_state_dict({"version": 1, "world_size": 1, "num_workers": 2, "per_worker": {}})
    with pytest.raises(StateError, match="not a saved DataLoader state"):
        loader.load_state_dict({"epoch": 3})
    with pytest.raises(StateError, match="needs a UCVolumeDataset"):
        DataLoader([1, 2, 3], num_workers=0).state_dict()
    saved = loader.state_dict()
    volume.write("d/new.bin", b"new\n")
    with pytest.raises(StateError, match="different listing"):
        names_loader(volume.path("d"), num_workers=0).load_state_dict(saved)
    with pytest.raises(StateError, match="plan options"):
        DataLoader(UCVolumeDataset(volume.path("d")), num_workers=0).load_state_dict(
            names_loader(volume.path("d"), num_workers=0).state_dict())


def test_progress_merges_across_ranks():
    head = ("fp", {"seed": 0})
    a = state_mod.report(4, True, None, [{"grid": [0, 2, 0, 1], "consumed": 5}])
    b = state_mod.report(4, False, None, [{"grid": [1, 2, 0, 1], "consumed": 2}])
    assert state_mod.merge([a, b], *head)["streams"] == a["streams"] + b["streams"]
    assert state_mod.merge([a, {**b, "finished": True}], *head) == state_mod.fresh(5, *head)
    with pytest.raises(StateError, match="different epochs"):
        state_mod.merge([a, {**b, "epoch": 5}], *head)
    before = state_mod.merge([a, b], *head)
    # nothing delivered since a resume: the run stands where it was, not one level deeper
    assert state_mod.merge([state_mod.report(4, False, before, [])], *head) == before
    assert state_mod.decode(state_mod.encode(before)) == before


def test_chained_resumes_stay_cheap(monkeypatch):
    # Four resumes within one epoch over 16 streams: a level's share is dealt over the workers at most once
    # per stream (64 deals in all), not once per path through the chain (16 ** 4). How long the chain takes
    # is measured by benchmarks/bench_plan.py.
    from air_core.planning import resume
    from air_core.planning.shares import Planning

    deals = 0
    worker_parts = resume.worker_parts

    def counted(*args):
        nonlocal deals
        deals += 1
        return worker_parts(*args)

    monkeypatch.setattr(resume, "worker_parts", counted)
    sizes = [1 + (i * 7919) % 5000 for i in range(2000)]
    head = ("fp", {"seed": 0, "shuffle": True, "balance": "bytes", "equalize": "none"})
    progress = None
    for _ in range(4):
        streams = [{"grid": [r, 4, w, 4], "consumed": 20} for r in range(4) for w in range(4)]
        progress = {**state_mod.fresh(0, *head), "resumed_from": progress, "streams": streams}
    encoded = state_mod.encode(progress)
    assert len(encoded["run"]) < 10_000  # each level once, not once per stream
    assert len(resume.delivered(sizes, state_mod.decode(encoded), planning=Planning(**head[1]))) == 4 * 16 * 20
    assert deals <= 4 * 16


def test_mlflow_active_run_gets_one_window_per_short_pass(volume, tmp_path, monkeypatch):
    import mlflow

    named_files(volume.local("d"), 12)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    try:
        with mlflow.start_run() as run:
            loader = names_loader(volume.path("d"), num_workers=0)
            assert len([b for b in loader]) == 4
        assert timing.drain(60)  # the window is logged by a thread of its own
        history = mlflow.tracking.MlflowClient().get_metric_history(run.info.run_id,
                                                                     "dataloader/fetch_seconds/rank_0")
    finally:
        mlflow.set_tracking_uri(None)  # back to unset (it also set $MLFLOW_TRACKING_URI)
    assert len(history) == 1 and history[0].value > 0  # a pass under 10 s logs one window, at its end


# -- checkpoints on a volume, one process -----------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled", "ignore:Detected an existing checkpoint")
def test_dcp_overwrite_and_torch_save_on_a_volume(volume):
    import torch.distributed.checkpoint as dcp

    from air_core.io import volume as volumes

    path = volume.path("ckpt/latest")
    for value in (1.0, 2.0):
        dcp.save({"w": torch.full((3,), value)}, storage_writer=UCVolumeWriter(path))
    target = {"w": torch.zeros(3)}
    dcp.load(target, storage_reader=UCVolumeReader(path))
    assert target["w"].tolist() == [2.0, 2.0, 2.0]
    assert sorted(os.listdir(volume.local("ckpt/latest"))) == [".metadata", "__0_0.distcp"]
    assert UCVolumeWriter.validate_checkpoint_id(path) and not UCVolumeReader.validate_checkpoint_id("/tmp/x")
    with pytest.raises(VolumePathError, match="ckpt/nope does not exist"):
        UCVolumeReader(volume.path("ckpt/nope"))
    with pytest.raises(VolumePathError, match=r"ckpt holds no checkpoint \(no \.metadata file\)"):
        UCVolumeReader(volume.path("ckpt"))

    # the recipe in air_core.torch.checkpoint's docs
    torch.save({"w": torch.ones(2)}, volumes.parse(volume.path("ckpt/model.pt")).local)
    assert torch.load(volumes.parse(volume.path("ckpt/model.pt")).local)["w"].tolist() == [1.0, 1.0]


def test_air_core_never_imports_torch():
    code = "import sys, air_core, air_core.stream, air_core.planning.shares; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def mixture(volume) -> list[dict]:
    named_files(volume.local("big"), 40)
    for i in range(5):
        volume.write(f"small/s{i}.bin", f"small/s{i}\n".encode() + os.urandom(30 * i))
    return [{"path": volume.path("big"), "choose": 20}, {"path": volume.path("small"), "choose": 10}]


def test_a_mixture_dataset_is_small_when_pickled(volume):
    dataset = UCVolumeDataset(sources=mixture(volume), shuffle=True)
    assert len(pickle.dumps(dataset)) < 4000
    assert len(pickle.loads(pickle.dumps(dataset))._stream) == 30


@pytest.mark.slow
def test_a_mixture_reads_each_sources_share_per_epoch_through_workers(volume):
    dataset = UCVolumeDataset(sources=mixture(volume), shuffle=True, seed=2)
    loader = DataLoader(Names(dataset), batch_size=4, num_workers=2, collate_fn=list)
    big = Counter()
    for _ in range(2):
        got = Counter(n for b in loader for n in b)
        assert {n: c for n, c in got.items() if n.startswith("small/")} == {f"small/s{i}": 2 for i in range(5)}
        epoch_big = Counter({n: c for n, c in got.items() if not n.startswith("small/")})
        assert sum(epoch_big.values()) == 20
        big.update(epoch_big)
    assert len(big) == 40 and set(big.values()) == {1}  # 2 x 20 of the 40 big files: none twice yet


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_a_mixture_resumes_past_the_first_epoch_on_other_workers_exactly_once(volume):
    sources = mixture(volume)
    whole = UCVolumeDataset(sources=sources, shuffle=True, seed=4)
    whole.set_epoch(2)
    want = Counter(n for n in Names(whole))
    dataset = UCVolumeDataset(sources=sources, shuffle=True, seed=4)
    dataset.set_epoch(2)
    loader = DataLoader(Names(dataset), batch_size=3, num_workers=2, collate_fn=list)
    iterator = iter(loader)
    before = [n for _ in range(3) for n in next(iterator)]
    state = loader.state_dict()
    del iterator
    resumed = DataLoader(Names(UCVolumeDataset(sources=sources, shuffle=True, seed=4)), batch_size=3, num_workers=3,
                         collate_fn=list)
    resumed.load_state_dict(state)
    assert Counter(before + [n for b in resumed for n in b]) == want


def table_mixture(volume) -> list[dict]:
    """chat: 2 Parquet files of 30 rows in row groups of 8; code: a JSON Lines file of 12 rows. Rows {id, src}."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in range(2):
        path = volume.local(f"chat/part-{f}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": list(range(30 * f, 30 * f + 30)), "src": ["chat"] * 30}), path,
                       row_group_size=8)
    volume.write("code/a.jsonl", "".join(json.dumps({"id": 100 + i, "src": "code"}) + "\n" for i in range(12)))
    return [{"path": volume.path("chat"), "choose": 25}, {"path": volume.path("code"), "choose": 18}]


def epoch_rows(sources, epoch, **opts) -> Counter:
    """The ids of `epoch` as one RowStream reads them."""
    from air_core import RowStream

    stream = RowStream(sources=sources, **opts)
    stream.set_epoch(epoch)
    return Counter(row["id"] for row in stream)


def test_rows_mode_reads_a_mixture_of_tables_each_sources_rows_every_epoch(volume):
    sources = table_mixture(volume)
    dataset = UCVolumeDataset(sources=sources, mode="rows", shuffle=True, seed=3)
    loader = DataLoader(dataset, batch_size=5, num_workers=0, collate_fn=list)
    chat = Counter()
    for epoch in range(3):  # each pass the next epoch
        rows = [row for batch in loader for row in batch]
        got = Counter(row["id"] for row in rows)
        assert got == epoch_rows(sources, epoch, shuffle=True, seed=3)
        assert sum(c for i, c in got.items() if i < 100) == 25 and sum(c for i, c in got.items() if i >= 100) == 18
        assert {row["src"] for row in rows} == {"chat", "code"}
        chat.update({i: c for i, c in got.items() if i < 100})
    assert len(chat) == 60 and sorted(chat.values()) == [1] * 45 + [2] * 15  # every row once before any twice
    assert set(next(iter(UCVolumeDataset(sources=sources, mode="rows", columns=["id"])))) == {"id"}
    assert len(pickle.dumps(dataset)) < 4000  # workers get the sources' listings from files, not inside
    one = UCVolumeDataset(volume.path("code"), mode="rows")
    assert sorted(row["id"] for row in one) == list(range(100, 112))


def test_rows_mode_resumes_from_the_loaders_state_exactly_once(volume):
    sources = table_mixture(volume)
    dataset = UCVolumeDataset(sources=sources, mode="rows", shuffle=True)
    dataset.set_epoch(1)
    loader = DataLoader(dataset, batch_size=4, num_workers=0, collate_fn=list)
    iterator = iter(loader)
    before = [row["id"] for _ in range(5) for row in next(iterator)]
    state = loader.state_dict()
    del iterator
    resumed = DataLoader(UCVolumeDataset(sources=sources, mode="rows", shuffle=True), batch_size=4, num_workers=0,
                         collate_fn=list)
    resumed.load_state_dict(state)
    assert Counter(before + [row["id"] for b in resumed for row in b]) == epoch_rows(sources, 1, shuffle=True)
    alone = UCVolumeDataset(sources=sources, mode="rows", shuffle=True)  # the dataset's own state, no loader
    alone.set_epoch(2)
    rows = iter(alone)
    before = [next(rows)["id"] for _ in range(17)]
    again = UCVolumeDataset(sources=sources, mode="rows", shuffle=True)
    again.load_state_dict(json.loads(json.dumps(alone.state_dict())))
    assert again.next_epoch() == 2
    assert Counter(before + [row["id"] for row in again]) == epoch_rows(sources, 2, shuffle=True)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_rows_mode_resumes_a_mixture_past_the_first_epoch_on_other_workers_exactly_once(volume):
    sources = table_mixture(volume)
    dataset = UCVolumeDataset(sources=sources, mode="rows", shuffle=True, seed=4, equalize="pad")
    loader = DataLoader(dataset, batch_size=3, num_workers=2, collate_fn=list)
    assert Counter(row["id"] for b in loader for row in b) == epoch_rows(sources, 0, shuffle=True, seed=4,
                                                                          equalize="pad")
    iterator = iter(loader)  # epoch 1
    before = [row["id"] for _ in range(4) for row in next(iterator)]
    state = loader.state_dict()
    del iterator
    resumed = DataLoader(UCVolumeDataset(sources=sources, mode="rows", shuffle=True, seed=4, equalize="pad"),
                         batch_size=3, num_workers=3, collate_fn=list)
    resumed.load_state_dict(state)
    after = [row["id"] for b in resumed for row in b]
    assert Counter(before + after) == epoch_rows(sources, 1, shuffle=True, seed=4, equalize="pad")


def test_rows_mode_refuses_what_only_files_mode_reads(volume):
    sources = table_mixture(volume)
    with pytest.raises(OptionError, match="balance='stride' is an option of files mode"):
        UCVolumeDataset(sources=sources, mode="rows", balance="stride")
    with pytest.raises(OptionError, match="columns= picks a table's columns: give mode='rows'"):
        UCVolumeDataset(sources=sources, columns=["id"])
    with pytest.raises(OptionError, match="mode='table': choose one of"):
        UCVolumeDataset(sources=sources, mode="table")
    # Files mode (the default) and a source asking for a table's rows: this door's way to them, not RowStream's.
    with pytest.raises(OptionError, match=r"sources\[1\] \(.*code\) asks for mode 'json', a table's rows, in a "
                                          r"mixture of loose files: mix tables' rows with "
                                          r"UCVolumeDataset\(sources=\[...\], mode='rows'\)"):
        UCVolumeDataset(sources=[sources[0], {**sources[1], "mode": "json"}])
    with pytest.raises(OptionError, match="rows mode plans from its tables' units"):
        UCVolumeDataset(sources=sources, mode="rows").manifest
    volume.write("notes/a.txt", "one\ntwo\n")
    with pytest.raises(OptionError, match=r"holds rows of \(id: int64, src: string\) but sources\[2\].*of \(text"):
        UCVolumeDataset(sources=sources + [{"path": volume.path("notes"), "mode": "text", "choose": 3}], mode="rows")
