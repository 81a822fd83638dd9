"""A byte range of one open file copied onto another inside the kernel (`sendfile`), where it can be.

The node cache copies a volume's file into its own file this way, and the
packer a shard on local disk onto the volume: no Python buffer, and a system
call per up to 2 GiB rather than one per chunk.
"""

from __future__ import annotations

import errno
import os

# What `sendfile` answers where the two files' systems cannot copy between them (macOS sends only to sockets).
_REFUSED = frozenset({errno.EINVAL, errno.ENOSYS, errno.ENOTSOCK, errno.EOPNOTSUPP})
_CHUNK = 16 << 20  # read at once where `sendfile` is refused


def send_range(src: int, dst: int, start: int, stop: int) -> int:
    """Copy bytes [start, stop) of the file `src` to the file `dst` at its position, advancing it.

    Returns the bytes copied: fewer only where `src` ends first. Inside the kernel (`os.sendfile`) where the
    file systems allow it, else through a buffer; an error after some bytes were sent is raised.
    """
    copied, length = 0, stop - start
    try:
        while copied < length:
            n = os.sendfile(dst, src, start + copied, length - copied)
            if not n:
                return copied
            copied += n
        return copied
    except OSError as e:
        if e.errno not in _REFUSED or copied:
            raise
    while copied < length:
        view = memoryview(os.pread(src, min(length - copied, _CHUNK), start + copied))
        if not view:
            break
        copied += len(view)
        while view:  # a short write: the disk filled under another writer
            view = view[os.write(dst, view):]
    return copied


__all__ = ["send_range"]
