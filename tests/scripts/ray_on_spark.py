"""Ray on Spark (local Spark, two Ray worker nodes of one CPU, a head without CPUs) reading a volume folder twice.

Usage: ray_on_spark.py VOLUME_PATH   (AIR_VOLUMES_ROOT and AIR_CACHE_DIR set; `ray` on PATH)

The second execution runs with the volume's files deleted, so it must be
served by the node caches alone. Prints one JSON line of figures.
"""

import json
import os
import sys

import ray
from pyspark.sql import SparkSession
from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster

import air_ray
from air_core.io import volume

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "1g").getOrCreate())
setup_ray_cluster(max_worker_nodes=2, num_cpus_head_node=0, head_node_options={"include_dashboard": False})
ray.init(log_to_driver=False)  # joins the cluster setup_ray_cluster started
try:
    ds = air_ray.read_uc_volume(sys.argv[1])
    first = {r["path"]: r["bytes"] for r in ds.iter_rows()}
    for path in first:
        os.unlink(volume.parse(path).local)
    second = {r["path"]: r["bytes"] for r in ds.iter_rows()}
    print(json.dumps({
        "worker_nodes": sum(1 for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")),
        "rows": [len(first), len(second)], "same": first == second,
    }))
finally:
    shutdown_ray_cluster()
    spark.stop()
