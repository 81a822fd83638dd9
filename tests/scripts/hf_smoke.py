"""uc-volume end to end on whichever `datasets` is importable: prints one JSON line.

Usage: hf_smoke.py FILES_DIR PARQUET_DIR HF_CACHE (volume paths; AIR_VOLUMES_ROOT set by the caller).
"""

import json
import sys

import datasets
from torch.utils.data import DataLoader

import air_hf
from air_core.errors import OptionError


def main() -> None:
    files_dir, parquet_dir, hf_cache = sys.argv[1:4]
    ds = datasets.load_dataset("uc-volume", data_dir=files_dir, split="train", streaming=True,
                               cache_dir=hf_cache, num_workers=2, world_size=2)
    halves = [sorted(r["path"] for r in air_hf.split_for_rank(ds, rank=k, world_size=2)) for k in range(2)]
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda rows: [r["path"] for r in rows])
    table = datasets.load_dataset("uc-volume", data_dir=parquet_dir, split="train", cache_dir=hf_cache)
    try:
        datasets.load_dataset("uc-volume", data_dir=files_dir, split="train", streaming=True, cache_dir=hf_cache,
                              worker_count=2)
        error = None
    except OptionError as e:
        error = str(e)
    print(json.dumps({
        "version": datasets.__version__,
        "shards": ds.num_shards,
        "halves": halves,
        "loader": sorted(p for batch in loader for p in batch),
        "parquet_rows": sorted(table["id"]),
        "parquet_columns": table.column_names,
        "error": error,
    }))


if __name__ == "__main__":
    main()
