"""Which way this process reaches a volume: the FUSE mount (a local folder) or the Databricks Files API.

`AIR_VOLUMES_TRANSPORT=fuse|files-api` forces one for every volume. Otherwise
each volume is looked for in the folder standing for `/Volumes` (`/Volumes`
itself on a Databricks cluster, or the folder `AIR_VOLUMES_ROOT` names): one
found there is read over FUSE; one not there over the Files API when
`databricks-sdk` finds credentials (`DATABRICKS_HOST` + `DATABRICKS_TOKEN`, a
profile, OAuth: whatever `WorkspaceClient()` accepts), else over FUSE, whose
"does not exist" says what was tried (`why_fuse`). A mount may hold some volumes
and not others: the decision is made once per volume, and costs a lookup after.

Over FUSE the volume's operations are the local file system's (`scandir`,
`stat`, `open` / `pread` / `sendfile`), made where they always were; over the
Files API they are `FilesApi`'s methods (`list`, `kind`, `stat`, `read`,
`put`, `delete`), which those places call instead when `remote(path)` gives one.
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
VOLUMES_ROOT_ENV = "AIR_VOLUMES_ROOT"  # a folder that stands for /Volumes
TRANSPORTS = ("fuse", "files-api")
FUSE_ROOT = "/Volumes"
VOLUMES = "/Volumes"  # how a volume path starts, wherever the volume lies
# What the SDK reads to find a workspace and its credentials: a client is made again when one changes.
_SDK_ENV = ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_PROFILE", "DATABRICKS_CONFIG_FILE",
            "DATABRICKS_CLIENT_ID", "DATABRICKS_CLIENT_SECRET", "DATABRICKS_AUTH_TYPE")

_lock = threading.Lock()
_clients: dict[tuple, object] = {}  # by process and configuration: a FilesApi, or None where there is no credential
_no_client: dict[tuple, str] = {}  # by the same key: why there is none, in words
_mounted: dict[str, bool] = {}  # by a volume's folder in the one standing for /Volumes: whether it is there
# The volume looked up last, (the folder standing for /Volumes, its folder there + "/", its volume path + "/",
# whether it is there): a file's path is then told by two prefixes, with no parse of it.
_last: tuple[str, str, str, bool] = ("", "", "", True)


def _after_fork() -> None:
    """A forked child's own lock: a parent thread that held it at the fork does not exist here to release it
    (the clients are the parent's, keyed by its pid: a child makes its own)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def choose(forced: str | None, mounted: bool, credentials: Callable[[], bool]) -> str:
    """The transport of one volume, "fuse" or "files-api" (pure apart from calling `credentials`, asked last).

    Args:
        forced: `AIR_VOLUMES_TRANSPORT`'s value (None or "": not forced).
        mounted: the volume is a folder in the one standing for /Volumes.
        credentials: whether databricks-sdk finds a workspace and a credential.
    """
    if forced:
        if forced not in TRANSPORTS:
            raise OptionError(f"{TRANSPORT_ENV}={forced!r}: give one of {', '.join(TRANSPORTS)}")
        return forced
    if mounted:
        return "fuse"
    return "files-api" if credentials() else "fuse"


def remote(path: str):
    """The `FilesApi` client through which this process reaches the volume holding `path`, else None (FUSE).

    Args:
        path: a volume path, or a `VolumePath.local` path (or one under it); any other path is a local file's.

    The client is made once per process and configuration (a forked DataLoader worker makes its own:
    connections must not be shared across processes); whether a volume is mounted is looked at once.
    """
    env = os.environ
    forced = env.get(TRANSPORT_ENV) or None
    # FUSE, forced or for a volume on the mount, as `choose` decides: without the SDK's seven variables,
    # which would make every path parsed cost as much again as the parse.
    if forced == "fuse" or (not forced and _on_mount(env.get(VOLUMES_ROOT_ENV) or FUSE_ROOT, path)):
        return None
    key = (os.getpid(), forced, *(env.get(k) for k in _SDK_ENV))
    try:
        return _clients[key]
    except KeyError:
        pass
    with _lock:
        if key not in _clients:
            _clients[key] = _make(forced, key)
        return _clients[key]


def why_fuse(volume: str) -> str:
    """What was tried to reach the volume `volume` (`/Volumes/c/s/v`), read over FUSE but not found there, and
    what to set, in words: for the error that it is not there."""
    env = os.environ
    if env.get(TRANSPORT_ENV) == "fuse":
        return (f"looked for at {_mount_folder(volume)} alone, as {TRANSPORT_ENV}=fuse says; unset it, and set "
                "DATABRICKS_HOST and DATABRICKS_TOKEN (or a databricks-sdk profile), to read it over the Files API")
    why = _no_client.get((os.getpid(), None, *(env.get(k) for k in _SDK_ENV)))
    if why is None:  # it was on the mount when first looked at
        return f"not at {_mount_folder(volume)} on this machine"
    return (f"not at {_mount_folder(volume)} on this machine, and no Databricks credentials were found to read it "
            f"over the Files API ({why}): set {VOLUMES_ROOT_ENV} to the folder standing for /Volumes, or "
            "DATABRICKS_HOST and DATABRICKS_TOKEN (or a databricks-sdk profile) to read it over the Files API")


def why_files_api(volume: str) -> str:
    """Why the volume `volume` is read over the Files API, in words, for the errors of its answers."""
    forced = os.environ.get(TRANSPORT_ENV)
    if forced:
        return f"as {TRANSPORT_ENV}={forced} says"
    return f"as it is not at {_mount_folder(volume)} on this machine"


def _mount_folder(volume: str) -> str:
    return (os.environ.get(VOLUMES_ROOT_ENV) or FUSE_ROOT).rstrip("/") + volume[len(VOLUMES):]


def _on_mount(root: str, path: str) -> bool:
    """Whether the volume holding `path` (a volume path, or a local one under `root`) is a folder in `root`:
    looked at once per volume and root. A path in no volume is a local file's."""
    global _last
    last_root, folder, volume, found = _last
    if root == last_root and (path.startswith(folder) or path.startswith(volume)):
        return found
    base = root.rstrip("/")
    for prefix in (base, VOLUMES):
        if path.startswith(prefix) and path[len(prefix):len(prefix) + 1] == "/":
            names = path[len(prefix) + 1:].split("/", 3)
            break
    else:
        return True
    if len(names) < 3:  # a catalog's or a schema's folder, in no volume
        return True
    name = "/".join(names[:3])
    folder = f"{base}/{name}"
    try:
        found = _mounted[folder]
    except KeyError:
        found = _mounted[folder] = os.path.isdir(folder)
    _last = (root, folder + "/", f"{VOLUMES}/{name}/", found)
    return found


# The few whole-file operations on a volume's small files (pointers, markers, indexes) made by path:
# the local file system's over FUSE, the Files API's requests otherwise.


def is_file(local: str) -> bool:
    """Whether a file is at `local` (a `VolumePath.local` path, or one under it)."""
    api = remote(local)
    if api is None:
        return os.path.isfile(local)
    try:
        api.stat(local)
        return True
    except FileNotFoundError:
        return False


def is_dir(local: str) -> bool:
    """Whether a folder is at `local`."""
    api = remote(local)
    return os.path.isdir(local) if api is None else api.kind(local) == "dir"


def stat(local: str) -> tuple[int, int]:
    """The file's (size, mtime in ns), its key in the node cache; `FileNotFoundError` if there is none,
    `IsADirectoryError` (FUSE) for a folder."""
    api = remote(local)
    if api is None:
        st = os.stat(local)
        if stat_mod.S_ISDIR(st.st_mode):  # as the Files API: a folder is no file
            raise IsADirectoryError(errno.EISDIR, f"{local} is a folder")
        return st.st_size, st.st_mtime_ns
    return api.stat(local)


def read_file(local: str) -> bytes:
    """The whole file at `local`; `FileNotFoundError` if there is none."""
    api = remote(local)
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
    api = remote(local)
    if api is None:
        shutil.copyfile(source, local)
        return
    with open(source, "rb") as f:
        api.put(local, f)


def rename(local: str, new_local: str) -> None:
    """Give the file `local` the name `new_local`, replacing any file there. The Files API renames
    nothing: there the file is read, written whole under its new name, then removed under the old one,
    so the new name appears complete or not at all."""
    api = remote(local)
    if api is None:
        os.replace(local, new_local)
        return
    api.put(new_local, read_file(local))
    api.delete(local)


def remove(local: str) -> None:
    """Remove the file `local`; `FileNotFoundError` if there is none."""
    api = remote(local)
    if api is None:
        os.unlink(local)
    else:
        api.delete(local)


def remove_tree(local: str) -> None:
    """Remove the folder `local` and everything under it; what is gone already is no error."""
    api = remote(local)
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
    api = remote(local)
    if api is None:
        os.makedirs(local, exist_ok=True)
    else:
        api.make_dirs(local)


def entries(local: str) -> tuple[list[tuple[str, int, int]], list[str]]:
    """The folder `local`'s files as (name, size, mtime in ns) and its folders' names, hidden names
    included; `FileNotFoundError` if there is no folder."""
    api = remote(local)
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
    api = remote(local)
    if api is None:
        return os.listdir(local)
    files, folders = api.list(local)
    return [name for name, _, _ in files] + folders


def open_read(local: str, size: int, mtime_ns: int) -> BinaryIO:
    """The listed version (`size`, `mtime_ns`) of the file at `local`, open for reading and seeking: the
    local file, or over the Files API a file whose reads are ranged requests (`RemoteFile`)."""
    api = remote(local)
    if api is None:
        return open(local, "rb")
    from .files_api import RemoteFile

    return io.BufferedReader(RemoteFile(api, local, size, mtime_ns), RemoteFile.TAIL)


def _make(forced: str | None, key: tuple):
    """The Files API client for a volume off the mount (or for every volume, forced): None where, not forced,
    databricks-sdk finds no credentials (why, kept in `_no_client` under `key`)."""
    config = []

    def credentials() -> bool:
        try:
            from databricks.sdk.core import Config
        except ImportError:
            _no_client[key] = "databricks-sdk is not installed: pip install 'air-uc-volume[files]'"
            return False
        try:
            config.append(Config())
        except ValueError as e:  # the SDK found no workspace or no credential to use
            _no_client[key] = f"databricks-sdk: {e}"
            return False
        return True

    if choose(forced, False, credentials) == "fuse":
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
           "listdir", "make_dirs", "open_read", "read_file", "remote", "remove", "remove_tree", "rename", "stat",
           "why_files_api", "why_fuse", "write_file"]
