"""Read every file of a volume folder through a FileStream; print the cache counters as JSON.

Usage: core_read_all.py VOLUME_PATH SEED
"""

import json
import sys

from air_core import FileStream

stream = FileStream(sys.argv[1], shuffle=True, seed=int(sys.argv[2]), rank=0, world_size=1)
n = sum(len(f.read_bytes()) for f in stream)
s = stream.cache.stats
print(json.dumps({"bytes": n, "hits": s.hits, "misses": s.misses, "not_admitted": s.not_admitted}))
