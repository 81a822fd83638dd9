"""One torchrun rank reading its slice through Ray Data; the rank comes from torch.distributed.

Usage: ray_torchrun.py VOLUME_PATH OUT_DIR   (RAY_ADDRESS: the running cluster to join)
"""

import json
import os
import sys

import ray
import torch.distributed as dist

from air_ray import read_uc_volume

dist.init_process_group("gloo")
ray.init(log_to_driver=False)
ds = read_uc_volume(sys.argv[1], equalize="drop")
paths = [row["path"] for row in ds.iter_rows()]
with open(os.path.join(sys.argv[2], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump({"paths": paths, "count": ds.count()}, f)
dist.destroy_process_group()
