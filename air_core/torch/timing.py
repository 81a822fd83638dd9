"""Per-batch DataLoader timings, logged to MLflow as windowed means and variances.

Two series per rank, the rank at the leaf of the key so that every rank's
series of one metric share a prefix in MLflow's sidebar:

- `dataloader/fetch_seconds/rank_R`: time spent inside `next()` waiting for a
  batch (a data-bound loop shows it high);
- `dataloader/between_next_seconds/rank_R`: time between one `next()` returning
  and the next call (the training step);

each with a `..._variance/rank_R` companion (population variance). A window is
logged at most every 10 seconds, and the last one when the pass ends. The run
is the active MLflow run of this process, else `$MLFLOW_RUN_ID` (how torchrun
children inherit the launcher's run). mlflow is imported only when there is a
run to log to; without mlflow, or without a run, timings are kept and dropped.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time

_logger = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0


def active_run_id() -> str | None:
    """The MLflow run to log to: the active run (only possible if mlflow is imported), else $MLFLOW_RUN_ID."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None:
        run = mlflow.active_run()
        if run is not None:
            return run.info.run_id
    return os.environ.get("MLFLOW_RUN_ID") or None


class FetchTimings:
    """Collects one rank's per-batch timings and logs a window at most every `interval_s`.

    Args:
        rank: the rank named in the metric keys.
        run_id: the MLflow run to log to; None keeps nothing.
        interval_s: the least time between two logged windows.
    """

    def __init__(self, rank: int, run_id: str | None, *, interval_s: float = LOG_INTERVAL_S) -> None:
        self.rank = rank
        self.run_id = run_id
        self.interval_s = interval_s
        self._fetch: list[float] = []
        self._between: list[float] = []
        self._logged_at = time.monotonic()

    def record(self, fetch_s: float, between_s: float | None, step: int) -> None:
        """Add one batch's timings; log the window if `interval_s` has passed since the last."""
        if self.run_id is None:
            return
        self._fetch.append(fetch_s)
        if between_s is not None:
            self._between.append(between_s)
        if time.monotonic() - self._logged_at >= self.interval_s:
            self.flush(step)

    def flush(self, step: int) -> None:
        """Log what the current window holds, if anything."""
        if self.run_id is None:
            return
        self._logged_at = time.monotonic()
        metrics = {}
        for name, values in (("fetch_seconds", self._fetch), ("between_next_seconds", self._between)):
            if values:
                metrics[f"dataloader/{name}/rank_{self.rank}"] = statistics.fmean(values)
                metrics[f"dataloader/{name}_variance/rank_{self.rank}"] = statistics.pvariance(values)
        self._fetch, self._between = [], []
        if metrics:
            self._log(metrics, step)

    def _log(self, metrics: dict[str, float], step: int) -> None:
        try:
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient
        except ImportError:
            _logger.warning("MLFLOW_RUN_ID is set but mlflow is not installed: DataLoader timings are not logged")
            self.run_id = None
            return
        now = int(time.time() * 1000)
        try:
            MlflowClient().log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])
        except Exception as e:  # timings must never stop training
            _logger.warning("could not log DataLoader timings to MLflow run %s: %s", self.run_id, e)
