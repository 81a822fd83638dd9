"""Shared fixtures: a local folder standing for /Volumes, a private cache, netvol, one Ray cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import netvol
from netvol.files_api import FilesApiServer

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("RAY_DATA_LOG_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def wait_for(condition, timeout: float, what: str) -> None:
    """Poll `condition` until it holds; fail the test after `timeout` seconds, naming `what`."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Volume:
    """A fake /Volumes tree under a temp folder; `vol` is its `/Volumes/c/s/v` volume."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.vol = "/Volumes/main/ml/raw"
        self.local_vol = root / "main" / "ml" / "raw"
        self.local_vol.mkdir(parents=True)

    def local(self, rel: str) -> Path:
        return self.local_vol / rel

    def path(self, rel: str = "") -> str:
        return f"{self.vol}/{rel}".rstrip("/")

    def write(self, rel: str, data: bytes | str) -> Path:
        p = self.local(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        return p

    def files(self, folder: str, n: int, *, size=lambda i: 100 + 37 * i, classes: int = 3) -> list[str]:
        """n files under folder/classK/, of varied sizes; returns their volume paths."""
        out = []
        for i in range(n):
            rel = f"{folder}/class{i % classes}/f{i:05d}.bin"
            self.write(rel, os.urandom(size(i)))
            out.append(self.path(rel))
        return sorted(out)


@pytest.fixture
def volume(tmp_path, monkeypatch) -> Volume:
    """AIR_VOLUMES_ROOT and AIR_CACHE_DIR pointed at fresh temp folders, and no Databricks credentials: a volume
    the folder does not hold is never looked for in a real workspace."""
    monkeypatch.setenv("AIR_VOLUMES_ROOT", str(tmp_path / "Volumes"))
    monkeypatch.setenv("AIR_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_PROFILE",
                "DATABRICKS_CLIENT_ID", "DATABRICKS_CLIENT_SECRET", "DATABRICKS_AUTH_TYPE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "no-databrickscfg"))
    return Volume(tmp_path / "Volumes")


@pytest.fixture(scope="session")
def netvol_so(tmp_path_factory) -> str:
    """The project's network-volume emulator (netvol/), built once: LD_PRELOAD it into a process."""
    try:
        return netvol.build(tmp_path_factory.mktemp("netvol") / "netvol.so")
    except netvol.Unavailable as e:
        pytest.skip(str(e))


class RemoteVolume(Volume):
    """A `Volume` whose folder a Files API server serves (`server`): write here, read through the server."""

    def __init__(self, root: Path, server: FilesApiServer) -> None:
        super().__init__(root)
        self.server = server


@pytest.fixture
def files_api(tmp_path, monkeypatch) -> RemoteVolume:
    """A Files API server (netvol/files_api.py) on a free port serving a fresh folder as /Volumes, with
    DATABRICKS_HOST / DATABRICKS_TOKEN naming it, AIR_VOLUMES_TRANSPORT=files-api and a fresh AIR_CACHE_DIR."""
    root = tmp_path / "remote"
    root.mkdir()
    server = FilesApiServer(root).start()
    monkeypatch.delenv("AIR_VOLUMES_ROOT", raising=False)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DATABRICKS_CONFIG_PROFILE", "DATABRICKS_CLIENT_ID",
                "DATABRICKS_CLIENT_SECRET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "no-databrickscfg"))
    monkeypatch.setenv("DATABRICKS_HOST", server.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", server.token)
    monkeypatch.setenv("AIR_VOLUMES_TRANSPORT", "files-api")
    monkeypatch.setenv("AIR_CACHE_DIR", str(tmp_path / "cache"))
    yield RemoteVolume(root, server)
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: str | Path, nproc: int, *args: str, env: dict | None = None,
             timeout: float = 240) -> subprocess.CompletedProcess:
    """Run `script` under torchrun with `nproc` ranks (gloo, loopback); raises on failure."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(script), *args]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the whole test session."""
    ray = pytest.importorskip("ray")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    for attempt in range(2):
        try:
            ray.init(address="local", num_cpus=2, object_store_memory=200 << 20, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
            break
        except RuntimeError:  # its GCS server can miss the start-up deadline on a loaded machine: once more
            ray.shutdown()
            if attempt:
                raise
    yield ray
    ray.shutdown()


def run_notebook(name: str, tmp_path: Path, monkeypatch) -> tuple:
    """notebooks/`name` executed on the venv's python3 kernel in `tmp_path`, with no volume or cache folder set
    (it makes its own): the executed notebook, and the text its code cells printed."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.delenv("AIR_VOLUMES_ROOT", raising=False)
    monkeypatch.delenv("AIR_CACHE_DIR", raising=False)
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return nb, printed
