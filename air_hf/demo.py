"""The `air-data demo` section for Hugging Face datasets (entry point group "air_data.demo")."""

from __future__ import annotations

import tempfile
import time

import numpy as np
from datasets import load_dataset
from torch.utils.data import DataLoader

from .rank_split import split_for_rank

WORKERS = 2


def _count(rows) -> int:
    return sum(np.asarray(r["image"]).size > 0 for r in rows)


def run(volume_path: str) -> None:
    """Stream `volume_path`/images through `load_dataset("uc-volume", ...)`: setup, rows/s, shards."""
    data_dir = f"{volume_path}/images"
    with tempfile.TemporaryDirectory(prefix="air-hf-demo-") as hf_cache:
        t = time.perf_counter()
        ds = load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True, cache_dir=hf_cache,
                          decode="image", labels=True, num_workers=WORKERS)
        print(f'load_dataset("uc-volume", data_dir="{data_dir}", streaming=True, decode="image", labels=True, '
              f"num_workers={WORKERS}): {time.perf_counter() - t:.2f} s, {ds.num_shards} shards, "
              f"labels {ds.features['label'].names}")
        loader = DataLoader(ds, batch_size=32, num_workers=WORKERS, collate_fn=_count)
        for epoch in (0, 1):
            ds.set_epoch(epoch)
            t = time.perf_counter()
            n = sum(loader)
            print(f"epoch {epoch}: {n} images decoded, {n / (time.perf_counter() - t):,.0f} rows/s "
                  f"(DataLoader, {WORKERS} workers)")
        ranked = load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True, cache_dir=hf_cache,
                              world_size=2, num_workers=WORKERS, equalize="drop")
        counts = [sum(1 for _ in split_for_rank(ranked, rank=r, world_size=2)) for r in range(2)]
        print(f'split_for_rank over 2 ranks, equalize="drop": {ranked.num_shards} shards, rows per rank {counts}')
