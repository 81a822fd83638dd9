"""One torchrun rank of a job over several nodes: two epochs of its FileStream share through DataLoader workers.

Usage: core_nodes.py VOLUME_PATH OUT_DIR   (NETVOL_TRACE set; each node its own AIR_CACHE_DIR)

Writes OUT_DIR/rank{r}.json: its node, the paths it read per epoch, and the
count of volume opens in netvol's trace before and after each epoch.
"""

import json
import os
import sys

import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

from air_core import FileStream


class Paths(IterableDataset):
    def __init__(self, stream):
        self.stream = stream

    def __iter__(self):
        for f in self.stream:
            yield f.path


def opens() -> int:
    dist.barrier()  # every rank is done with the phase before the trace is read
    with open(os.environ["NETVOL_TRACE"]) as f:
        count = sum(line.startswith("open ") for line in f)
    dist.barrier()  # and no rank starts the next phase before every rank has counted
    return count


dist.init_process_group("gloo")
stream = FileStream(sys.argv[1], shuffle=True, seed=3)
marks, epochs = [opens()], []
for epoch in range(2):
    stream.set_epoch(epoch)
    epochs.append([p for batch in DataLoader(Paths(stream), batch_size=4, num_workers=2, collate_fn=list)
                   for p in batch])
    marks.append(opens())
with open(os.path.join(sys.argv[2], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump({"node": int(os.environ["GROUP_RANK"]), "epochs": epochs, "marks": marks}, f)
dist.destroy_process_group()
