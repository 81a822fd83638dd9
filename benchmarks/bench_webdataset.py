"""A folder of WebDataset tars through uc-volume beside HF's `webdataset` builder and Ray's `read_webdataset`, under netvol.

The data (emulated volume: NETVOL_OPEN_MS=10, NETVOL_MBPS=200): 32 tar shards of about 16 MB (`--scale`
shrinks each shard, never their number), each sample four members: a 320x320 JPEG of seeded noise (~100 KiB,
drawn as `common.make_images` draws its images), a `.json` `{"id": k, "label": c, "caption_words": n}`, a
`.txt` caption and a `.cls` class, ids 0..N-1 over the folder, in order.

What is measured is reading, not JPEG decoding: no reader decodes an image. Both HF builders type `.jpg` as
`datasets.Image()`, which decodes to PIL when a row is formatted, so both datasets are read through
`.cast_column("jpg", Image(decode=False))` and their rows hold `{"bytes", "path"}`; the RowStream and
`read_uc_volume` give the image bytes as a binary column, and Ray's `read_webdataset` (whose default decoder
turns a `.jpg` into a numpy array) is given a decoder that parses the `.json`, `.txt` and `.cls` members as
the others do and leaves the image's bytes as they are. Every reader parses every sample's JSON.

One run measures, each in fresh processes with netvol preloaded and a trace of the bytes read per process
(NETVOL_TRACE_BYTES=1, one trace file per rank):

- uc-volume, 2 ranks x 2 DataLoader workers: `load_dataset("uc-volume", data_dir=<folder>, streaming=True,
  world_size=2, num_workers=2)` (mode "auto": a folder of tars reads as WebDataset) and
  `air_hf.split_for_rank(ds, rank=r, world_size=2)`, two rank processes sharing one fresh node cache, each
  through `DataLoader(ds, num_workers=2, batch_size=256)` whose collate counts the samples, sums their JSON
  ids and their image bytes: a first epoch (the cache empty) and a second (`set_epoch(1)`, the cache warm);
- hf-webdataset, the same 2 ranks x 2 workers: `load_dataset("webdataset", data_files=<the tars' paths>,
  streaming=True)`, HF's reader opening the files itself (under netvol too), and
  `datasets.distributed.split_dataset_by_node` (32 shards: 16 tars a rank);
- air_core-rowstream, the same 2 ranks x 2 workers through the core's own door: a DataLoader over
  `air_core.RowStream(folder, rank=r, world_size=2)`, each worker's stream yielding Arrow tables of 256
  samples (`batch_size=None`), the collate counting as above;
- ray-read_webdataset: `ray.data.read_webdataset(folder)` in one process, `iter_batches`, two executions; and
  air_ray-read_uc_volume: `read_uc_volume(folder)` the same way, the second execution on a warm cache.

Per system: samples/s per rank and in all (samples over the slowest rank's epoch), CPU µs a sample (a rank's
own and its DataLoader workers', from getrusage), bytes read from the volume (setup, first epoch, second
epoch) as a multiple of the tars' bytes, and whether the samples are complete (the counts add to the samples,
the ids' sum is 0+1+...+(N-1), and the image bytes add to every image's). The summary line sets the targets
beside the figures: volume bytes across ranks (setup and first epoch) <= 1.05x the data; first-epoch
samples/s >= 2x hf-webdataset's; a second epoch reads nothing.

    python benchmarks/bench_webdataset.py [--root /tmp/air-bench-wds] [--scale 1] [--systems ...] [--keep]

The data (about 512 MB at scale 1) is written under --root and removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path

from ranks import cleanup, emit, epochs, one_process, prepare, ranks, ray_executions, tables_dataset

VOLUME = "/Volumes/main/bench/webdataset"
FOLDER = f"{VOLUME}/tars"  # the data; its stamp beside it, so that every reader sees tars alone
SHARDS, SHARD_BYTES, SIDE = 32, 16_000_000, 320
WORLD, WORKERS, BATCH = 2, 2, 256
SYSTEMS = ("uc-volume", "hf-webdataset", "air_core-rowstream", "ray-read_webdataset", "air_ray-read_uc_volume")
RANKED = ("uc-volume", "hf-webdataset", "air_core-rowstream")
TARGETS = {"bytes": 1.05, "vs_hf": 2.0}
EXTRA = ("image_bytes",)  # summed by every reader besides rows and ids: the images arrived whole
WORDS = ("a photo of the small large red blue green dog cat bird car tree house street river mountain on in "
         "with under near at night day snow rain field old new two three people sitting standing running").split()


# -- the data ---------------------------------------------------------------------------------

def sample(rng, k: int) -> dict[str, bytes]:
    """Sample k's members, by extension."""
    from PIL import Image

    pixels = rng.integers(0, 255, (SIDE, SIDE, 3), dtype="uint8")
    jpeg = io.BytesIO()
    Image.fromarray(pixels).save(jpeg, format="JPEG", quality=92)
    words = int(rng.integers(5, 30))
    caption = " ".join(rng.choice(WORDS, words).tolist())
    return {"jpg": jpeg.getvalue(), "json": json.dumps({"id": k, "label": k % 10, "caption_words": words}).encode(),
            "txt": caption.encode(), "cls": str(k % 10).encode()}


def tar_bytes(members: dict[str, bytes]) -> int:
    """What the members take in a tar: a 512-byte header each, the data padded to 512."""
    return sum(512 + -(-len(v) // 512) * 512 for v in members.values())


def build_data(local: str, scale: float) -> dict:
    """The shards in `local`/tars (kept when they were written at this scale); their samples and bytes."""
    import numpy as np

    stamp = Path(local, "data.json")
    if stamp.exists() and json.loads(stamp.read_text()).get("scale") == scale:
        return json.loads(stamp.read_text())
    shutil.rmtree(local, ignore_errors=True)
    os.makedirs(f"{local}/tars")
    rng, target = np.random.default_rng(0), int(SHARD_BYTES * scale)
    k, image_bytes, pending = 0, 0, None  # pending: the sample that did not fit the last shard
    for s in range(SHARDS):
        with tarfile.open(f"{local}/tars/shard-{s:05d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            held = 0
            while True:
                members = pending or sample(rng, k)
                if held and held + tar_bytes(members) > target:
                    pending = members
                    break
                pending = None
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{k:08d}.{ext}")
                    info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
                    tar.addfile(info, io.BytesIO(data))
                held += tar_bytes(members)
                image_bytes += len(members["jpg"])
                k += 1
    info = {"scale": scale, "shards": SHARDS, "rows": k, "image_bytes": image_bytes,
            "bytes": sum(os.path.getsize(p) for p in tars(local))}
    stamp.write_text(json.dumps(info))
    return info


def tars(local: str) -> list[str]:
    return [f"{local}/tars/{f}" for f in sorted(os.listdir(f"{local}/tars"))]


# -- measurements, each run in its own process ------------------------------------------

def count(rows: list[dict]) -> tuple[int, int, int]:
    """The DataLoader's collate over HF rows: what crosses the process boundary is three numbers a batch."""
    return len(rows), sum(r["json"]["id"] for r in rows), sum(len(r["jpg"]["bytes"]) for r in rows)


def count_table(table) -> tuple[int, int, int]:
    """The same for a table (a DataLoader's with `batch_size=None`, a Ray batch), its images a binary column."""
    import pyarrow.compute as pc

    return (table.num_rows, pc.sum(pc.struct_field(table.column("json"), "id")).as_py() or 0,
            pc.sum(pc.binary_length(table.column("jpg"))).as_py() or 0)


def decode_members(sample: dict) -> dict:
    """Ray's decoder: `.json`, `.txt` and `.cls` as the other readers type them; the image left as its bytes."""
    parse = {"json": json.loads, "txt": bytes.decode, "cls": int}
    return {k: parse[k](v) if k in parse else v for k, v in sample.items()}


def measure_rank(args) -> dict:
    """One of the ranks (RANK / WORLD_SIZE set): set up, wait for the others, two epochs, each after a barrier."""
    import datasets
    from torch.utils.data import DataLoader

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    t = time.perf_counter()
    if args.system == "air_core-rowstream":
        from air_core import RowStream

        ds = tables_dataset(RowStream(FOLDER, rank=rank, world_size=world), BATCH)
    elif args.system == "uc-volume":
        import air_hf

        ds = datasets.load_dataset("uc-volume", data_dir=FOLDER, split="train", streaming=True,
                                   cache_dir=args.hf_cache, world_size=world, num_workers=WORKERS)
        ds = air_hf.split_for_rank(ds, rank=rank, world_size=world).cast_column("jpg", datasets.Image(decode=False))
    else:
        from datasets.distributed import split_dataset_by_node

        ds = datasets.load_dataset("webdataset", data_files=tars(args.local), split="train", streaming=True,
                                   cache_dir=args.hf_cache)
        ds = split_dataset_by_node(ds, rank=rank, world_size=world).cast_column("jpg", datasets.Image(decode=False))
    out = {"system": args.system, "rank": rank, "setup_s": round(time.perf_counter() - t, 3),
           "num_shards": ds.num_shards}
    if args.system == "air_core-rowstream":
        loader = DataLoader(ds, batch_size=None, num_workers=WORKERS, collate_fn=count_table)
    else:
        loader = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count)
    return epochs(ds, loader.__iter__, Path(args.sync), out, EXTRA)


def measure_ray(args) -> dict:
    """Ray in one process: two executions of `read_webdataset` (or of ours, the second on a warm cache)."""
    import ray

    def make():
        if args.system == "air_ray-read_uc_volume":
            from air_ray import read_uc_volume

            return read_uc_volume(FOLDER)
        return ray.data.read_webdataset(f"{args.local}/tars", decoder=decode_members)
    return ray_executions(make, count_table, {"system": args.system}, EXTRA)


# -- the run ----------------------------------------------------------------------------------

def summary(info: dict, got: dict) -> dict:
    ours, hf, rows = got.get("uc-volume"), got.get("hf-webdataset"), got.get("air_core-rowstream")
    out = {"summary": f"WebDataset, {info['shards']} tars (scale {info['scale']}): {info['rows']:,} samples, "
                      f"{info['bytes'] / 1e6:,.0f} MB; {WORLD} ranks x {WORKERS} DataLoader workers, "
                      "netvol 10 ms / 200 MB/s",
           "scale": info["scale"], "rows": info["rows"], "bytes": info["bytes"],
           "targets": {"volume_bytes_ratio": f"<= {TARGETS['bytes']}", "vs_hf_webdataset": f">= {TARGETS['vs_hf']}",
                       "second_bytes": "0"}}
    if ours:
        out.update({"rows_s": ours["first_rows_s"], "rows_s_per_rank": ours["first_rows_s_per_rank"],
                    "second_rows_s": ours["second_rows_s"], "volume_bytes_ratio": ours["volume_bytes_ratio"],
                    "bytes_ratio_per_rank": ours["first_bytes_ratio_per_rank"],
                    "second_bytes_ratio": ours["second_bytes_ratio"],
                    "complete": ours["first_complete"] and ours["second_complete"],
                    "bytes_ok": ours["volume_bytes_ratio"] <= TARGETS["bytes"],
                    "second_ok": ours["second_bytes_ratio"] == 0})
    if hf:
        out.update({"hf_rows_s": hf["first_rows_s"], "hf_rows_s_per_rank": hf["first_rows_s_per_rank"],
                    "hf_second_rows_s": hf["second_rows_s"], "hf_volume_bytes_ratio": hf["volume_bytes_ratio"],
                    "hf_second_bytes_ratio": hf["second_bytes_ratio"],
                    "hf_complete": hf["first_complete"] and hf["second_complete"]})
    if ours and hf:
        out["vs_hf_webdataset"] = round(ours["first_rows_s"] / hf["first_rows_s"], 2)
        out["vs_hf_ok"] = out["vs_hf_webdataset"] >= TARGETS["vs_hf"]
    if rows:  # the core's own door through a DataLoader, its samples in Arrow tables
        out.update({"rowstream_rows_s": rows["first_rows_s"], "rowstream_second_rows_s": rows["second_rows_s"],
                    "rowstream_volume_bytes_ratio": rows["volume_bytes_ratio"],
                    "rowstream_second_bytes_ratio": rows["second_bytes_ratio"],
                    "rowstream_complete": rows["first_complete"] and rows["second_complete"]})
        if hf:
            out["rowstream_vs_hf_webdataset"] = round(rows["first_rows_s"] / hf["first_rows_s"], 2)
    ray, air_ray = got.get("ray-read_webdataset"), got.get("air_ray-read_uc_volume")
    if ray:
        out.update({"ray_rows_s": ray["first_rows_s"], "ray_second_rows_s": ray["second_rows_s"],
                    "ray_bytes_ratio": ray["first_bytes_ratio"], "ray_second_bytes_ratio": ray["second_bytes_ratio"],
                    "ray_complete": ray["first_complete"] and ray["second_complete"]})
    if air_ray:
        out.update({"air_ray_rows_s": air_ray["first_rows_s"], "air_ray_second_rows_s": air_ray["second_rows_s"],
                    "air_ray_bytes_ratio": air_ray["first_bytes_ratio"],
                    "air_ray_second_bytes_ratio": air_ray["second_bytes_ratio"],
                    "air_ray_complete": air_ray["first_complete"] and air_ray["second_complete"]})
    if ray and air_ray:
        out["air_ray_vs_ray"] = round(air_ray["first_rows_s"] / ray["first_rows_s"], 2)
        out["air_ray_second_vs_ray"] = round(air_ray["second_rows_s"] / ray["second_rows_s"], 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default="/tmp/air-bench-wds", help="work folder (data, caches, traces, netvol.so)")
    p.add_argument("--scale", type=float, default=1.0, help="data size: 1 is 32 tars of 16 MB")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    p.add_argument("--keep", action="store_true", help="keep the data under --root for the next run")
    p.add_argument("--run", choices=["rank", "ray"], help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--sync", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.local = f"{args.root}/Volumes{VOLUME[len('/Volumes'):]}"
    args.cache, args.hf_cache, args.script = f"{args.root}/cache", f"{args.root}/hf", __file__
    if args.run:
        if args.run == "rank":
            import torch  # noqa: F401  (a training script has it imported; datasets imports it lazily)
        print(json.dumps({"rank": measure_rank, "ray": measure_ray}[args.run](args)))
        return

    info = prepare(args, build_data)
    got = {}
    try:
        for system in (s for s in args.systems.split(",") if s):
            if system in RANKED:
                got[system] = emit(ranks(args, system, None, info, world=WORLD, workers=WORKERS, extra=EXTRA))
            else:
                got[system] = emit(one_process(args, "ray", system, None, info, extra=EXTRA))
        emit(summary(info, got))
    finally:
        cleanup(args)


if __name__ == "__main__":
    main()
