"""What every benchmark shares: the emulated volume, its data, and running one measurement per process.

Data lives under a real `/Volumes/bench/ml/raw` (the reference accepts only
`/Volumes/...` paths), emulated as a network volume by the project's `netvol/`
(10 ms per open, 200 MB/s per stream, 20 ms per listing). Each measurement runs
in its own process with `LD_PRELOAD` set, so Ray workers and DataLoader workers
inherit the emulation; each prints one JSON line.
"""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # netvol/, the emulator, is the repository's, not an installed package

import netvol  # noqa: E402

VOLUME = "/Volumes/bench/ml/raw"
NETVOL = {"NETVOL_OPEN_MS": "10", "NETVOL_MBPS": "200", "NETVOL_LIST_MS": "20", "NETVOL_PREFIX": "/Volumes/"}


def netvol_so() -> str:
    """The emulator, built into the temp folder once per version of its source: named by the source's hash,
    so a library built from an earlier netvol.c is never loaded."""
    digest = hashlib.sha256(netvol.SOURCE.read_bytes()).hexdigest()[:12]
    out = os.path.join(tempfile.gettempdir(), f"air-bench-netvol-{digest}.so")
    if not os.path.exists(out):
        netvol.build(out)
    return out


def make_images(root: str, n: int) -> None:
    """`root/images/classK/imgNNNNNN.jpg`: n noise JPEGs of ~147 KiB in 10 class folders (kept if there)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(n):
        folder = os.path.join(root, "images", f"class{i % 10}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"img{i:06d}.jpg")
        pixels = rng.integers(0, 255, (390, 390, 3), dtype=np.uint8)  # drawn even when kept: the same files
        if not os.path.exists(path):
            Image.fromarray(pixels).save(path, quality=92)


def image_volume(n: int = 2000) -> tuple[str, str]:
    """(nested, flat) volume folders holding the same n JPEGs of ~147 KiB."""
    nested, flat = f"{VOLUME}/images", f"{VOLUME}/flat"
    if not os.path.isdir(flat) or len(os.listdir(flat)) != n:
        make_images(VOLUME, n)
        shutil.rmtree(flat, ignore_errors=True)
        os.makedirs(flat)
        for d, _, files in os.walk(nested):
            for f in files:
                os.link(os.path.join(d, f), os.path.join(flat, f))
    return nested, flat


def measure(code_or_script: str | Path, *args: str, slow: bool = True, env: dict | None = None,
            timeout: float = 900) -> dict:
    """Run a script (or `-c` code) in a fresh process under netvol; return its last JSON line."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "AIR_CACHE_DIR": tempfile.mkdtemp(prefix="air-bench-cache-"),
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
            "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    full.pop("AIR_VOLUMES_ROOT", None)
    if slow:
        full.update(NETVOL, LD_PRELOAD=netvol_so())
    cmd = [sys.executable, str(code_or_script), *args] if isinstance(code_or_script, Path) else \
        [sys.executable, "-c", code_or_script, *args]
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout)
    shutil.rmtree(full["AIR_CACHE_DIR"], ignore_errors=True)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextmanager
def checked_out(rev: str) -> Iterator[Path]:
    """`rev` of this repository in a temporary worktree, removed when done: an earlier revision's code to run."""
    tree = Path(tempfile.mkdtemp(prefix="air-rev-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)
    compiled(tree)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)


def compiled(tree: Path) -> None:
    """`tree`'s packages with their bytecode written, as pip writes it when it installs a wheel (and as the
    peers' installed packages have it): otherwise, under PYTHONDONTWRITEBYTECODE, every measured process would
    compile each module it imports lazily, on the clock."""
    for package in ("air_core", "air_hf", "air_ray"):
        compileall.compile_dir(str(tree / package), quiet=1)


def short_sha(rev: str) -> str:
    """`rev`'s abbreviated commit in this repository."""
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], check=True, capture_output=True,
                          text=True).stdout.strip()


def emit(record: dict, results: list[dict]) -> None:
    results.append(record)
    print(json.dumps(record), flush=True)
