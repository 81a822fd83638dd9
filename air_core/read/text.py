"""Plain text as rows of a `text` column, as HF's `text` builder makes them: a row per line, paragraph or file.

`sample_by="line"` (the default) cuts large files into spans like the other
line formats; "paragraph" (blocks between blank lines) and "document" (a
file a row) read each file whole. `.txt` stays a row per file under
mode="auto": text rows are asked for with mode="text".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .. import options
from .lines import Buffer, Format, LinesReader

if TYPE_CHECKING:
    import pyarrow as pa

SAMPLE_BY = ("line", "paragraph", "document")


@dataclass(frozen=True)
class TextFormat(Format):
    """UTF-8 text into rows of `text`, by `sample_by`."""

    sample_by: str
    columns: tuple[str, ...] | None = None

    def parse(self, data: Buffer, *, first: bool) -> pa.Table:
        import pyarrow as pa

        if self.sample_by == "document":
            rows = pa.array([str(data, "utf-8")], pa.string())
        elif self.sample_by == "paragraph":
            text = str(data, "utf-8")
            rows = pa.array([p for p in text.split("\n\n") if p], pa.string())  # as HF's text builder
        else:
            rows = _lines(data)
        return pa.table({"text": rows})


def _lines(data: Buffer) -> pa.Array:
    """A string per line of `data`, without its line break (`\\n` or `\\r\\n`), checked as UTF-8."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
    offsets = np.concatenate([[0], ends, [len(data)] if len(data) and data[-1:] != b"\n" else []]).astype(np.int64)
    lines = pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data))
    lines.validate(full=True)  # UTF-8: a ValueError names the bad line's bytes
    return pc.utf8_rtrim(lines, characters="\r\n").cast(pa.string())


class TextReader(LinesReader):
    """Text files: a row per line (or paragraph, or file) in a `text` column."""

    mode = "text"
    label = "text"
    readable = None
    takes = ("sample_by",)

    def sample_by(self) -> str:
        """How text is cut into rows."""
        return self.source.options.get("sample_by") or "line"

    def validate(self) -> None:
        options.choice("sample_by", self.sample_by(), SAMPLE_BY)
        super().validate()

    def splittable(self) -> bool:
        return self.sample_by() == "line"

    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field("text", pa.string())])

    def format(self) -> TextFormat:
        return TextFormat(self.sample_by())
