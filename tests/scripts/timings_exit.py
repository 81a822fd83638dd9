"""A process that logs DataLoader timings to $MLFLOW_RUN_ID and exits: one whole pass, then two batches of a
pass it leaves open.

Usage: timings_exit.py VOLUME_FOLDER
"""

import sys

import mlflow  # noqa: F401  (imported as a script that logs to MLflow does: exit waits on the server, not on this)

from air_core.torch import DataLoader, UCVolumeDataset

loader = DataLoader(UCVolumeDataset(sys.argv[1]), batch_size=3, num_workers=0, collate_fn=list)
assert sum(len(batch) for batch in loader) == 12
it = iter(loader)
next(it), next(it)
