"""A read-only, seekable file whose bytes come by range: what a Parquet reader, which seeks, is given where
no local file holds the bytes (the Files API; a file of which only some row groups were fetched)."""

from __future__ import annotations

import io


class RangeFile(io.RawIOBase):
    """A file of `size` bytes; a subclass says how to get bytes [start, stop) (`_range`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = 0) -> int:
        self._at = max(0, offset + (0, self._at, self.size)[whence])
        return self._at

    def readinto(self, buffer) -> int:
        start, stop = self._at, min(self.size, self._at + len(buffer))
        if stop <= start:
            return 0
        data = self._range(start, stop)
        memoryview(buffer)[:len(data)] = data
        self._at += len(data)
        return len(data)

    def _range(self, start: int, stop: int) -> bytes | memoryview:
        raise NotImplementedError
