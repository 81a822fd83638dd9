"""One torchrun rank: read its share through a DataLoader with workers; write the paths it got.

Usage: core_ranks.py VOLUME_PATH OUT_DIR EQUALIZE
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


dist.init_process_group("gloo")
stream = FileStream(sys.argv[1], equalize=sys.argv[3], shuffle=True, seed=3)
loader = DataLoader(Paths(stream), batch_size=4, num_workers=2, collate_fn=list)
got = [p for batch in loader for p in batch]
with open(os.path.join(sys.argv[2], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump({"paths": got, "len": len(stream), "fingerprint": stream.manifest.fingerprint}, f)
dist.destroy_process_group()
