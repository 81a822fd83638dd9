"""One torchrun rank: stream a volume folder through uc-volume, split for this rank, 2 DataLoader workers.

Usage: hf_ranks.py DATA_DIR HF_CACHE OUT_DIR. Writes OUT_DIR/rank{r}.json with the paths this rank
read per epoch, the paths of an equalized load, and (rank 0) the netvol trace length at each phase.
"""

import json
import os
import sys

import torch.distributed as dist
from datasets import load_dataset
from torch.utils.data import DataLoader

import air_hf


def collate(rows):
    return [r["path"] for r in rows]


def read(ds) -> list[str]:
    return [p for batch in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate) for p in batch]


def trace_lines() -> int:
    dist.barrier()  # every rank is done with the phase before the trace is measured
    trace = os.environ.get("NETVOL_TRACE")
    with open(trace) as f:
        count = sum(1 for line in f if line.startswith("open "))
    dist.barrier()  # and no rank starts the next phase before every rank has counted
    return count


def main() -> None:
    data_dir, hf_cache, out = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = air_hf.split_for_rank(load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True,
                                            cache_dir=hf_cache, num_workers=2))
    marks = [trace_lines()]
    epochs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        epochs.append(read(ds))
        marks.append(trace_lines())
    equal = air_hf.split_for_rank(load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True,
                                               cache_dir=hf_cache, num_workers=2, equalize="pad"))
    result = {"shards": ds.num_shards, "epochs": epochs, "equalized": read(equal), "trace_marks": marks}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
