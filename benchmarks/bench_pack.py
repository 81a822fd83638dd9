"""Loose files vs a pack of them: the same JPEGs through every front door, first and later epochs.

20,000 JPEGs of ~147 KiB (2.9 GB) under the emulated volume are packed into
1 GiB shards (timed), then each front door reads the loose folder and the
pack, in a fresh process with an empty cache each: FileStream, the
`uc-volume` builder streamed through a torch DataLoader (2 workers), Ray
(`read_uc_volume`, include_bytes) and `air_core.torch.UCVolumeDataset` with
its DataLoader (2 workers). Every reader gets each file's bytes into the
consumer. HF's own `load_dataset("parquet", streaming=True)` over the same
shards is the peer. The first epoch reads the volume; the "warm" figure is the
median of the next three (from the node cache). Prints JSON lines;
`run_all.py` renders them.

Usage: python benchmarks/bench_pack.py [--files 20000]
"""

from __future__ import annotations

import argparse
import shutil

from common import VOLUME, emit, make_images, measure

PACK = r"""
import json, os, shutil, sys, time
from air_core import pack
from air_core.io import volume
src, dst = sys.argv[1], sys.argv[2]
shutil.rmtree(sys.argv[3], ignore_errors=True)
t = time.perf_counter()
r = pack(src, dst)
dt = time.perf_counter() - t
# What writing onto this volume costs by itself (a local disk here, object storage on Databricks): one
# shard copied onto it again, as the pack copies each shard.
shard = os.path.join(volume.parse(r.path).local, r.shards[0])
t = time.perf_counter()
shutil.copyfile(shard, shard + ".copy")
copy_s = time.perf_counter() - t
os.unlink(shard + ".copy")
print(json.dumps({"system": "pack", "files": r.files, "shards": len(r.shards), "GB": round(r.bytes / 1e9, 2),
                  "pack_s": round(dt, 2), "files_per_s": round(r.files / dt), "path": r.path,
                  "volume_write_MBps": round(os.path.getsize(shard) / copy_s / 1e6)}))
"""

# Each reader: (setup code, code of one epoch that leaves the files read in `n` and their bytes in `b`).
READERS = {
    "FileStream": (
        "from air_core import FileStream\nsrc = FileStream(path)\n",
        "n = b = 0\nfor f in src:\n    n += 1; b += len(f.read_bytes())\n"),
    "HF uc-volume": (
        "import air_hf, torch\nfrom datasets import load_dataset\n"
        "ds = load_dataset('uc-volume', data_dir=path, split='train', streaming=True, decode='bytes', num_workers=2)\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2, collate_fn=lambda rows: "
        "(len(rows), sum(len(r['bytes']) for r in rows)))\n",
        "ds.set_epoch(epoch)\nn = b = 0\nfor k, nb in loader:\n    n += k; b += nb\n"),
    "Ray": (
        "import ray\nray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)\n"
        "from air_ray import read_uc_volume\nds = read_uc_volume(path, include_bytes=True)\n",
        "n = b = 0\nfor batch in ds.iter_batches(batch_format='pyarrow', batch_size=256):\n"
        "    n += batch.num_rows; b += sum(len(x) for x in batch['bytes'].to_pylist())\n"),
    "torch UCVolumeDataset": (
        "import torch\nfrom air_core.torch import DataLoader, UCVolumeDataset\n"
        "class Contents(torch.utils.data.IterableDataset):\n"
        "    def __init__(self, files):\n        self.files = files\n"
        "    def __iter__(self):\n"
        "        for f in self.files:\n"
        "            if isinstance(f, str):\n"
        "                with open(f, 'rb') as fh:\n                    yield len(fh.read())\n"
        "            else:\n                yield len(f.read())\n"
        "loader = DataLoader(Contents(UCVolumeDataset(path)), batch_size=None, num_workers=2)\n",
        "n = b = 0\nfor size in loader:\n    n += 1; b += size\n"),
    "HF parquet (native)": (
        "import glob, torch\nfrom datasets import load_dataset\n"
        "ds = load_dataset('parquet', data_files=sorted(glob.glob(path + '/*.parquet')), split='train', "
        "streaming=True)\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2, collate_fn=lambda rows: "
        "(len(rows), sum(len(r['bytes']) for r in rows)))\n",
        "ds.set_epoch(epoch)\nn = b = 0\nfor k, nb in loader:\n    n += k; b += nb\n"),
}

TIMED = r"""
import json, sys, time
WARM_EPOCHS = 3
path, reader, layout = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.perf_counter()
{setup}
out = {{"system": reader, "layout": layout, "setup_s": round(time.perf_counter() - t, 2)}}
took = []
for epoch in range(1 + WARM_EPOCHS):
    t = time.perf_counter()
{epoch}
    took.append(time.perf_counter() - t)
    out["files"] = n
# The first epoch reads the volume; later ones the node cache: their median, as one run of them is noisy.
for name, dt in (("cold", took[0]), ("warm", sorted(took[1:])[len(took[1:]) // 2])):
    out[name + "_files_per_s"] = round(n / dt)
    out[name + "_MBps"] = round(b / dt / 1e6)
print(json.dumps(out))
"""


def indent(code: str) -> str:
    return "".join("    " + line + "\n" for line in code.splitlines())


def main() -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=20_000)
    args = p.parse_args()
    root = f"{VOLUME}/pack{args.files}"
    loose, dest = f"{root}/images", f"{VOLUME}/packs/images{args.files}"
    import os

    if not os.path.isdir(loose) or sum(len(f) for _, _, f in os.walk(loose)) < args.files:
        make_images(root, args.files)
    results: list[dict] = []
    packed = measure(PACK, loose, dest, dest)
    emit(packed, results)
    for reader, (setup, epoch) in READERS.items():
        layouts = [("packed", packed["path"])] if reader.startswith("HF parquet") else \
            [("loose", loose), ("packed", dest)]
        for layout, path in layouts:
            emit(measure(TIMED.format(setup=setup, epoch=indent(epoch)), path, reader, layout), results)
    shutil.rmtree(dest, ignore_errors=True)  # 2.9 GB: the next run packs it again anyway
    return results


if __name__ == "__main__":
    main()
