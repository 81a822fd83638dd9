"""air_ray: Unity Catalog volumes as Ray Datasets, through the node cache.

    import ray, air_ray
    ds = air_ray.read_uc_volume("/Volumes/main/ml/raw/images", include_bytes=True)
    ds = ray.data.read_datasource(air_ray.UCVolumeDatasource("/Volumes/main/ml/tables/train"))
    path = air_ray.local_path(row)   # a files-mode row's file, valid on whichever node asks
"""

from typing import TYPE_CHECKING

from air_core.doors import exports

if TYPE_CHECKING:
    from .datasource import UCVolumeDatasource, read_uc_volume
    from .rows import local_path

# Loaded on first use: a read task unpickled on a worker imports this package for `air_ray.task_read`,
# and needs none of the driver's planning.
_LAZY = {"UCVolumeDatasource": ".datasource", "read_uc_volume": ".datasource", "local_path": ".rows"}

__all__ = ["UCVolumeDatasource", "local_path", "read_uc_volume"]


__getattr__, __dir__ = exports(__name__, _LAZY)
