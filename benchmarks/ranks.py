"""Ranks and one-process readers, each measured in processes of their own under netvol, and what their lines add up to.

A benchmark runs its own script again for each measurement (`child`, with `--run ...`), and that process
prints one JSON line. Every process tree has a trace file of its own (`traced`): netvol writes a line per
remote open and, with NETVOL_TRACE_BYTES=1, the bytes each open read, so a rank's bytes include its
DataLoader workers'. The ranks of one system share one node cache, empty when they start (`fresh`), and meet
at barriers of files in a sync folder, so that each epoch starts on every rank at once.

Every reader counts what it delivers: rows and the sum of their ids (ids 0..N-1 over the data), and any
other sums a benchmark names (`extra`), so that "complete" means every record exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from common import netvol

EPOCHS = ("first", "second")


# -- inside a measurement's process -------------------------------------------------------------

def trace_bytes() -> tuple[int, int]:
    """(bytes read from the volume, opens) in this process tree's trace so far."""
    nbytes = opens = 0
    with open(os.environ["NETVOL_TRACE"]) as f:
        for line in f:
            if line.startswith("read "):
                nbytes += int(line.rsplit(" ", 1)[1])
            elif line.startswith("open "):
                opens += 1
    return nbytes, opens


def cpu_s() -> float:
    """CPU seconds of this process and of its children: those waited for (a DataLoader's workers, once shut down)
    and those still running (persistent workers), from /proc."""
    import resource

    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime")) + _live_children_cpu_s(os.getpid())


def _live_children_cpu_s(pid: int) -> float:
    """CPU seconds of the running descendants of `pid` (their own and their waited-for children's)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:  # the thread or process ended meanwhile
            continue
        for child in map(int, children):
            try:
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # utime, stime, cutime, cstime: fields 14-17 of stat, counted from the state (field 3)
            total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK") + _live_children_cpu_s(child)
    return total


def wait_for(sync: Path, name: str, n: int) -> None:
    while len(list(sync.glob(f"{name}*"))) < n:
        time.sleep(0.005)


def tables_dataset(stream, batch: int):
    """A torch IterableDataset over a RowStream: each DataLoader worker's stream, in Arrow tables of `batch` rows."""
    import torch.utils.data

    class Tables(torch.utils.data.IterableDataset):
        num_shards = 0

        def set_epoch(self, epoch: int) -> None:
            stream.set_epoch(epoch)

        def __iter__(self):
            yield from stream.tables(batch_size=batch)

    return Tables()


def epochs(ds, loader_pass: Callable[[], Iterable[tuple[int, ...]]], sync: Path, out: dict,
           extra: Sequence[str] = ()) -> dict:
    """A rank's two epochs of `ds` (RANK / WORLD_SIZE set), after setup: wait for the other ranks, then each epoch
    after a barrier. `loader_pass()` yields (rows, id sum, *the `extra` sums) per batch; `out` gets the bytes read
    during setup and each epoch's figures."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    (sync / f"ready{rank}").touch()
    wait_for(sync, "ready", world)
    before, opens = trace_bytes()
    out.update(setup_bytes=before, setup_opens=opens)
    for epoch, name in enumerate(EPOCHS):
        (sync / f"at{epoch}-{rank}").touch()
        wait_for(sync, f"at{epoch}-", world)  # the ranks start each epoch together
        ds.set_epoch(epoch)
        cpu, t = cpu_s(), time.perf_counter()
        sums = [0] * (2 + len(extra))
        for got in loader_pass():
            sums = [a + b for a, b in zip(sums, got)]
        dt, cpu = time.perf_counter() - t, cpu_s() - cpu
        nbytes, n_opens = trace_bytes()
        rows = sums[0]
        out.update({f"{name}_s": round(dt, 3), f"{name}_rows": rows, f"{name}_id_sum": sums[1],
                    **{f"{name}_{k}": v for k, v in zip(extra, sums[2:])},
                    f"{name}_rows_s": round(rows / dt),
                    f"{name}_cpu_us_per_row": round(cpu / rows * 1e6, 2) if rows else None,  # a rank dealt nothing
                    f"{name}_bytes": nbytes - before, f"{name}_opens": n_opens - opens})
        before, opens = nbytes, n_opens
    return out


def ray_executions(make: Callable, count: Callable, out: dict, extra: Sequence[str] = ()) -> dict:
    """Two executions of the Ray Dataset `make()` in this process; `count(batch)` gives (rows, id sum, *the `extra`
    sums) of a pyarrow batch. The first execution's time includes making the dataset."""
    import ray

    ray.init(num_cpus=os.cpu_count(), object_store_memory=2 << 30, include_dashboard=False, log_to_driver=False)
    before, opens = trace_bytes()
    ds = None
    for name in EPOCHS:
        t = time.perf_counter()
        ds = ds if ds is not None else make()
        sums = [0] * (2 + len(extra))
        for batch in ds.iter_batches(batch_size=4096, batch_format="pyarrow"):
            sums = [a + b for a, b in zip(sums, count(batch))]
        dt = time.perf_counter() - t
        nbytes, n_opens = trace_bytes()
        out.update({f"{name}_s": round(dt, 3), f"{name}_rows": sums[0], f"{name}_id_sum": sums[1],
                    **{f"{name}_{k}": v for k, v in zip(extra, sums[2:])},
                    f"{name}_rows_s": round(sums[0] / dt), f"{name}_bytes": nbytes - before,
                    f"{name}_opens": n_opens - opens})
        before, opens = nbytes, n_opens
    ray.shutdown()
    return out


# -- the run: starting measurements and adding up their lines -----------------------------------------

def prepare(args, build_data: Callable[[str, float], dict]) -> dict:
    """Before a run: the data under `args.root` (built, or kept from a run at this scale, and announced), netvol
    built there, and every measurement's environment in `args.env`: the data's folder as /Volumes under netvol,
    tracing bytes, our node cache under the run's root, no network for HF, quiet Ray. Returns the data's info."""
    os.makedirs(args.root, exist_ok=True)
    t = time.perf_counter()
    info = build_data(args.local, args.scale)
    emit({"data": info, "build_s": round(time.perf_counter() - t, 1)})
    so = f"{args.root}/netvol.so"
    netvol.build(so)
    args.env = {**os.environ, "AIR_VOLUMES_ROOT": f"{args.root}/Volumes", "AIR_CACHE_DIR": args.cache,
                "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "LD_PRELOAD": so,
                "NETVOL_PREFIX": f"{args.root}/Volumes/", "NETVOL_OPEN_MS": "10", "NETVOL_MBPS": "200",
                "NETVOL_LIST_MS": "20", "NETVOL_TRACE_BYTES": "1", "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "disabled", "RAY_DATA_DISABLE_PROGRESS_BARS": "1", "RAY_DATA_LOG_LEVEL": "WARNING"}
    return info


def child(args, *extra: str, env: dict) -> subprocess.Popen:
    """The benchmark's script (`args.script`) again, as one measurement's process."""
    cmd = [sys.executable, args.script, "--root", args.root, "--scale", str(args.scale), *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"measurement failed ({proc.returncode}): {proc.args}")
    return json.loads(out.strip().splitlines()[-1])


def results(procs: list[subprocess.Popen]) -> list[dict]:
    """Each process's line, once all have ended; the first to fail ends the others, which would otherwise wait
    for it at a barrier forever."""
    while any(p.poll() is None for p in procs) and not any(p.returncode for p in procs):
        time.sleep(0.05)
    failed = [p for p in procs if p.returncode]
    if failed:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        raise SystemExit(f"measurement failed ({failed[0].returncode}): {failed[0].args}")
    return [result(p) for p in procs]


def fresh(args) -> None:
    """Before each measurement: an empty node cache (shared by its ranks) and an empty HF cache."""
    for d in (args.cache, args.hf_cache):
        shutil.rmtree(d, ignore_errors=True)


def traced(args, name: str) -> dict:
    """The environment of one process (tree) with an empty trace file of its own."""
    trace = Path(args.root, f"trace-{name}")
    trace.write_text("")
    return {**args.env, "NETVOL_TRACE": str(trace)}


def cleanup(args) -> None:
    """After the run: the caches and traces, and the data unless `--keep`."""
    for d in (args.cache, args.hf_cache):
        shutil.rmtree(d, ignore_errors=True)
    for trace in Path(args.root).glob("trace-*"):
        trace.unlink()
    if not args.keep:
        shutil.rmtree(args.local, ignore_errors=True)


def emit(line: dict) -> dict:
    line["load_avg_1m"] = round(os.getloadavg()[0], 2)  # other work on the machine skews rows/s
    print(json.dumps(line), flush=True)
    return line


def complete(got: list[dict], name: str, data: dict, extra: Sequence[str] = ()) -> bool:
    """Whether the lines `got` together delivered every record of `data` once in epoch `name`: its rows, ids
    0+1+...+(rows-1), and `data[k]` for each sum in `extra`."""
    n = data["rows"]
    return (sum(r[f"{name}_rows"] for r in got) == n and sum(r[f"{name}_id_sum"] for r in got) == n * (n - 1) // 2
            and all(sum(r[f"{name}_{k}"] for r in got) == data[k] for k in extra))


def ranks(args, system: str, case: str | None, data: dict, *, world: int, workers: int,
          extra: Sequence[str] = ()) -> dict:
    """`world` rank processes of `system` over `data` (its "rows" and "bytes"), one node cache: per rank, then in
    all."""
    fresh(args)
    sync = Path(args.root, "sync")
    shutil.rmtree(sync, ignore_errors=True)
    sync.mkdir()
    named = (system,) if case is None else (system, case)
    procs = []
    for r in range(world):
        env = {**traced(args, "-".join((*named, f"rank{r}"))), "RANK": str(r), "WORLD_SIZE": str(world),
               "LOCAL_RANK": str(r)}
        procs.append(child(args, "--run", "rank", "--system", system, *(() if case is None else ("--case", case)),
                           "--sync", str(sync), env=env))
    per_rank = [emit(r) for r in results(procs)]
    shutil.rmtree(sync, ignore_errors=True)
    size = data["bytes"]
    out = {"system": system, **({} if case is None else {"case": case}), "ranks": world, "workers": workers}
    out["setup_s"] = max(r["setup_s"] for r in per_rank)
    out["setup_bytes_ratio"] = round(sum(r["setup_bytes"] for r in per_rank) / size, 3)
    for name in EPOCHS:
        rows = sum(r[f"{name}_rows"] for r in per_rank)
        out.update({
            f"{name}_rows_s": round(rows / max(r[f"{name}_s"] for r in per_rank)),
            f"{name}_rows_s_per_rank": [r[f"{name}_rows_s"] for r in per_rank],
            f"{name}_bytes_ratio": round(sum(r[f"{name}_bytes"] for r in per_rank) / size, 3),
            f"{name}_bytes_ratio_per_rank": [round(r[f"{name}_bytes"] / size, 3) for r in per_rank],
            f"{name}_complete": complete(per_rank, name, data, extra),
            f"{name}_cpu_us_per_row": round(sum(r[f"{name}_cpu_us_per_row"] * r[f"{name}_rows"] for r in per_rank
                                                if r[f"{name}_rows"]) / rows, 2) if rows else None,
        })
    out["volume_bytes_ratio"] = round(out["setup_bytes_ratio"] + out["first_bytes_ratio"], 3)
    return out


def one_process(args, run: str, system: str, case: str | None, data: dict, *, slow: bool = True,
                extra: Sequence[str] = ()) -> dict:
    """One process (`--run run`) of `system` over `data`; `slow=False`: without netvol."""
    fresh(args)
    env = traced(args, system if case is None else f"{system}-{case}")
    if not slow:
        env = {k: v for k, v in env.items() if k != "LD_PRELOAD" and not k.startswith("NETVOL_")}
    r = result(child(args, "--run", run, "--system", system, *(() if case is None else ("--case", case)), env=env))
    for name in EPOCHS:
        if f"{name}_rows" in r:
            r[f"{name}_complete"] = complete([r], name, data, extra)
            if f"{name}_bytes" in r:
                r[f"{name}_bytes_ratio"] = round(r[f"{name}_bytes"] / data["bytes"], 3)
    return r
