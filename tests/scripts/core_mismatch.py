"""A torchrun rank without a process group whose listing differs from the other ranks'.

Usage: core_mismatch.py VOLUME_PATH OUT_DIR
"""

import os
import sys

import torch  # noqa: F401  (the agent store comparison needs torch imported)

from air_core import FileStream, ManifestMismatchError

rank = int(os.environ["RANK"])
FileStream(sys.argv[1])  # same listing on every rank: fine
try:
    FileStream(sys.argv[1], exclude="*f00000*" if rank == 1 else None)
    outcome = "no error"
except ManifestMismatchError as e:
    outcome = str(e)
with open(os.path.join(sys.argv[2], f"rank{rank}.txt"), "w") as f:
    f.write(outcome)
