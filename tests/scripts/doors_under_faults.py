"""Read a volume folder through one front door, as a user would, and write what arrived.

Usage: doors_under_faults.py DOOR VOLUME_PATH OUT_JSON ON_ERROR
DOOR: stream | hf | ray | torch. Output: {"names": [file names, in the order read], "error": message or null}.
"""

import json
import os
import sys

door, path, out, on_error = sys.argv[1:5]
got: list[str] = []
error = None
try:
    if door == "stream":
        from air_core import FileStream

        got = [f.path for f in FileStream(path, on_error=on_error)]
    elif door == "hf":
        from datasets import load_dataset

        import air_hf  # noqa: F401

        ds = load_dataset("uc-volume", data_dir=path, split="train", streaming=True, on_error=on_error,
                          cache_dir=out + ".hf")
        got = [row["path"] for row in ds]
    elif door == "ray":
        import ray

        from air_ray import read_uc_volume

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        got = [row["path"] for row in read_uc_volume(path, include_bytes=True, on_error=on_error).iter_rows()]
    elif door == "torch":
        from air_core.io.cache import Cache
        from air_core.torch import DataLoader, UCVolumeDataset

        dataset = UCVolumeDataset(path, on_error=on_error)
        loader = DataLoader(dataset, batch_size=8, num_workers=2, persistent_workers=False, collate_fn=list)
        # UCVolumeDataset yields the cached copies, each named for its file's version (path, size, mtime)
        m, cache = dataset.manifest, Cache()
        files = {os.path.basename(cache.entry_path(*row)): row[0] for row in m.volume_rows(range(len(m)))}
        got = [files[os.path.basename(p)] for batch in loader for p in batch]
except Exception as e:  # the message a user would see
    error = f"{type(e).__name__}: {e}"
with open(out, "w") as f:
    json.dump({"names": [p.rsplit("/", 1)[-1] for p in got], "error": error}, f)
