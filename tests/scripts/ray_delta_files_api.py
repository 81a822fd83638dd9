"""A Ray driver without /Volumes exporting a Delta table over the Files API with read_uc_volume(delta_table=...).

Usage: ray_delta_files_api.py TABLE DEST (RAY_ADDRESS: the cluster; DATABRICKS_HOST, DATABRICKS_TOKEN,
AIR_VOLUMES_TRANSPORT, AIR_CACHE_DIR: this driver's environment, passed on to the workers by runtime_env).
Prints one JSON object: the ids the workers read, twice (the second export reused).
"""

import json
import os
import sys

import ray

from air_ray import read_uc_volume

table, dest = sys.argv[1:3]
names = ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_FILE", "AIR_VOLUMES_TRANSPORT", "AIR_CACHE_DIR")
ray.init(runtime_env={"env_vars": {k: os.environ[k] for k in names}}, log_to_driver=False)
out = [sorted(r["id"] for r in read_uc_volume(delta_table=table, path=dest, override_num_blocks=2).iter_rows())
       for _ in range(2)]
print(json.dumps(out))
