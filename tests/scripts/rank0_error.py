"""A torchrun rank whose rank 0 fails to make the listing every rank waits on, with an error that does not
cross processes whole; each rank writes the error it got.

Usage: rank0_error.py unpicklable|unloadable CACHE_DIR OUT_DIR
"""

import os
import sys
import threading

import torch.distributed as dist

from air_core.dist import list_once


class Unpicklable(Exception):
    """Holds a lock: pickling it fails."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class Unloadable(Exception):
    """Pickles, but unpickling calls __init__ with the message alone, which is one argument short."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")


def fail():
    if sys.argv[1] == "unpicklable":
        raise Unpicklable("the volume went away")
    raise Unloadable("/Volumes/main/ml/raw/d", "the volume went away")


dist.init_process_group("gloo")
try:
    list_once(fail, sys.argv[2])
    outcome = "no error"
except Exception as e:
    outcome = f"{type(e).__name__}: {e}"
with open(os.path.join(sys.argv[3], f"rank{dist.get_rank()}.txt"), "w") as f:
    f.write(outcome)
dist.destroy_process_group()
