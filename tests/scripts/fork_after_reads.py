"""Read a stream partway in this process, reads still in flight, then read it whole through forked workers.

Usage: fork_after_reads.py DOOR VOLUME_PATH FORKS

DOOR: "core" (a `FileStream`) or "hf" (`load_dataset("uc-volume", streaming=True)`).
Each of FORKS times, this process takes a few more items of its own
iterator, left open with its fetch threads at work, then a
`torch.utils.data.DataLoader` with 2 workers under the fork start method
reads the stream. Prints each DataLoader pass's paths as JSON.
"""

import json
import sys

import torch


class Paths(torch.utils.data.IterableDataset):
    """The volume paths of a stream's items (each DataLoader worker reads its own share)."""

    def __init__(self, stream, path_of) -> None:
        self.stream, self.path_of = stream, path_of

    def __iter__(self):
        return map(self.path_of, self.stream)


door, path, forks = sys.argv[1], sys.argv[2], int(sys.argv[3])
if door == "core":
    from air_core import FileStream

    stream = FileStream(path, rank=0, world_size=1)
    dataset = Paths(stream, lambda f: f.path)
else:
    import datasets

    import air_hf  # noqa: F401

    stream = datasets.load_dataset("uc-volume", data_dir=path, split="train", streaming=True, num_workers=2)
    dataset = Paths(stream, lambda row: row["path"])

mine = iter(stream)
passes = []
for _ in range(forks):
    for _ in range(3):
        next(mine)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="fork")
    passes.append(list(loader))
print(json.dumps(passes))
