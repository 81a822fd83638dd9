"""The Ray Data section of `air-data demo`: a volume folder read twice, then split over ranks."""

from __future__ import annotations

import logging
import time

import ray

from .datasource import UCVolumeDatasource, read_uc_volume


def run(volume_path: str) -> None:
    """Read `volume_path` in files mode twice (cold, then from the cache) and show a 2-rank split."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, object_store_memory=128 << 20, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    log = logging.getLogger("ray.data")
    level = log.level
    log.setLevel(logging.WARNING)  # Ray Data's per-execution INFO lines would bury the figures
    try:
        if started:  # so that execution 1 times the volume, not Ray starting its workers
            ray.data.range(4, override_num_blocks=2).materialize()
        ds = read_uc_volume(volume_path, mode="files", include_bytes=True)
        print(f"{volume_path}: {ds.count()} files; columns {ds.schema().names}")
        for execution in (1, 2):
            t = time.perf_counter()
            n = nbytes = 0
            for batch in ds.iter_batches(batch_size=64, batch_format="pyarrow"):
                n += batch.num_rows
                nbytes += sum(batch.column("size").to_pylist())
            dt = time.perf_counter() - t
            print(f"execution {execution}: {n / dt:,.0f} files/s, {nbytes / dt / 1e6:,.1f} MB/s"
                  + (" (from the node cache)" if execution == 2 else ""))
        print("split for 2 torchrun ranks (rank=, world_size=; byte-balanced, disjoint):")
        for rank in range(2):
            share = UCVolumeDatasource(volume_path, mode="files", include_bytes=True, rank=rank, world_size=2)
            tasks = share.get_read_tasks(2)
            print(f"  rank {rank}: {sum(t.metadata.num_rows for t in tasks)} files, "
                  f"{share.estimate_inmemory_data_size() / 1e6:.2f} MB")
    finally:
        log.setLevel(level)
        if started:
            ray.shutdown()
