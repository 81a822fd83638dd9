"""The demo: a small generated volume streamed through the core, then through each front door.

Front doors add their own section through the `air_data.demo` entry-point
group (a `run(volume_path)` function), so the core never imports them.
"""

from __future__ import annotations

import io
import os
import random
import time
from importlib.metadata import entry_points

from tqdm import tqdm

from ..planning import shares as plan_mod
from ..grid import Grid
from ..stream import FileStream

DEMO_VOLUME = "/Volumes/demo/ml/raw"
CLASSES = ("cat", "dog", "fish")


def build_volume(root: str, *, images: int = 300, texts: int = 150) -> str:
    """Write a demo volume under `root` (standing for /Volumes); returns its data folder's volume path."""
    rng = random.Random(0)
    base = os.path.join(root, "demo", "ml", "raw")
    for i in range(images):
        d = os.path.join(base, "images", CLASSES[i % len(CLASSES)])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"img{i:05d}.png"), "wb") as f:
            f.write(_png(rng, 32 + rng.randrange(96)))
    for i in range(texts):
        d = os.path.join(base, "texts", CLASSES[i % len(CLASSES)])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"doc{i:05d}.txt"), "w") as f:
            f.write(" ".join(rng.choice(("volume", "cache", "rank", "worker", "epoch")) for _ in range(200)))
    return f"{DEMO_VOLUME}"


def _png(rng: random.Random, side: int) -> bytes:
    try:
        from PIL import Image
    except ImportError:  # without Pillow the files are opaque bytes: the core does not decode
        return rng.randbytes(side * side * 3)
    img = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def run(path: str, *, world_size: int = 2, num_workers: int = 2) -> None:
    """Stream `path` twice through the core, print speed, cache hits and the split for a grid."""
    stream = FileStream(path, shuffle=True, seed=0, rank=0, world_size=1)
    print(f"{path}: {len(stream.manifest)} files, {sum(stream.manifest.sizes) / 1e6:.1f} MB, "
          f"fingerprint {stream.manifest.fingerprint}")
    for epoch in (0, 1):
        stream.set_epoch(epoch)
        before = stream.cache.stats.hits
        t = time.perf_counter()
        n = 0
        for f in tqdm(stream, total=len(stream), desc=f"epoch {epoch}", unit="file", leave=False):
            n += len(f.read_bytes())
        dt = time.perf_counter() - t
        print(f"epoch {epoch}: {len(stream) / dt:,.0f} files/s, {n / dt / 1e6:,.0f} MB/s, "
              f"cache hits {stream.cache.stats.hits - before}/{len(stream)}")
    sizes = stream.manifest.sizes
    print(f"split over {world_size} ranks x {num_workers} workers (byte-balanced; files, MB):")
    for r in range(world_size):
        cells = []
        for w in range(num_workers):
            items = plan_mod.plan_epoch(sizes, Grid(r, world_size, w, num_workers))
            cells.append(f"worker {w}: {len(items)}, {sum(sizes[i] for i in items) / 1e6:.2f}")
        print(f"  rank {r}: " + "; ".join(cells))


def main(workdir: str, *, world_size: int, num_workers: int) -> None:
    """Build the demo volume under `workdir`, point AIR_VOLUMES_ROOT at it, run every section."""
    root = os.path.join(workdir, "Volumes")
    os.environ["AIR_VOLUMES_ROOT"] = root
    os.environ.setdefault("AIR_CACHE_DIR", os.path.join(workdir, "cache"))
    build_volume(root)
    print(f"demo volume: {DEMO_VOLUME} -> {root}/demo/ml/raw (AIR_VOLUMES_ROOT={root})")
    print("\n== core: FileStream ==")
    run(f"{DEMO_VOLUME}/images", world_size=world_size, num_workers=num_workers)
    for ep in sorted(entry_points(group="air_data.demo"), key=lambda e: e.name):
        print(f"\n== {ep.name} ==")
        ep.load()(DEMO_VOLUME)
