"""A Ray driver on a cluster without /Volumes, reading a volume over the Files API as the README says to.

Usage: ray_files_api.py FILES_PATH PARQUET_PATH (RAY_ADDRESS: the cluster; DATABRICKS_HOST, DATABRICKS_TOKEN,
AIR_VOLUMES_TRANSPORT, AIR_CACHE_DIR: this driver's environment, passed on to the workers by runtime_env).
Prints one JSON object: the files' digests and the Parquet ids per execution, and whether the token was found
in the pickled read tasks.
"""

import hashlib
import json
import os
import sys

import ray
from ray import cloudpickle

from air_ray import UCVolumeDatasource, read_uc_volume

files_path, parquet_path = sys.argv[1:3]
names = ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_FILE", "AIR_VOLUMES_TRANSPORT", "AIR_CACHE_DIR")
ray.init(runtime_env={"env_vars": {k: os.environ[k] for k in names}}, log_to_driver=False)
out = {"files": [], "parquet": []}
files = read_uc_volume(files_path, include_bytes=True)
for _ in range(2):
    out["files"].append({r["path"]: hashlib.sha256(r["bytes"]).hexdigest() for r in files.iter_rows()})
source = UCVolumeDatasource(parquet_path)
table = ray.data.read_datasource(source, override_num_blocks=2)
for _ in range(2):
    out["parquet"].append(sorted(r["id"] for r in table.iter_rows()))
token = os.environ["DATABRICKS_TOKEN"].encode()
out["token_pickled"] = token in cloudpickle.dumps(source) or token in cloudpickle.dumps(source.get_read_tasks(2))
print(json.dumps(out))
