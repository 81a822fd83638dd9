"""torchrun ranks for tests/test_torch.py: air_core.torch's DataLoader and DCP storage on 2 ranks (gloo).

Usage: torch_ranks.py save|resume VOLUME_FOLDER CHECKPOINT_FOLDER OUT_DIR

save:   epoch 0 in full (every rank writes the files it got), then BATCHES batches of
        epoch 1; the loader state, a model and its optimizer go to a checkpoint through
        dcp.async_save(UCVolumeWriter), and come back through dcp.load(UCVolumeReader).
resume: load that checkpoint, deliver BATCHES more batches, save the loader state again,
        then finish the epoch.
Files are named by their first line, so what a rank got is checked against the volume.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.utils.data import IterableDataset

from air_core.torch import DataLoader, UCVolumeDataset, UCVolumeReader, UCVolumeWriter, default_num_workers

BATCHES = 3


class Names(IterableDataset):
    """A decoding wrapper: each cached file's first line."""

    def __init__(self, files):
        self.files = files

    def __iter__(self):
        for path in self.files:
            with open(path, "rb") as f:
                yield f.readline().decode().strip()


def make_loader(folder: str) -> DataLoader:
    return DataLoader(Names(UCVolumeDataset(folder, shuffle=True, seed=7)), batch_size=3, num_workers=2,
                      collate_fn=list)


def take(iterator, batches: int) -> list[str]:
    return [name for _ in range(batches) for name in next(iterator)]


def model_and_optimizer(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(5, 8)).pow(2).sum().backward()
    optimizer.step()
    return model, optimizer


def write(out: str, name: str, value) -> None:
    with open(os.path.join(out, f"{name}.rank{dist.get_rank()}.json"), "w") as f:
        json.dump(value, f)


def save(folder: str, ckpt: str, out: str) -> None:
    loader = make_loader(folder)
    write(out, "epoch0", [n for batch in loader for n in batch])
    before = take(iter(loader), BATCHES)
    write(out, "before", before)
    model, optimizer = model_and_optimizer(seed=1)
    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "data": loader.state_dict()}
    dcp.async_save(state, storage_writer=UCVolumeWriter(ckpt)).result()
    dist.barrier()

    fresh_model, fresh_optimizer = model_and_optimizer(seed=2)
    target = {"model": fresh_model.state_dict(), "optim": fresh_optimizer.state_dict(),
              "data": make_loader(folder).state_dict()}
    dcp.load(target, storage_reader=UCVolumeReader(ckpt))
    fresh_model.load_state_dict(target["model"])
    fresh_optimizer.load_state_dict(target["optim"])
    same_model = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                        fresh_model.state_dict().values()))
    moments = [s["exp_avg"] for s in optimizer.state_dict()["state"].values()]
    loaded_moments = [s["exp_avg"] for s in fresh_optimizer.state_dict()["state"].values()]
    same_optim = all(torch.equal(a, b) for a, b in zip(moments, loaded_moments)) and len(moments) == 4
    write(out, "dcp", {"model": same_model, "optim": same_optim, "data": target["data"] == state["data"],
                       "state": state["data"], "default_workers": default_num_workers()})


def resume(folder: str, ckpt: str, out: str) -> None:
    loader = make_loader(folder)
    target = {"data": loader.state_dict()}
    dcp.load(target, storage_reader=UCVolumeReader(ckpt))
    loader.load_state_dict(target["data"])
    iterator = iter(loader)
    write(out, "middle", take(iterator, BATCHES))
    write(out, "state2", loader.state_dict())
    write(out, "rest", [n for batch in iterator for n in batch])
    write(out, "finished", loader.state_dict())
    write(out, "mlflow_imported", "mlflow" in sys.modules)  # no MLflow run here: never imported


if __name__ == "__main__":
    dist.init_process_group("gloo")
    {"save": save, "resume": resume}[sys.argv[1]](*sys.argv[2:5])
    dist.destroy_process_group()
