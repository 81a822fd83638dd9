"""Which way this process reaches volumes: the FUSE mount (a local folder) or the Databricks Files API.

`AIR_VOLUMES_TRANSPORT=fuse|files-api` forces one. Otherwise FUSE when
`/Volumes` is there (a Databricks cluster) or `AIR_VOLUMES_ROOT` names a
folder standing for it, else the Files API when `databricks-sdk` finds
credentials (`DATABRICKS_HOST` + `DATABRICKS_TOKEN`, a profile, OAuth:
whatever `WorkspaceClient()` accepts), else FUSE, whose "does not exist"
says what to set.

Over FUSE the volume's operations are the local file system's (`scandir`,
`stat`, `open` / `pread` / `sendfile`), made where they always were; over the
Files API they are `FilesApi`'s methods (`list`, `kind`, `stat`, `read`,
`put`, `delete`), which those places call instead when `remote()` gives one.
Either way the node cache keys a copy by path, size and mtime.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat as stat_mod
import shutil
import threading
from typing import BinaryIO, Callable

from ..errors import OptionError

TRANSPORT_ENV = "AIR_VOLUMES_TRANSPORT"
VOLUMES_ROOT_ENV = "AIR_VOLUMES_ROOT"  # a folder that stands for /Volumes: reached over FUSE, unless forced
TRANSPORTS = ("fuse", "files-api")
FUSE_ROOT = "/Volumes"
# What the SDK reads to find a workspace and its credentials: a client is made again when one changes.
_SDK_ENV = ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_PROFILE", "DATABRICKS_CONFIG_FILE",
            "DATABRICKS_CLIENT_ID", "DATABRICKS_CLIENT_SECRET", "DATABRICKS_AUTH_TYPE")

_lock = threading.Lock()
_chosen: dict[tuple, object] = {}


def _after_fork() -> None:
    """A forked child's own lock: a parent thread that held it at the fork does not exist here to release it
    (the clients are the parent's, keyed by its pid: a child makes its own)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def choose(forced: str | None, root_set: bool, mounted: bool, credentials: Callable[[], bool]) -> str:
    """The transport to use: "fuse" or "files-api" (pure apart from calling `credentials`, asked last)."""
    if forced:
        if forced not in TRANSPORTS:
            raise OptionError(f"{TRANSPORT_ENV}={forced!r}: give one of {', '.join(TRANSPORTS)}")
        return forced
    if root_set or mounted:
        return "fuse"
    return "files-api" if credentials() else "fuse"


def remote():
    """This process's `FilesApi` client when volumes are reached over the Files API, else None (FUSE).

    Made once per process and configuration (a forked DataLoader worker makes its own: connections must
    not be shared across processes).
    """
    env = os.environ
    forced, root = env.get(TRANSPORT_ENV), env.get(VOLUMES_ROOT_ENV)
    # FUSE, forced or under a folder standing for /Volumes, as `choose` decides: without the SDK's seven
    # variables, which made every path parsed cost as much again as the parse.
    if forced == "fuse" or (root and not forced):
        return None
    key = (os.getpid(), forced, root, *(env.get(k) for k in _SDK_ENV))
    try:
        return _chosen[key]
    except KeyError:
        pass
    with _lock:
        if key not in _chosen:
            _chosen[key] = _make(key[1], bool(key[2]))
        return _chosen[key]


# The few whole-file operations on a volume's small files (pointers, markers, indexes) made by path:
# the local file system's over FUSE, the Files API's requests otherwise.


def is_file(local: str) -> bool:
    """Whether a file is at `local` (a `VolumePath.local` path, or one under it)."""
    api = remote()
    if api is None:
        return os.path.isfile(local)
    try:
        api.stat(local)
        return True
    except FileNotFoundError:
        return False


def is_dir(local: str) -> bool:
    """Whether a folder is at `local`."""
    api = remote()
    return os.path.isdir(local) if api is None else api.kind(local) == "dir"


def stat(local: str) -> tuple[int, int]:
    """The file's (size, mtime in ns), its key in the node cache; `FileNotFoundError` if there is none,
    `IsADirectoryError` (FUSE) for a folder."""
    api = remote()
    if api is None:
        st = os.stat(local)
        if stat_mod.S_ISDIR(st.st_mode):  # as the Files API: a folder is no file
            raise IsADirectoryError(errno.EISDIR, f"{local} is a folder")
        return st.st_size, st.st_mtime_ns
    return api.stat(local)


def read_file(local: str) -> bytes:
    """The whole file at `local`; `FileNotFoundError` if there is none."""
    api = remote()
    if api is None:
        with open(local, "rb") as f:
            return f.read()
    size, mtime_ns = api.stat(local)
    out = bytearray(size)

    def write(view: memoryview, at: int) -> None:
        out[at:at + len(view)] = view

    api.read(local, 0, size, write, size=size, mtime_ns=mtime_ns)
    return bytes(out)


def write_file(local: str, source: str) -> None:
    """Copy the local file `source` to `local` on the volume in one sequential write (FUSE) or one
    whole-object `PUT` (Files API), parent folders made as needed."""
    api = remote()
    if api is None:
        shutil.copyfile(source, local)
        return
    with open(source, "rb") as f:
        api.put(local, f)


def rename(local: str, new_local: str) -> None:
    """Give the file `local` the name `new_local`, replacing any file there. The Files API renames
    nothing: there the file is read, written whole under its new name, then removed under the old one,
    so the new name appears complete or not at all."""
    api = remote()
    if api is None:
        os.replace(local, new_local)
        return
    api.put(new_local, read_file(local))
    api.delete(local)


def remove(local: str) -> None:
    """Remove the file `local`; `FileNotFoundError` if there is none."""
    api = remote()
    if api is None:
        os.unlink(local)
    else:
        api.delete(local)


def remove_tree(local: str) -> None:
    """Remove the folder `local` and everything under it; what is gone already is no error."""
    api = remote()
    if api is None:
        shutil.rmtree(local, ignore_errors=True)
        return
    try:
        files, folders = api.list(local)
    except FileNotFoundError:
        return
    for name in folders:
        remove_tree(f"{local}/{name}")
    for name, _, _ in files:
        with contextlib.suppress(FileNotFoundError):
            api.delete(f"{local}/{name}")
    with contextlib.suppress(FileNotFoundError):
        api.remove_dir(local)


def make_dirs(local: str) -> None:
    """Make the folder `local` and any missing above it."""
    api = remote()
    if api is None:
        os.makedirs(local, exist_ok=True)
    else:
        api.make_dirs(local)


def entries(local: str) -> tuple[list[tuple[str, int, int]], list[str]]:
    """The folder `local`'s files as (name, size, mtime in ns) and its folders' names, hidden names
    included; `FileNotFoundError` if there is no folder."""
    api = remote()
    if api is not None:
        return api.list(local)
    files, folders = [], []
    with os.scandir(local) as it:
        for e in it:
            if e.is_dir():
                folders.append(e.name)
                continue
            try:
                st = e.stat()
            except FileNotFoundError:  # removed since the folder was read: not listed, as if read after
                continue
            files.append((e.name, st.st_size, st.st_mtime_ns))
    return files, folders


def listdir(local: str) -> list[str]:
    """The names in the folder `local`, files and folders; `FileNotFoundError` if there is none."""
    api = remote()
    if api is None:
        return os.listdir(local)
    files, folders = api.list(local)
    return [name for name, _, _ in files] + folders


def open_read(local: str, size: int, mtime_ns: int) -> BinaryIO:
    """The listed version (`size`, `mtime_ns`) of the file at `local`, open for reading and seeking: the
    local file, or over the Files API a file whose reads are ranged requests (`RemoteFile`)."""
    api = remote()
    if api is None:
        return open(local, "rb")
    from .files_api import RemoteFile

    return io.BufferedReader(RemoteFile(api, local, size, mtime_ns), RemoteFile.TAIL)


def _make(forced: str | None, root_set: bool):
    config = []

    def credentials() -> bool:
        try:
            from databricks.sdk.core import Config
        except ImportError:
            return False
        try:
            config.append(Config())
        except ValueError:  # the SDK found no workspace or no credential to use
            return False
        return True

    if choose(forced, root_set, os.path.isdir(FUSE_ROOT), credentials) == "fuse":
        return None
    try:
        from .files_api import FilesApi
    except ImportError as e:
        raise OptionError(f"{TRANSPORT_ENV}=files-api needs databricks-sdk: pip install 'air-uc-volume[files]' "
                          f"({e})") from None
    if not config:
        try:
            from databricks.sdk.core import Config

            config.append(Config())
        except ValueError as e:
            raise OptionError(f"{TRANSPORT_ENV}=files-api, but databricks-sdk finds no workspace to reach: "
                              f"set DATABRICKS_HOST and DATABRICKS_TOKEN, or a profile ({e})") from None
    return FilesApi(config[0])


__all__ = ["FUSE_ROOT", "TRANSPORTS", "TRANSPORT_ENV", "VOLUMES_ROOT_ENV", "choose", "entries", "is_dir", "is_file",
           "listdir", "make_dirs", "open_read", "read_file", "remote", "remove", "remove_tree", "rename", "stat", "write_file"]
