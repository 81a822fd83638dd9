"""Export a Delta table in a fresh process and print the result as JSON (exits normally, never os._exit).

Usage: delta_export.py TABLE DEST [ROWS_PER_FILE ROWS_PER_ROW_GROUP]
"""

import dataclasses
import json
import sys

from air_core.delta import export_delta

sizes = [int(a) for a in sys.argv[3:5]]
kwargs = dict(zip(("rows_per_file", "rows_per_row_group"), sizes))
result = export_delta(sys.argv[1], sys.argv[2], **kwargs)
print(json.dumps(dataclasses.asdict(result)))
