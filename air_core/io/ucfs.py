"""An fsspec file system for volume paths, over whichever transport this process uses (FUSE or the Files API).

    import fsspec, pandas, pyarrow.fs, pyarrow.parquet as pq
    import air_core.io.ucfs                                  # registers "uc" (so does the package's entry point)
    pandas.read_csv("uc://main/ml/raw/tables/a.csv")
    fs = pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fsspec.filesystem("uc")))
    pq.read_table("/Volumes/main/ml/raw/tables/t", filesystem=fs)

`uc://<catalog>/<schema>/<volume>/<path>` and `/Volumes/...` name the same
file; the file system names it `<catalog>/<schema>/<volume>/<path>` (as s3
names `<bucket>/<key>`), so a tool that puts `uc://` back gets the URL. Reads are ranged requests over the Files API (a file's last 64 KiB in
one, for footers), writes a whole object on close. This goes straight to the
volume, not through the node cache: it is for other tools' one-off reads.
"""

from __future__ import annotations

import os
import tempfile

from fsspec import AbstractFileSystem, register_implementation

from . import transport, volume

PROTOCOL = "uc"


class UCVolumeFileSystem(AbstractFileSystem):
    """Volume paths as an fsspec file system (protocol `uc`)."""

    protocol = PROTOCOL
    root_marker = ""  # names are `<catalog>/<schema>/<volume>/<path>`, as s3's are `<bucket>/<key>`

    @classmethod
    def _strip_protocol(cls, path) -> str:
        """`uc://c/s/v/p`, `/Volumes/c/s/v/p`, `dbfs:/Volumes/c/s/v/p` or `c/s/v/p`: `c/s/v/p`."""
        path = path if isinstance(path, str) else str(path)
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3:]
        if not path.startswith(("/", "dbfs:")):
            path = "/Volumes/" + path
        return volume.parse(path).path[len("/Volumes/"):]

    def _local(self, path: str) -> str:
        return volume.parse("/Volumes/" + self._strip_protocol(path)).local

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        try:
            files, folders = transport.entries(self._local(path))
        except (FileNotFoundError, NotADirectoryError):
            return [self.info(path)] if detail else [path]  # a file lists as itself, as fsspec expects
        out = [{"name": f"{path}/{n}", "size": size, "type": "file", "mtime": mtime / 1e9}
               for n, size, mtime in files]
        out += [{"name": f"{path}/{n}", "size": 0, "type": "directory"} for n in folders]
        out.sort(key=lambda e: e["name"])
        return out if detail else [e["name"] for e in out]

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        local = self._local(path)
        try:
            size, mtime = transport.stat(local)
            return {"name": path, "size": size, "type": "file", "mtime": mtime / 1e9}
        except (FileNotFoundError, IsADirectoryError):
            pass
        if transport.is_dir(local):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        path = self._strip_protocol(path)
        if "r" in mode:
            info = self.info(path)
            if info["type"] != "file":
                raise IsADirectoryError(path)
            return transport.open_read(self._local(path), info["size"], int(info["mtime"] * 1e9))
        if mode != "wb":
            raise ValueError(f"mode {mode!r}: a volume file is read, or written whole ('wb')")
        return _Upload(self._local(path))

    def rm_file(self, path):
        transport.remove(self._local(path))

    def _rm(self, path):
        self.rm_file(path)

    def mkdir(self, path, create_parents=True, **kwargs):
        transport.make_dirs(self._local(path))

    def makedirs(self, path, exist_ok=False):
        transport.make_dirs(self._local(path))

    def modified(self, path):
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], datetime.timezone.utc)


class _Upload:
    """A file open for writing: staged on local disk, written to the volume whole when closed."""

    def __init__(self, local: str) -> None:
        self.local = local
        self._staged = tempfile.NamedTemporaryFile(prefix="air-upload-", delete=False)
        self.closed = False

    def write(self, data) -> int:
        return self._staged.write(data)

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._staged.tell()

    def flush(self) -> None:
        self._staged.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._staged.close()
        try:
            transport.write_file(self.local, self._staged.name)
        finally:
            os.unlink(self._staged.name)

    def __enter__(self) -> _Upload:
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is None:
            self.close()
        else:  # a failed write leaves the volume as it was
            self.closed = True
            self._staged.close()
            os.unlink(self._staged.name)


register_implementation(PROTOCOL, UCVolumeFileSystem, clobber=True)

__all__ = ["PROTOCOL", "UCVolumeFileSystem"]
