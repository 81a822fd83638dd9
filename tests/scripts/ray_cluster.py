"""A head and two worker nodes, each worker with its own "local disk", reading one volume folder.

Usage: ray_cluster.py VOLUME_PATH WORKDIR CONSUMERS [ENTRY]   (as root, netvol preloaded, NETVOL_TRACE set)

Every node sees the same path WORKDIR/local, and AIR_CACHE_DIR points under
it; each worker node's raylet runs in its own mount namespace where that path
is a folder of its own, as separate machines would have. The head has no CPU
(as on Ray on Spark), so the driver only consumes. CONSUMERS, such as
"driver,actor,split", names one execution each of the same `read_uc_volume`
Dataset, consumed on the driver, in an actor pinned to a worker node, or
through `streaming_split(2, equal=True)` into one actor per worker node (what
Ray Train does); "join" and "leave" add a worker node or remove the last
one, make the Dataset again and consume it on the driver (place them last:
the other consumers stay on the first two nodes). ENTRY: how the Dataset is
made, "read_uc_volume" (default) or "read_datasource"
(`ray.data.read_datasource(UCVolumeDatasource(path))`). Consumers first take every
row, then (after the volume opens are counted) check it on their own node:
`bytes` against the volume, the row's own `local_path`, and
`air_ray.local_path(row)`. Prints one JSON line: figures per execution, and
what each worker node cached in the first.
"""

import hashlib
import json
import os
import sys

import ray
import ray._private.services as services
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import air_ray
from air_core.io import volume
from air_core.io.cache import Cache

VOLUME_PATH, WORKDIR, CONSUMERS = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
ENTRY = sys.argv[4] if len(sys.argv) > 4 else "read_uc_volume"
LOCAL = os.path.join(WORKDIR, "local")
os.environ["AIR_CACHE_DIR"] = os.path.join(LOCAL, "cache")
_start = services.start_ray_process


def start_in_own_disk(command, process_type, *args, env_updates=None, **kwargs):
    """Start a worker node's raylet (and so its workers) with LOCAL bound to that node's own folder."""
    if process_type == "raylet" and env_updates and "NODE_DIR" in env_updates:
        bind = 'mount --bind "$NODE_DIR" "$LOCAL" && exec "$@"'
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", bind, "sh", *command]
        env_updates = {**env_updates, "LOCAL": LOCAL}
    return _start(command, process_type, *args, env_updates=env_updates, **kwargs)


def opens() -> int:
    with open(os.environ["NETVOL_TRACE"]) as f:
        return sum(line.startswith("open ") for line in f)


def entry_name(path: str) -> str:
    """The name of this volume file's copy in any node's cache (a copy is named for its file's version)."""
    st = os.stat(volume.parse(path).local)
    return os.path.basename(Cache(os.path.join(WORKDIR, "names")).entry_path(path, st.st_size, st.st_mtime_ns))


def truth(path: str) -> str:
    with open(volume.parse(path).local, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Consumer:
    """Takes rows, then checks them where it runs."""

    def __init__(self):
        self.rows = []

    def take(self, rows) -> int:
        self.rows = [{k: r[k] for k in ("path", "local_path", "bytes")} for r in rows]
        return len(self.rows)

    def take_dataset(self, ds) -> int:
        return self.take(ds.iter_rows())

    def check(self) -> dict:
        bad_bytes = own_missing = bad_path = 0
        for r in self.rows:
            want = truth(r["path"])
            bad_bytes += hashlib.sha256(r["bytes"]).hexdigest() != want
            own_missing += not os.path.exists(r["local_path"])
            with open(air_ray.local_path(r), "rb") as f:
                bad_path += hashlib.sha256(f.read()).hexdigest() != want
        return {"rows": len(self.rows), "paths": [r["path"] for r in self.rows], "bad_bytes": bad_bytes,
                "own_local_path_missing": own_missing, "bad_local_path": bad_path}


@ray.remote(num_cpus=0)
class RemoteConsumer(Consumer):
    pass


@ray.remote(num_cpus=0)
def cached_names() -> list[str]:
    objects = os.path.join(os.environ["AIR_CACHE_DIR"], "objects")
    return sorted(name for sub in os.listdir(objects) for name in os.listdir(f"{objects}/{sub}")
                  if not name.startswith("."))


def main() -> None:
    services.start_ray_process = start_in_own_disk
    os.makedirs(LOCAL, exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 100 << 20, "include_dashboard": False})

    def add_worker(k: int):
        node_dir = os.path.join(WORKDIR, f"node{k}")
        os.makedirs(node_dir, exist_ok=True)
        return cluster.add_node(num_cpus=1, object_store_memory=100 << 20, env_vars={"NODE_DIR": node_dir})

    workers = [add_worker(k) for k in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    ids = [w.node_id for w in workers]
    pinned = [NodeAffinitySchedulingStrategy(n, soft=False) for n in ids]

    def make():
        if ENTRY == "read_datasource":
            return ray.data.read_datasource(air_ray.UCVolumeDatasource(VOLUME_PATH))
        return air_ray.read_uc_volume(VOLUME_PATH)

    def shares_of(nodes):
        parts = air_ray.UCVolumeDatasource(VOLUME_PATH).by_node({n: 1.0 for n in nodes})
        return {n: sorted(entry_name(p) for t in parts[n].get_read_tasks(1) for p in t.metadata.input_files)
                for n in parts}, parts

    ds = make()
    shares, parts = shares_of(ids)
    initial = shares
    driver = Consumer()
    actor = RemoteConsumer.options(scheduling_strategy=pinned[1]).remote()
    splitters = [RemoteConsumer.options(scheduling_strategy=s).remote() for s in pinned]
    executions = []
    for how in CONSUMERS:
        before = opens()
        if how == "driver":
            driver.take(ds.iter_rows())
            consumers = [driver]
        elif how in ("join", "leave"):
            if how == "join":
                workers.append(add_worker(len(workers)))
            else:
                cluster.remove_node(workers.pop())
            cluster.wait_for_nodes()
            ds = make()
            before = opens()
            driver.take(ds.iter_rows())
            consumers = [driver]
        elif how == "actor":
            ray.get(actor.take_dataset.remote(ds))
            consumers = [actor]
        else:
            its = ds.streaming_split(2, equal=True, locality_hints=ids)
            ray.get([c.take.remote(it.iter_rows()) for c, it in zip(splitters, its)])
            consumers = splitters
        read = opens() - before
        if not executions:  # what the reads cached, before consumers fetch for themselves
            caches = {n: ray.get(cached_names.options(scheduling_strategy=s).remote()) for n, s in zip(ids, pinned)}
        checks = [c.check() if c is driver else ray.get(c.check.remote()) for c in consumers]
        paths = [p for c in checks for p in c.pop("paths")]
        executions.append({"consumer": how, "volume_opens": read, "rows": len(paths), "distinct": len(set(paths)),
                           **{k: sum(c[k] for c in checks) for k in checks[0] if k != "rows"}})
        if how in ("join", "leave"):  # what moved: the files whose node changed
            now, _ = shares_of([w.node_id for w in workers])
            was = {f: n for n, files in shares.items() for f in files}
            executions[-1]["moved"] = sum(was.get(f) != n for n, files in now.items() for f in files)
            shares = now
        print(json.dumps(executions[-1]), file=sys.stderr)
    print(json.dumps({
        "executions": executions,
        "share": [len(initial[n]) for n in ids],
        "cached": [len(caches[n]) for n in ids],
        "cached_outside_share": [len(set(caches[n]) - set(initial[n])) for n in ids],
        "share_not_cached": [len(set(initial[n]) - set(caches[n])) for n in ids],
        "buckets": len(parts[ids[0]]._placed),
    }))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
