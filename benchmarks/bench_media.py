"""Records that name images through uc-volume beside HF's `imagefolder`, Ray's `download()` and our files mode, under
netvol.

The data (emulated volume: NETVOL_OPEN_MS=10, NETVOL_MBPS=200): N JPEGs of ~147 KiB (default 20,000; `--files`)
in folders of 1,000, `<set>/images/part-KKK/NNNNNN.jpg`, each image a noise JPEG of 390x390 (as
`common.make_images` draws them) taken from a pool of 32, with a comment segment naming its id so that every
file is distinct and a reader of the file alone can tell which it is. Two layouts name the same images:

- folder: HF's layout, `<set>/images/metadata.jsonl` beside them, `{"file_name": "part-KKK/NNNNNN.jpg", "id": k,
  "caption": ...}`;
- llava: LLaVA's, `<set>/chat/llava.jsonl` of `{"id": k, "image": "part-KKK/NNNNNN.jpg", "conversations":
  [{"from": "human", "value": "<image>\\n..."}, {"from": "gpt", "value": caption}]}`, the images under the
  sibling `images/` folder (`media={"image": "image"}, media_dir="images"` over `<set>`).

What is measured is reading, not JPEG decoding: no reader decodes an image, and every consumer reads each image's
bytes (from the path it is given, or the bytes column). HF's datasets are read through `.cast_column("image",
Image(decode=False))`, their rows holding `{"path", "bytes": None}`.

One run measures, each in fresh processes with netvol preloaded and a trace of the bytes read per process
(NETVOL_TRACE_BYTES=1, one trace file per rank), ranks being 2 processes started together, each with a node cache
of its own (two nodes), 2 DataLoader workers each, batches of 256 whose collate counts the records, sums their ids
and the bytes of their images:

- uc-volume, per layout: `load_dataset("uc-volume", data_dir=..., streaming=True, world_size=2, num_workers=2)`
  (the folder's metadata found by mode "auto"; the LLaVA set with `media=` and `media_dir=`) and
  `air_hf.split_for_rank`, through a torch DataLoader;
- air_core-rows, per layout: `air_core.torch.UCVolumeDataset(..., mode="rows")` (the same options) in
  `air_core.torch.DataLoader`, its rows' `image` the local path of the cached copy;
- uc-volume-files and air_core-files: our files mode over the same images loose (`include="*.jpg"`), through the
  same two doors: what the records should cost little on top of; the id is read from each image's bytes;
- hf-imagefolder (folder layout): `load_dataset("imagefolder", data_dir=..., streaming=True)` and
  `datasets.distributed.split_dataset_by_node` (one metadata file, one shard: each rank reads every record and
  keeps every other, its images opened by the consumer from the volume, one at a time);
- ray-download (llava layout): `ray.data.read_json(<the records>)`, each record's image path joined to the images
  folder by an expression, `.with_column("bytes", download("uri"))`, in one process, two executions; and
  air_ray-read_uc_volume: `read_uc_volume(<set>, media=..., media_dir="images", include_bytes=True)` the same way,
  the second execution on a warm cache.

Per system: records/s per rank and in all (records over the slowest rank's epoch), CPU µs a record, bytes read from
the volume (setup, first epoch, second epoch) as a multiple of the records' and images' bytes (the images' alone
for files mode), and whether the records are complete (the counts add to N, the ids to 0+1+...+(N-1), the image
bytes to every image's). A summary line per layout sets the targets beside the figures: first-epoch records/s >=
0.8x our files mode's through the same door, >= 10x hf-imagefolder's (folder), >= 2x ray-download's (llava); volume
bytes across ranks (setup and first epoch) <= 1.05x the records and images; a second epoch reads nothing.

    python benchmarks/bench_media.py [--root /tmp/air-bench-media] [--files 20000] [--layouts folder,llava]
                                     [--systems ...] [--keep]

The data (about 3 GB for 20,000 images) is written under --root and removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from ranks import cleanup, emit, epochs, one_process, prepare, ranks, ray_executions

VOLUME = "/Volumes/main/bench/media"
SET = f"{VOLUME}/set"  # the data; its stamp beside it, so that no reader sees it
LAYOUTS = {"folder": "HF's layout (metadata.jsonl beside the images)",
           "llava": "LLaVA's layout (JSON Lines of conversations, the images in a sibling images/)"}
PER_FOLDER, POOL, SIDE = 1000, 32, 390
WORLD, WORKERS, BATCH = 2, 2, 256
SYSTEMS = ("uc-volume", "air_core-rows", "uc-volume-files", "air_core-files", "hf-imagefolder", "ray-download",
           "air_ray-read_uc_volume")
RANKED = ("uc-volume", "air_core-rows", "uc-volume-files", "air_core-files", "hf-imagefolder")
FILES = ("uc-volume-files", "air_core-files")  # no layout: the images alone
ONLY = {"hf-imagefolder": "folder", "ray-download": "llava", "air_ray-read_uc_volume": "llava"}
TARGETS = {"vs_files": 0.8, "vs_imagefolder": 10.0, "vs_ray": 2.0, "bytes": 1.05}
EXTRA = ("image_bytes",)  # summed by every reader besides records and ids: the images arrived whole
WORDS = ("a photo of the small large red blue green dog cat bird car tree house street river mountain on in "
         "with under near at night day snow rain field old new two three people sitting standing running").split()
ID_AT = slice(9, 17)  # where a JPEG's comment segment holds its id: SOI, FFFE, length, b"id ", 8 digits


# -- the data ---------------------------------------------------------------------------------

def jpeg_pool(rng) -> list[bytes]:
    """`POOL` noise JPEGs of ~147 KiB, drawn as `common.make_images` draws its images."""
    import io

    from PIL import Image

    out = []
    for _ in range(POOL):
        data = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (SIDE, SIDE, 3), dtype="uint8")).save(data, format="JPEG", quality=92)
        out.append(data.getvalue())
    return out


def named_jpeg(jpeg: bytes, k: int) -> bytes:
    """`jpeg` with a comment segment after its start naming id `k` (`ID_AT`): a distinct file that still decodes."""
    text = b"id %08d" % k
    return jpeg[:2] + b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text + jpeg[2:]


def build_data(local: str, files: int) -> dict:
    """The images and both layouts' records under `local` (kept when they were written for this many files); the
    records, their bytes and the images' bytes, per layout."""
    import numpy as np

    stamp = Path(local, "data.json")
    if stamp.exists() and json.loads(stamp.read_text()).get("files") == files:
        return json.loads(stamp.read_text())
    shutil.rmtree(local, ignore_errors=True)
    root = f"{local}/set"
    os.makedirs(f"{root}/chat")
    rng = np.random.default_rng(0)
    pool, image_bytes = jpeg_pool(rng), 0
    with open(f"{root}/chat/llava.jsonl", "w") as chat:
        meta = []
        for k in range(files):
            name = f"part-{k // PER_FOLDER:03d}/{k:06d}.jpg"
            if k % PER_FOLDER == 0:
                os.makedirs(f"{root}/images/part-{k // PER_FOLDER:03d}")
            data = named_jpeg(pool[k % POOL], k)
            with open(f"{root}/images/{name}", "wb") as f:
                f.write(data)
            image_bytes += len(data)
            caption = " ".join(rng.choice(WORDS, int(rng.integers(5, 30))).tolist())
            meta.append(json.dumps({"file_name": name, "id": k, "caption": caption}) + "\n")
            chat.write(json.dumps({"id": k, "image": name, "conversations": [
                {"from": "human", "value": "<image>\nWhat does the picture show?"},
                {"from": "gpt", "value": caption}]}) + "\n")
    Path(f"{root}/images/metadata.jsonl").write_text("".join(meta))
    records = {"folder": os.path.getsize(f"{root}/images/metadata.jsonl"),
               "llava": os.path.getsize(f"{root}/chat/llava.jsonl")}
    info = {"files": files, "image_bytes": image_bytes,
            "images": {"rows": files, "bytes": image_bytes, "image_bytes": image_bytes},
            **{layout: {"rows": files, "records_bytes": n, "bytes": n + image_bytes, "image_bytes": image_bytes}
               for layout, n in records.items()}}
    stamp.write_text(json.dumps(info))
    return info


# -- measurements, each run in its own process ------------------------------------------

def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def count(rows: list[dict]) -> tuple[int, int, int]:
    """The collate of HF rows of records: what crosses the process boundary is three numbers a batch."""
    return len(rows), sum(r["id"] for r in rows), sum(len(read(r["image"]["path"])) for r in rows)


def count_core(rows: list[dict]) -> tuple[int, int, int]:
    """The same for the core's rows, their image the path of its cached copy."""
    return len(rows), sum(r["id"] for r in rows), sum(len(read(r["image"])) for r in rows)


def count_files(paths: list[str]) -> tuple[int, int, int]:
    """The same for files mode's local paths: the ids read from the images' bytes."""
    data = [read(p) for p in paths]
    return len(data), sum(int(d[ID_AT]) for d in data), sum(map(len, data))


def count_file_rows(rows: list[dict]) -> tuple[int, int, int]:
    """The same for the HF door's rows of files mode."""
    return count_files([r["local_path"] for r in rows])


def count_table(column: str):
    """The count of a Ray batch whose images' bytes are in `column`."""
    import pyarrow.compute as pc

    def count(table) -> tuple[int, int, int]:
        return (table.num_rows, pc.sum(table.column("id")).as_py() or 0,
                pc.sum(pc.binary_length(table.column(column))).as_py() or 0)
    return count


def measure_rank(args) -> dict:
    """One of the ranks (RANK / WORLD_SIZE set): set up, wait for the others, two epochs, each after a barrier."""
    import datasets
    from torch.utils.data import DataLoader

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    data_dir = f"{SET}/images" if args.case in ("folder", None) else SET
    named = {"media": {"image": "image"}, "media_dir": "images"} if args.case == "llava" else {}
    t = time.perf_counter()
    if args.system.startswith("air_core"):  # rank and world size from the environment
        from air_core.torch import DataLoader as CoreLoader
        from air_core.torch import UCVolumeDataset

        if args.system == "air_core-rows":
            ds, collate = UCVolumeDataset(data_dir, mode="rows", **named), count_core
        else:
            ds, collate = UCVolumeDataset(data_dir, include="*.jpg"), count_files
        loader = CoreLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=collate)
    elif args.system.startswith("uc-volume"):
        import air_hf

        files = args.system == "uc-volume-files"
        ds = datasets.load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True,
                                   cache_dir=args.hf_cache, world_size=world, num_workers=WORKERS,
                                   **({"mode": "files", "include": "*.jpg"} if files else named))
        ds = air_hf.split_for_rank(ds, rank=rank, world_size=world)
        if files:
            loader = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count_file_rows)
        else:
            ds = ds.cast_column("image", datasets.Image(decode=False))
            loader = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count)
    else:
        from datasets.distributed import split_dataset_by_node

        ds = datasets.load_dataset("imagefolder", data_dir=f"{args.local}/set/images", split="train",
                                   streaming=True, cache_dir=args.hf_cache)
        ds = split_dataset_by_node(ds, rank=rank, world_size=world).cast_column("image", datasets.Image(decode=False))
        loader = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count)
    out = {"system": args.system, **({"case": args.case} if args.case else {}), "rank": rank,
           "setup_s": round(time.perf_counter() - t, 3), "num_shards": getattr(ds, "num_shards", None)}
    return epochs(ds, loader.__iter__, Path(args.sync), out, EXTRA)


def no_http_filesystem() -> None:
    """A Ray worker's setup: where fsspec's HTTP file system cannot be imported (no aiohttp), it fails at once on
    every later import. Ray's `download()` imports it on each of its 16 threads for every path, and an import
    racing another's half-done one raises an ImportError that Ray turns into a null: in a run of 200 records
    without this, about 80 images came back null, with a warning in the worker's log alone."""
    import sys

    try:
        import fsspec.implementations.http  # noqa: F401
    except ImportError:
        sys.modules["fsspec.implementations.http"] = None  # type: ignore[assignment]


def ray_runtime_env(runtime_env: dict | None) -> dict:
    """`ray.init`'s runtime environment, through RAY_RUNTIME_ENV_HOOK: every worker set up by
    `no_http_filesystem` (pickled by value, this script being `__main__`)."""
    return {**(runtime_env or {}), "worker_process_setup_hook": no_http_filesystem}


def measure_ray(args) -> dict:
    """Ray in one process: two executions of `read_json` with `download()` (or of ours, the second on a warm
    cache)."""
    os.environ["RAY_RUNTIME_ENV_HOOK"] = "__main__.ray_runtime_env"

    def make():
        if args.system == "air_ray-read_uc_volume":
            from air_ray import read_uc_volume

            return read_uc_volume(SET, media={"image": "image"}, media_dir="images", include_bytes=True)
        import ray
        from ray.data.expressions import col, download, lit

        ds = ray.data.read_json(f"{args.local}/set/chat/llava.jsonl")
        return ds.with_column("uri", lit(f"{args.local}/set/images/") + col("image")).with_column(
            "bytes", download("uri"))
    column = "image" if args.system == "air_ray-read_uc_volume" else "bytes"
    return ray_executions(make, count_table(column), {"system": args.system, "case": args.case}, EXTRA)


# -- the run ----------------------------------------------------------------------------------

def summary(layout: str, info: dict, got: dict[tuple[str, str | None], dict]) -> dict:
    """The layout's figures beside its targets, for each of our doors: against our files mode through the same door,
    and against the peer of the layout (HF's imagefolder, Ray's download())."""
    data = info[layout]
    out = {"summary": f"Records naming images, {LAYOUTS[layout]}: {data['rows']:,} records, "
                      f"{data['records_bytes'] / 1e6:,.1f} MB of records, {info['image_bytes'] / 1e6:,.0f} MB of "
                      f"images; {WORLD} ranks (a node cache each) x {WORKERS} DataLoader workers, netvol 10 ms / "
                      "200 MB/s",
           "case": layout, "files": info["files"], "rows": data["rows"], "bytes": data["bytes"],
           "targets": {"vs_files": f">= {TARGETS['vs_files']}", "volume_bytes_ratio": f"<= {TARGETS['bytes']}",
                       "second_bytes": "0",
                       **({"vs_hf_imagefolder": f">= {TARGETS['vs_imagefolder']}"} if layout == "folder" else
                          {"vs_ray_download": f">= {TARGETS['vs_ray']}"})}}
    peer_name, peer_key, peer_target = (("hf-imagefolder", "hf_imagefolder", TARGETS["vs_imagefolder"])
                                        if layout == "folder" else ("ray-download", "ray_download", TARGETS["vs_ray"]))
    peer = got.get((peer_name, layout))
    if peer:
        out.update({f"{peer_key}_rows_s": peer["first_rows_s"], f"{peer_key}_second_rows_s": peer["second_rows_s"],
                    f"{peer_key}_volume_bytes_ratio": peer.get("volume_bytes_ratio", peer["first_bytes_ratio"]),
                    f"{peer_key}_second_bytes_ratio": peer["second_bytes_ratio"]})
    for prefix, system, files in (("", "uc-volume", "uc-volume-files"), ("core_", "air_core-rows", "air_core-files")):
        r, f = got.get((system, layout)), got.get((files, None))
        if not r:
            continue
        out.update({f"{prefix}rows_s": r["first_rows_s"], f"{prefix}rows_s_per_rank": r["first_rows_s_per_rank"],
                    f"{prefix}second_rows_s": r["second_rows_s"],
                    f"{prefix}volume_bytes_ratio": r["volume_bytes_ratio"],
                    f"{prefix}second_bytes_ratio": r["second_bytes_ratio"],
                    f"{prefix}complete": r["first_complete"] and r["second_complete"],
                    f"{prefix}bytes_ok": r["volume_bytes_ratio"] <= TARGETS["bytes"],
                    f"{prefix}second_ok": r["second_bytes_ratio"] == 0})
        if f:
            out[f"{prefix}files_rows_s"] = f["first_rows_s"]
            out[f"{prefix}vs_files"] = round(r["first_rows_s"] / f["first_rows_s"], 2)
            out[f"{prefix}vs_files_ok"] = out[f"{prefix}vs_files"] >= TARGETS["vs_files"]
        if peer:
            out[f"{prefix}vs_{peer_key}"] = round(r["first_rows_s"] / peer["first_rows_s"], 2)
            out[f"{prefix}vs_{peer_key}_ok"] = out[f"{prefix}vs_{peer_key}"] >= peer_target
    air_ray = got.get(("air_ray-read_uc_volume", layout))
    if air_ray:  # beside the targets: our Ray door over the same records, bytes through the object store
        out.update({"air_ray_rows_s": air_ray["first_rows_s"], "air_ray_second_rows_s": air_ray["second_rows_s"],
                    "air_ray_bytes_ratio": air_ray["first_bytes_ratio"],
                    "air_ray_second_bytes_ratio": air_ray["second_bytes_ratio"]})
        if peer:
            out["air_ray_vs_ray_download"] = round(air_ray["first_rows_s"] / peer["first_rows_s"], 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default="/tmp/air-bench-media", help="work folder (data, caches, traces, netvol.so)")
    p.add_argument("--files", type=int, default=20_000, help="images (and records of each layout)")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated subset of " + ",".join(LAYOUTS))
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    p.add_argument("--keep", action="store_true", help="keep the data under --root for the next run")
    # ranks.child passes the data's size on as --scale (here --files); no measurement needs it
    p.add_argument("--scale", help=argparse.SUPPRESS)
    p.add_argument("--run", choices=["rank", "ray"], help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--sync", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.local = f"{args.root}/Volumes{VOLUME[len('/Volumes'):]}"
    args.cache, args.hf_cache, args.script = f"{args.root}/cache", f"{args.root}/hf", __file__
    args.scale = args.files
    if args.run:
        if args.run == "rank":
            import torch  # noqa: F401  (a training script has it imported; datasets imports it lazily)

            # A node cache of its own: each rank stands for a node, fetching its own share of the records and media.
            os.environ["AIR_CACHE_DIR"] = f"{args.cache}/rank{os.environ['RANK']}"
        print(json.dumps({"rank": measure_rank, "ray": measure_ray}[args.run](args)))
        return

    info = prepare(args, build_data)
    systems = [s for s in args.systems.split(",") if s]
    layouts = [x for x in args.layouts.split(",") if x]
    got: dict[tuple[str, str | None], dict] = {}
    try:
        for system in (s for s in systems if s in FILES):
            got[system, None] = emit(ranks(args, system, None, info["images"], world=WORLD, workers=WORKERS,
                                           extra=EXTRA))
        for layout in layouts:
            for system in (s for s in systems if s not in FILES and ONLY.get(s, layout) == layout):
                if system in RANKED:
                    line = ranks(args, system, layout, info[layout], world=WORLD, workers=WORKERS, extra=EXTRA)
                else:
                    line = one_process(args, "ray", system, layout, info[layout], extra=EXTRA)
                got[system, layout] = emit(line)
            emit(summary(layout, info, got))
    finally:
        cleanup(args)


if __name__ == "__main__":
    main()
