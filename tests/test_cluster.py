"""Several nodes emulated on one machine: node caches that stay useful, rows valid where they are consumed.

Ray: a head without CPUs and two worker nodes whose raylets run in mount
namespaces of their own, so one cache path is a different folder on each
node (see tests/scripts/ray_cluster.py); and Ray on a local Spark. torchrun:
two launches with `--nnodes 2`, each node in a mount namespace of its own or
with an AIR_CACHE_DIR of its own. netvol's trace counts what crossed the "network".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, free_port

from air_core.io.cache import Cache

pytestmark = pytest.mark.slow  # clusters and torchrun jobs

SCRIPTS = Path(__file__).parent / "scripts"


def trace_opens(trace: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in trace.read_text().splitlines() if line.startswith("open ")]


def netvol_env(volume, netvol_so: str, trace: Path) -> dict:
    trace.touch()
    return {"LD_PRELOAD": netvol_so, "NETVOL_PREFIX": f"{volume.root}/", "NETVOL_OPEN_MS": "10",
            "NETVOL_LIST_MS": "0", "NETVOL_TRACE": str(trace)}


def torchrun_nodes(script: Path, nproc: int, args: list[str], node_env: list[dict], *,
                   disks: list[tuple[Path, Path]] | None = None, timeout: float = 240) -> None:
    """Run `script` as one job over len(node_env) emulated nodes of `nproc` ranks each (static rendezvous).

    `disks`: per node, (its own folder, the path every node sees it at); each
    node then runs in a mount namespace of its own, as on separate machines.
    """
    port = free_port()
    procs = []
    for k, env in enumerate(node_env):
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(node_env)}", f"--node-rank={k}",
               f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", f"--master-port={port}", str(script), *args]
        if disks:
            own, seen_at = disks[k]
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   f'mount --bind "{own}" "{seen_at}" && exec "$@"', "sh", *cmd]
        procs.append(subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:  # a node that failed leaves the other waiting at the rendezvous
        for p in procs:
            if p.poll() is None:
                p.kill()
    for k, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"node {k} failed ({p.returncode}):\n{out[-6000:]}"


def cached_names(cache: Path) -> set[str]:
    return {p.name for p in (cache / "objects").glob("*/*") if not p.name.startswith(".")}


def entry_names(volume, paths: list[str], tmp_path: Path) -> set[str]:
    """The names of these volume files' copies in any node's cache (a copy is named for its file's version)."""
    cache, names = Cache(str(tmp_path / "names")), set()
    for p in paths:
        st = volume.local(p[len(volume.vol) + 1:]).stat()
        names.add(os.path.basename(cache.entry_path(p, st.st_size, st.st_mtime_ns)))
    return names


# -- Ray ---------------------------------------------------------------------------------------------


def _can_unshare() -> str | None:
    if os.geteuid() != 0:
        return "emulated nodes need root (each worker node's raylet gets a mount namespace of its own)"
    if shutil.which("unshare") is None:
        return "emulated nodes need util-linux `unshare`"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"`unshare -m` is refused here: {probe.stderr.decode().strip()}"
    return None


needs_unshare = pytest.mark.skipif(_can_unshare() is not None, reason=str(_can_unshare()))


@needs_unshare
def test_three_node_ray_cluster_reads_each_file_on_its_node_and_rows_are_valid_anywhere(volume, netvol_so, tmp_path):
    pytest.importorskip("ray")
    volume.files("d", 600, size=lambda i: 20_000)
    trace = tmp_path / "trace"
    env = {**os.environ, **netvol_env(volume, netvol_so, trace),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "ray_cluster.py"), volume.path("d"), str(tmp_path),
                           "driver,actor,split"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    first, *later = out["executions"]
    assert first["volume_opens"] == 600 and [e["volume_opens"] for e in later] == [0, 0]
    for e in out["executions"]:  # the CPU-less driver, a pinned actor, streaming_split's two consumers
        assert e["rows"] == e["distinct"] == 600
        assert e["bad_bytes"] == e["bad_local_path"] == 0
    assert first["own_local_path_missing"] == 600  # why rows carry bytes and local_path(row) exists
    # Each worker node cached exactly its part, which is half the files within one bucket.
    assert out["cached"] == out["share"] and out["cached_outside_share"] == [0, 0] == out["share_not_cached"]
    assert sum(out["share"]) == 600 and all(abs(s - 300) <= 600 / out["buckets"] + 1 for s in out["share"])


@needs_unshare
def test_read_datasource_on_a_cluster_keeps_each_nodes_share_in_its_cache(volume, netvol_so, tmp_path):
    pytest.importorskip("ray")
    volume.files("d", 600, size=lambda i: 20_000)
    trace = tmp_path / "trace"
    env = {**os.environ, **netvol_env(volume, netvol_so, trace),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "ray_cluster.py"), volume.path("d"), str(tmp_path),
                           "driver,actor,split,join,leave", "read_datasource"], env=env, capture_output=True,
                          text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    driver, actor, split, join, leave = out["executions"]
    assert driver["volume_opens"] == 600 and actor["volume_opens"] == split["volume_opens"] == 0
    for e in out["executions"]:  # every row once, valid where it is consumed
        assert e["rows"] == e["distinct"] == 600 and e["bad_bytes"] == e["bad_local_path"] == 0
    # Each worker node cached its own share, as read_uc_volume places it, whichever node ran the tasks.
    assert out["cached"] == out["share"] and out["cached_outside_share"] == [0, 0] == out["share_not_cached"]
    # A node that joins takes about its share from the others (what it does not find in its cache is read
    # once: the consumers' checks cached some rows' files where they ran); when it leaves, that share goes
    # back to the nodes that cached it before, and nothing else moves.
    assert 0 < join["volume_opens"] <= join["moved"] <= 1.25 * 600 / 3  # 199-211 moved in runs by hand
    assert leave["moved"] == join["moved"] and leave["volume_opens"] == 0


# -- torchrun ----------------------------------------------------------------------------------------


@needs_unshare
def test_torchrun_two_nodes_of_two_ranks_fetch_their_own_shares_once(volume, netvol_so, tmp_path):
    paths = volume.files("d", 120, size=lambda i: 100 + (i * 7919) % 5000)
    trace, out, local = tmp_path / "trace", tmp_path / "out", tmp_path / "local"
    out.mkdir()
    local.mkdir()
    disks = [(tmp_path / f"node{k}", local) for k in range(2)]
    for own, _ in disks:
        own.mkdir()
    caches = [own / "cache" for own, _ in disks]  # each node's $AIR_CACHE_DIR, seen from outside
    env = {**netvol_env(volume, netvol_so, trace), "AIR_CACHE_DIR": str(local / "cache")}
    torchrun_nodes(SCRIPTS / "core_nodes.py", 2, [volume.path("d"), str(out)], [env, env], disks=disks)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["node"] for r in ranks] == [0, 0, 1, 1]
    for epoch in range(2):
        assert sorted(p for r in ranks for p in r["epochs"][epoch]) == paths  # every file once per epoch
    start, after_first, after_second = ranks[0]["marks"]
    opens = trace_opens(trace)
    assert Counter(opens[start:after_first]) == Counter(str(volume.local(p[len(volume.vol) + 1:])) for p in paths)
    assert after_second == after_first  # the second epoch fetched nothing: each rank kept its share
    for k, cache in enumerate(caches):  # each node holds its own ranks' shares, nothing else
        mine = entry_names(volume, [p for r in ranks if r["node"] == k for p in r["epochs"][0]], tmp_path)
        assert cached_names(cache) == mine
    # Rank 0 alone listed; node 1, not finding rank 0's listing file, got it from rank 0 and saved its own.
    assert sum(line.startswith("list ") for line in trace.read_text().splitlines()) == 4
    assert [len(list((c / "manifests").glob("*.listing"))) for c in caches] == [1, 1]


def test_hf_uc_volume_two_nodes_of_one_rank_fetch_each_file_once(volume, netvol_so, tmp_path):
    pytest.importorskip("datasets")
    paths = volume.files("imgs", 60)
    trace, out = tmp_path / "trace", tmp_path / "out"
    out.mkdir()
    caches = [tmp_path / f"node{k}-cache" for k in range(2)]
    torchrun_nodes(SCRIPTS / "hf_ranks.py", 1, [volume.path("imgs"), str(tmp_path / "hf"), str(out)],
                   [{**netvol_env(volume, netvol_so, trace), "AIR_CACHE_DIR": str(c)} for c in caches])
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        assert sorted(p for r in ranks for p in r["epochs"][epoch]) == paths
    start, after_first, after_second = ranks[0]["trace_marks"]
    opens = trace_opens(trace)
    assert Counter(opens[start:after_first]) == Counter(str(volume.local(p[len(volume.vol) + 1:])) for p in paths)
    assert after_second == after_first


def test_hf_trainer_recipe_over_two_nodes_of_one_rank_reads_disjoint_halves_once(volume, netvol_so, tmp_path):
    pytest.importorskip("transformers")
    volume.files("imgs", 34)  # equalize="drop": 4 shards of 8 (2 files left out)
    trace, out = tmp_path / "trace", tmp_path / "out"
    out.mkdir()
    caches = [tmp_path / f"node{k}-cache" for k in range(2)]
    torchrun_nodes(SCRIPTS / "hf_trainer.py", 1, [volume.path("imgs"), str(tmp_path / "hf"), str(out), "4"],
                   [{**netvol_env(volume, netvol_so, trace), "AIR_CACHE_DIR": str(c)} for c in caches],
                   timeout=300)
    seen = [json.loads((out / f"rank{r}.json").read_text())["seen"] for r in range(2)]
    assert [len(s) for s in seen] == [16, 16]  # 4 steps x batch 4, one epoch of each node's half
    assert not set(seen[0]) & set(seen[1]) and len(set(seen[0] + seen[1])) == 32
    opens = Counter(trace_opens(trace))
    assert len(opens) == 32 and set(opens.values()) == {1}  # each file read once, by the node that trains on it


# -- Ray on Spark --------------------------------------------------------------------------------------


def test_ray_on_spark_reads_through_the_node_caches(volume, tmp_path):
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Ray on Spark needs Java for the local Spark")
    paths = volume.files("d", 60)
    bin_dir = str(Path(sys.executable).parent)  # Ray on Spark starts nodes with the `ray` command
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ["PATH"]]), "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "ray_on_spark.py"), volume.path("d")], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith('{"worker_nodes"')))
    assert out == {"worker_nodes": 2, "rows": [60, 60], "same": True}
    assert not any(volume.local(p[len(volume.vol) + 1:]).exists() for p in paths)
