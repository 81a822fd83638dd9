"""air_ray: Unity Catalog volumes as Ray Datasets, through the node cache.

    import ray, air_ray
    ds = air_ray.read_uc_volume("/Volumes/main/ml/raw/images", include_bytes=True)
    ds = ray.data.read_datasource(air_ray.UCVolumeDatasource("/Volumes/main/ml/tables/train"))
"""

from .datasource import UCVolumeDatasource, read_uc_volume

__all__ = ["UCVolumeDatasource", "read_uc_volume"]
