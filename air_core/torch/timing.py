"""Per-batch DataLoader timings, logged to MLflow as windowed means and variances, off the training thread.

Two series per rank, the rank at the leaf of the key so that every rank's
series of one metric share a prefix in MLflow's sidebar:

- `dataloader/fetch_seconds/rank_R`: time spent inside `next()` waiting for a
  batch (a data-bound loop shows it high);
- `dataloader/between_next_seconds/rank_R`: time between one `next()` returning
  and the next call (the training step);

each with a `..._variance/rank_R` companion (population variance). A window is
made at most every 10 seconds, and the last one when the pass ends. The run
is the active MLflow run of this process, else `$MLFLOW_RUN_ID` (how torchrun
children inherit the launcher's run). Without a run, timings are dropped as
they come.

The training thread never calls MLflow: a slow or unreachable tracking server
would stall the step loop. It hands each window to one logging thread per
process, through a queue of at most `MAX_PENDING` windows; a window that does
not fit is dropped and counted (`dropped_windows()`). mlflow is imported on
that thread, once a loader has a run to log to. At a clean exit, the windows
still to log (queued, or still open in a loader) get at most `EXIT_DRAIN_S`
seconds.
"""

from __future__ import annotations

import atexit
import logging
import os
import statistics
import sys
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, NamedTuple

_logger = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0
MAX_PENDING = 100  # windows: at one per loader every 10 s, over a quarter of an hour of a server not answering
EXIT_DRAIN_S = 5.0


def _imported_mlflow() -> Any | None:
    """mlflow, if this process has imported it: not while it is being imported (by the logging thread)."""
    mlflow = sys.modules.get("mlflow")
    # importlib marks a module being imported so: its functions may not be there yet.
    if mlflow is None or getattr(mlflow.__spec__, "_initializing", False):
        return None
    return mlflow


def active_run_id() -> str | None:
    """The MLflow run to log to: the active run (only possible if mlflow is imported), else $MLFLOW_RUN_ID."""
    mlflow = _imported_mlflow()
    if mlflow is not None:
        run = mlflow.active_run()
        if run is not None:
            return run.info.run_id
    return os.environ.get("MLFLOW_RUN_ID") or None


def tracking_uri() -> str | None:
    """The tracking server to log to: mlflow's (if imported), else $MLFLOW_TRACKING_URI, else None (MLflow's
    default)."""
    mlflow = _imported_mlflow()
    if mlflow is not None:
        return mlflow.get_tracking_uri()
    return os.environ.get("MLFLOW_TRACKING_URI") or None


class _Window(NamedTuple):
    tracking_uri: str | None
    run_id: str
    metrics: dict[str, float]
    timestamp_ms: int
    step: int


class FetchTimings:
    """Collects one rank's per-batch timings and hands a window to the logging thread at most every `interval_s`.

    Args:
        rank: the rank named in the metric keys.
        run_id: the MLflow run to log to; None keeps nothing.
        interval_s: the least time between two windows.
    """

    def __init__(self, rank: int, run_id: str | None, *, interval_s: float = LOG_INTERVAL_S) -> None:
        self.rank = rank
        self.run_id = run_id
        self.interval_s = interval_s
        # The server is the one of the run's start: what this thread sees now, not the logging thread later.
        self.tracking_uri = tracking_uri() if run_id is not None else None
        self._fetch: list[float] = []
        self._between: list[float] = []
        self._step = 0
        self._logged_at = time.monotonic()
        if run_id is not None:
            _sender()  # its thread imports mlflow meanwhile
            _open.add(self)

    def record(self, fetch_s: float, between_s: float | None, step: int) -> None:
        """Add one batch's timings; hand the window over if `interval_s` has passed since the last."""
        if self.run_id is None:
            return
        self._fetch.append(fetch_s)
        if between_s is not None:
            self._between.append(between_s)
        self._step = step
        if time.monotonic() - self._logged_at >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Hand what the current window holds, if anything, to the logging thread (never waits on it)."""
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
            _sender().submit(_Window(self.tracking_uri, self.run_id, metrics, int(time.time() * 1000), self._step))


def dropped_windows() -> int:
    """Windows this process dropped because `MAX_PENDING` were already waiting for the tracking server."""
    return 0 if _the_sender is None else _the_sender.dropped


def drain(timeout_s: float) -> bool:
    """Wait at most `timeout_s` seconds for the windows handed over so far to be logged (or to fail to be);
    True when none is left. The loader never calls it: it is for a caller that reads the metrics back."""
    return True if _the_sender is None else _the_sender.drain(timeout_s)


class _Sender:
    """The thread that logs windows to MLflow, and the queue it takes them from."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.dropped = 0
        self._queue: deque[_Window] = deque()
        self._busy = False  # logging a window
        self._changed = threading.Condition()
        threading.Thread(target=self._run, name="air-mlflow-timings", daemon=True).start()

    def submit(self, window: _Window) -> None:
        with self._changed:  # held by the logging thread only between two calls to MLflow, never across one
            if len(self._queue) >= MAX_PENDING:
                self.dropped += 1
                if self.dropped == 1:
                    _logger.warning("the MLflow tracking server is not keeping up: DataLoader timings are being "
                                    "dropped (air_core.torch.timing.dropped_windows() counts them)")
                return
            self._queue.append(window)
            self._changed.notify_all()

    def drain(self, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def _run(self) -> None:
        log = _mlflow_logger()
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue)
                window = self._queue.popleft()
                self._busy = True
            log(window)
            with self._changed:
                self._busy = False
                self._changed.notify_all()


def _mlflow_logger() -> Callable[[_Window], None]:
    """Import mlflow (seconds, where it imports pyspark) and return what logs a window: warns, never raises."""
    try:
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient
    except ImportError:
        _logger.warning("an MLflow run is set but mlflow is not installed: DataLoader timings are not logged")
        return lambda window: None
    clients: dict[str | None, MlflowClient] = {}  # by tracking URI
    failing = False

    def log(window: _Window) -> None:
        nonlocal failing
        try:
            client = clients.get(window.tracking_uri)
            if client is None:
                client = clients[window.tracking_uri] = MlflowClient(window.tracking_uri)
            client.log_batch(window.run_id, metrics=[Metric(k, v, window.timestamp_ms, window.step)
                                                     for k, v in window.metrics.items()])
            failing = False
        except Exception as e:  # timings must never stop training; one warning until logging works again
            if not failing:
                _logger.warning("could not log DataLoader timings to MLflow run %s: %s", window.run_id, e)
            failing = True

    return log


_the_sender: _Sender | None = None
_open: weakref.WeakSet[FetchTimings] = weakref.WeakSet()  # windows an exit hands over


def _sender() -> _Sender:
    global _the_sender
    if _the_sender is None or _the_sender.pid != os.getpid():  # a forked child has no logging thread
        _the_sender = _Sender()
    return _the_sender


@atexit.register
def _at_exit() -> None:
    sender = _the_sender
    if sender is None or sender.pid != os.getpid():
        return
    for timings in list(_open):
        timings.flush()
    if not sender.drain(EXIT_DRAIN_S):
        _logger.warning("the MLflow tracking server did not take the last DataLoader timings within %.0f s: "
                        "they are not logged", EXIT_DRAIN_S)
    if sender.dropped:
        _logger.warning("%d windows of DataLoader timings were dropped: the MLflow tracking server was not "
                        "keeping up", sender.dropped)
