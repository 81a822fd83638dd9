"""DataLoader timings reach MLflow from a thread of their own: a tracking server that never answers does not
hold up the loader, nor the process's exit, and a file store still receives every window."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import ROOT, wait_for

from air_core.torch import DataLoader, UCVolumeDataset, timing

SCRIPT = Path(__file__).parent / "scripts" / "timings_exit.py"
KEYS = ("fetch_seconds", "fetch_seconds_variance", "between_next_seconds", "between_next_seconds_variance")


class SilentServer:
    """A tracking server on loopback that takes connections and never answers them."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.uri = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.connections.append(self._socket.accept()[0])
            except OSError:  # closed
                return

    def close(self) -> None:
        if self._socket.fileno() != -1:
            self._socket.shutdown(socket.SHUT_RDWR)
            self._socket.close()
        for c in self.connections:
            c.close()


@pytest.fixture
def silent(monkeypatch):
    """A `SilentServer` as the tracking server of run $MLFLOW_RUN_ID, whose requests would wait 10 minutes."""
    server = SilentServer()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", "0" * 32)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "600")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # once closed, the rest fail at once
    yield server
    server.close()


def files(volume, n: int = 12) -> str:
    for i in range(n):
        volume.write(f"d/f{i:02d}.bin", b"x" * (100 + i))
    return volume.path("d")


def passes(loader: DataLoader, n: int) -> threading.Thread:
    """Run `n` passes over `loader` on a thread of their own (joined with a timeout, a stall cannot hang the
    test)."""
    thread = threading.Thread(target=lambda: [b for _ in range(n) for b in loader], daemon=True)
    thread.start()
    thread.join(timeout=120)
    return thread


def test_a_tracking_server_that_never_answers_does_not_hold_up_the_loader(volume, silent):
    loader = DataLoader(UCVolumeDataset(files(volume)), batch_size=3, num_workers=0, collate_fn=list)
    assert not passes(loader, 1).is_alive()
    # The pass's window is on its way: the logging thread waits in a request the server will never answer.
    wait_for(lambda: silent.connections, 120, "the logging thread to reach the tracking server")
    dropped = timing.dropped_windows()
    more = timing.MAX_PENDING + 20
    assert not passes(loader, more).is_alive()  # every pass handed its window over and went on
    assert timing.dropped_windows() - dropped == 20  # what did not fit in the queue
    assert not timing.drain(0.5)  # the windows are still waiting on the server
    silent.close()
    assert timing.drain(120)


def test_windows_reach_an_mlflow_file_store(volume, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    try:
        loader = DataLoader(UCVolumeDataset(files(volume)), batch_size=3, num_workers=0, collate_fn=list)
        with mlflow.start_run() as run:
            for _ in range(2):
                assert len([b for b in loader]) == 4
        assert timing.drain(120)
        client = mlflow.tracking.MlflowClient()
        histories = {k: client.get_metric_history(run.info.run_id, f"dataloader/{k}/rank_0") for k in KEYS}
    finally:
        mlflow.set_tracking_uri(None)  # back to unset (it also set $MLFLOW_TRACKING_URI)
    for history in histories.values():  # a pass under 10 s makes one window, at its end
        assert [m.step for m in history] == [4, 8] and all(m.value >= 0 for m in history)
    assert histories["fetch_seconds"][0].value > 0


def run_script(volume, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(SCRIPT), files(volume)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # a process that waited on the server would time out
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.slow  # a process of its own
def test_exit_logs_the_windows_left(volume, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    tracking = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking)
    run_id = client.create_run(client.create_experiment("loader")).info.run_id
    run_script(volume, {**os.environ, "MLFLOW_TRACKING_URI": tracking, "MLFLOW_RUN_ID": run_id})
    for key in KEYS:
        # The whole pass's window, then the one the open pass left, handed over as the process exits.
        assert [m.step for m in client.get_metric_history(run_id, f"dataloader/{key}/rank_0")] == [4, 6]


@pytest.mark.slow  # a process of its own
def test_exit_does_not_wait_on_a_tracking_server_that_never_answers(volume, silent):
    proc = run_script(volume, dict(os.environ))
    assert "did not take the last DataLoader timings within 5 s" in proc.stderr
    assert silent.connections
