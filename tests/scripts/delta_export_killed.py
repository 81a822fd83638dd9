"""Export a Delta table over the Files API in this process, killing itself by SIGKILL before its KILL_AT-th PUT.

Usage: delta_export_killed.py TABLE DEST ROWS_PER_FILE ROWS_PER_ROW_GROUP KILL_AT
The environment names the Files API server (DATABRICKS_HOST, DATABRICKS_TOKEN, AIR_VOLUMES_TRANSPORT=files-api).
The parts upload several at once, so other PUTs are in flight when it dies. Exits 0 (printing the result) only
when the export made fewer PUTs than KILL_AT.
"""

import dataclasses
import json
import os
import signal
import sys
import threading

from air_core.delta import export_delta
from air_core.io.files_api import FilesApi

table, dest, per_file, per_group, kill_at = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
put, lock, made = FilesApi.put, threading.Lock(), 0


def put_or_die(self, path, data):
    global made
    with lock:
        if made == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        made += 1
    put(self, path, data)


FilesApi.put = put_or_die
result = export_delta(table, dest, rows_per_file=per_file, rows_per_row_group=per_group)
print(json.dumps(dataclasses.asdict(result)))
