"""Execute notebooks in place, as committed: the venv's python3 kernel, outputs kept, stderr noise dropped.

Usage: PYTHONPATH=. .venv/bin/python tests/scripts/execute_notebooks.py [notebooks/NAME.ipynb ...]  (default: all)

Dropped from stderr: progress bars, the ipywidgets / TqdmWarning notes, Ray's token-auth and
progress-bar notes, blank lines. Everything else the cells print stays.
"""

import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOISE = re.compile(r"TqdmWarning|from \.autonotebook import|examples/s|rows/s|it/s\]|^\s*$|running over TCP"
                   r"|Missing packages: \['ipywidgets'\]|Token authentication is enabled|authentication token"
                   r"|Progress bars disabled")


def strip_noise(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.outputs:
            if out.output_type == "stream" and out.name == "stderr":
                out.text = "".join(line for line in out.text.splitlines(True) if not NOISE.search(line))
                if not out.text:
                    continue
            kept.append(out)
        cell.outputs = kept


def main(paths: list[str]) -> None:
    for var in ("AIR_VOLUMES_ROOT", "AIR_CACHE_DIR", "RAY_ADDRESS"):
        os.environ.pop(var, None)
    for path in paths or sorted(str(p) for p in (ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as cwd:
            NotebookClient(nb, kernel_name="python3", timeout=300, record_timing=False,
                           resources={"metadata": {"path": cwd}}).execute()
        strip_noise(nb)
        nbformat.write(nb, path)
        print(f"{path}: {time.perf_counter() - started:.1f} s, {os.path.getsize(path) // 1024} KiB")


if __name__ == "__main__":
    main(sys.argv[1:])
