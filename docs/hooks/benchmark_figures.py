"""MkDocs hook: the plots benchmarks/RESULTS.md shows, served beside the performance page that includes it.

RESULTS.md names its plots relative to itself (`results.png`); the page that includes it is
operations/performance.md, so the plots are added to the site as operations/<name>.png."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for png in sorted(BENCHMARKS.glob("*.png")):
        files.append(File.generated(config, f"operations/{png.name}", abs_src_path=str(png)))
    return files
