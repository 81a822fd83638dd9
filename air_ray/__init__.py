"""air_ray: Unity Catalog volumes as Ray Datasets, through the node cache.

    import ray, air_ray
    ds = air_ray.read_uc_volume("/Volumes/main/ml/raw/images", include_bytes=True)
    ds = ray.data.read_datasource(air_ray.UCVolumeDatasource("/Volumes/main/ml/tables/train"))
    path = air_ray.local_path(row)   # a files-mode row's file, valid on whichever node asks
"""

from .datasource import UCVolumeDatasource, read_uc_volume
from .rows import local_path

__all__ = ["UCVolumeDatasource", "local_path", "read_uc_volume"]
