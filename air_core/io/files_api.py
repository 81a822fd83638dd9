"""The Databricks Files API as a volume's transport, where no FUSE mount of `/Volumes` exists.

What FUSE gives through `scandir`, `stat` and `pread`, the service gives
through HTTP: `GET /api/2.0/fs/directories{path}` (a page of up to 1,000
entries, `page_token` for the next), `HEAD /api/2.0/fs/files{path}` (length
and `Last-Modified`), `GET` with `Range` (bytes), `PUT ?overwrite=true`
(a whole object) and `DELETE`. Configuration and authentication are
`databricks-sdk`'s (`databricks.sdk.core.Config`, what `WorkspaceClient()`
uses: `DATABRICKS_HOST` + `DATABRICKS_TOKEN`, profiles, OAuth): each request
carries the headers its `authenticate()` gives. The requests themselves go
through a `urllib3` pool of this module's: the SDK's `files.download` takes
no range, and its API client retries for minutes on a pool of 20
connections, where a fetch pool of 64 threads wants 64 and its own retries.
Not through `requests` either: on 2 cores a first epoch of small files is
bound by the client's CPU per request, which `requests` doubles (it reads
the proxy settings from the environment on every request, among others).
The environment is read once, when the client is made, as `requests` reads
it: `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`, and `REQUESTS_CA_BUNDLE` /
`CURL_CA_BUNDLE` for the certificates to trust (else certifi's).

A remote service fails in its own ways, each handled here: `429` and `503`
wait for `Retry-After` (jittered; exponential backoff without one), no more
than `MAX_IN_FLIGHT` requests run at once per process, `401` / `403` are an
`AuthError` naming the host and the credential, `404` a `FileNotFoundError`
(the callers' "does not exist", as on FUSE), and a body cut short (a reset
connection, fewer bytes than its `Content-Length`) is asked again from the
first byte not received. A read never returns fewer bytes than it asked for,
so a short body is never cached.
"""

from __future__ import annotations

import email.utils
import errno
import os
import random
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, BinaryIO, Callable

from ..errors import AuthError, FetchError
from .ranges import RangeFile

FILES = "/api/2.0/fs/files"
DIRECTORIES = "/api/2.0/fs/directories"
MAX_IN_FLIGHT = 64
ATTEMPTS = 8
_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 5.0
_TIMEOUT_S = 60
_CHUNK = 256 << 10
_RETRIED = frozenset({429, 500, 502, 503, 504})

Write = Callable[[memoryview, int], None]  # (bytes, offset in the file)


class FilesApi:
    """A volume's operations over the Files API of one workspace.

    Args:
        config: a `databricks.sdk.core.Config` (default: `Config()`, which reads the environment and
            `~/.databrickscfg` as `WorkspaceClient()` does).

    Paths are volume paths, `/Volumes/c/s/v/...`.
    """

    def __init__(self, config=None) -> None:
        from databricks.sdk.core import Config

        self.config = config if config is not None else Config()
        self.host = self.config.host.rstrip("/")
        self._urlopen = _connections(self.host, MAX_IN_FLIGHT)
        self._agent = self.config.user_agent
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)  # one process's share of the service

    def credential(self) -> str:
        """Which credential requests carry, in words: what to check when it is refused."""
        c = self.config
        where = f"profile {c.profile!r} of {c.config_file or '~/.databrickscfg'}" if c.profile else "the environment"
        named = {"pat": "the token (DATABRICKS_TOKEN)", "oauth-m2m": "the OAuth client (DATABRICKS_CLIENT_ID / "
                 "DATABRICKS_CLIENT_SECRET)"}.get(c.auth_type, f"the {c.auth_type} credential")
        return f"{named} from {where}"

    # --- the volume's operations -----------------------------------------------------------------

    def list(self, path: str) -> tuple[list[tuple[str, int, int]], list[str]]:
        """A folder's files as (name, size, mtime in ns) and its sub-folders' names, every page followed.

        Raises `FileNotFoundError` when there is no folder at `path`.
        """
        files, folders, token = [], [], None
        while True:
            page = self._request("GET", DIRECTORIES, path, params={"page_token": token} if token else None).json()
            for e in page.get("contents", ()):
                if e.get("is_directory"):
                    folders.append(e["name"])
                else:
                    files.append((e["name"], int(e.get("file_size") or 0), _listed_mtime_ns(e.get("last_modified"))))
            token = page.get("next_page_token")
            if not token:
                return files, folders

    def kind(self, path: str) -> str | None:
        """"dir", "file", or None when nothing is at `path`."""
        try:
            self._request("HEAD", DIRECTORIES, path)
            return "dir"
        except (FileNotFoundError, FetchError):  # a file there answers as no folder, in whatever words
            pass
        try:
            self._request("HEAD", FILES, path)
            return "file"
        except FileNotFoundError:
            return None

    def stat(self, path: str) -> tuple[int, int]:
        """A file's (size, mtime in ns); `FileNotFoundError` if there is none.

        The mtime has whole seconds, as `Last-Modified` gives it, and as `list` gives it too (see
        `_listed_mtime_ns`), so a file has one key in the node cache whichever of the two found it.
        """
        r = self._request("HEAD", FILES, path)
        return int(r.headers["Content-Length"]), _mtime_ns(r.headers.get("Last-Modified"))

    def read(self, path: str, start: int, stop: int, write: Write, *, size: int, mtime_ns: int,
             done: threading.Event | None = None) -> int:
        """Bytes [start, stop) of the listed version (`size`, `mtime_ns`) of a file, each chunk given to
        `write(chunk, offset)` in order; returns the bytes given (fewer only when `done` was set).

        A body cut short is asked again from its first byte not received, up to `ATTEMPTS` times; a file
        that changed since it was listed (another length, or modified since) is a `FetchError`.
        """
        reached, cuts = start, 0

        def forward(view: memoryview, offset: int) -> None:
            nonlocal reached
            write(view, offset)
            reached = offset + len(view)

        while reached < stop and not (done and done.is_set()):
            headers = {"Range": f"bytes={reached}-{stop - 1}"}
            if mtime_ns:  # whole seconds, as the header has them
                headers["If-Unmodified-Since"] = email.utils.formatdate(mtime_ns // 10**9, usegmt=True)
            try:
                self._stream(path, headers, reached, stop, forward, size, done)
            except ConnectionResetError:
                if cuts == ATTEMPTS - 1:
                    raise
                cuts += 1
        return reached - start

    def put(self, path: str, data: bytes | BinaryIO) -> None:
        """Write the whole object `path` (replacing any), in one request; `data` may be a file open for
        reading from its start, sent as it is read."""
        self._request("PUT", FILES, path, params={"overwrite": "true"}, data=data)

    def remove_dir(self, path: str) -> None:
        """Remove the empty folder `path`."""
        self._request("DELETE", DIRECTORIES, path)

    def make_dirs(self, path: str) -> None:
        """Make the folder `path` and any missing above it."""
        self._request("PUT", DIRECTORIES, path)

    def delete(self, path: str) -> None:
        """Remove the file `path`; `FileNotFoundError` if there is none."""
        self._request("DELETE", FILES, path)

    # --- requests --------------------------------------------------------------------------------

    def _stream(self, path: str, headers: dict, at: int, stop: int, write: Write, size: int,
                done: threading.Event | None) -> None:
        """One ranged GET from `at`, its body given to `write` until `stop`; `ConnectionResetError` if it
        ends short."""
        with self._slots:  # the body's transfer counts as in flight too
            r = self._request("GET", FILES, path, headers=headers, stream=True, slotted=True)
            whole = True  # the body read to its end: the connection goes back to the pool, else it is closed
            try:
                ranged = r.headers.get("Content-Range", "").rpartition("/")[2]
                total = int(ranged) if ranged.isdigit() else int(r.headers.get("Content-Length", -1))
                skip = at if r.status == 200 else 0  # a server that ignored the range: skip to `at`
                if total != size:
                    whole = False
                    raise FetchError(0, f"{path} changed after it was listed (size {size} -> {total}); list again "
                                        "(make a new stream) to read the new version")
                # read1: what has arrived, so a connection cut mid-body loses none of the bytes it brought
                while chunk := r.read1(_CHUNK, decode_content=False):
                    view = memoryview(chunk)
                    if skip:
                        view, skip = view[skip:], max(0, skip - len(view))
                    view = view[:stop - at]
                    if view:
                        write(view, at)
                        at += len(view)
                    if (at >= stop and r.length_remaining != 0) or (done and done.is_set()):
                        whole = False
                        break
            except _transport_errors() as e:
                whole = False
                if at >= stop:
                    return
                raise ConnectionResetError(errno.ECONNRESET, f"{path}: the body stopped at byte {at}: {e}") from e
            finally:
                if not whole:
                    r.close()
                r.release_conn()
        if at < stop and not (done and done.is_set()):  # a body shorter than asked, yet closed cleanly
            raise ConnectionResetError(errno.ECONNRESET, f"{path}: the body stopped at byte {at} of {stop}")

    def _request(self, method: str, endpoint: str, path: str, *, params: dict | None = None,
                 headers: dict | None = None, data: bytes | BinaryIO | None = None, stream: bool = False,
                 slotted: bool = False):
        """One request, retried on 429 / 5xx (honouring `Retry-After`) and on connection errors; its response
        (`urllib3.BaseHTTPResponse`), its body unread if `stream`, else read and its connection given back."""
        url = f"{endpoint}{urllib.parse.quote(path)}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        headers = {"User-Agent": self._agent, **(headers or {})}
        if hasattr(data, "seek"):  # a file, sent as it is read, with its length (not chunked)
            headers["Content-Length"] = str(data.seek(0, os.SEEK_END))
        for attempt in range(ATTEMPTS):
            wait = None
            if hasattr(data, "seek"):  # a body sent again is sent whole
                data.seek(0)
            try:
                if slotted:
                    r = self._send(method, url, headers, data, stream)
                else:
                    with self._slots:
                        r = self._send(method, url, headers, data, stream)
            except _transport_errors() as e:
                if attempt == ATTEMPTS - 1:
                    raise OSError(errno.EIO, f"{method} {path} on {self.host}: {e}") from e
            else:
                if r.status < 300:
                    return r
                said = _message(r)  # its body read whole (a line of JSON): the connection can go back
                r.release_conn()
                if r.status not in _RETRIED or attempt == ATTEMPTS - 1:
                    raise self._error(method, path, r.status, said)
                wait = _retry_after(r.headers.get("Retry-After"))
            backoff = min(_MAX_BACKOFF_S, _BACKOFF_S * 2**attempt)
            # Jitter: requests refused together, in one burst, must not all come back together.
            time.sleep(random.uniform(wait, 1.5 * wait) if wait is not None else random.uniform(0, backoff))
        raise AssertionError("unreachable")

    def _send(self, method: str, url: str, headers: dict, data, stream: bool):
        return self._urlopen(method, url, body=data, headers={**self.config.authenticate(), **headers},
                             preload_content=not stream, retries=False, redirect=False, timeout=_TIMEOUT_S)

    def _error(self, method: str, path: str, status: int, said: str) -> Exception:
        if status == 404:
            return FileNotFoundError(errno.ENOENT, f"{path} does not exist")
        if status == 401:
            return AuthError(f"{self.host} did not accept the credentials of this process for {method} {path} "
                             f"(401: {said}): check {self.credential()}, or configure another one the way "
                             "databricks-sdk's WorkspaceClient() takes it (DATABRICKS_HOST + DATABRICKS_TOKEN, "
                             "a profile, OAuth)")
        if status == 403:
            return AuthError(f"{self.host} refused {method} {path} (403: {said}): {self.credential()} is not valid "
                             "there, or its principal lacks the volume's READ VOLUME (WRITE VOLUME for writes) "
                             "privilege")
        if status == 412:
            return FetchError(0, f"{path} changed after it was listed (modified since); list again "
                                 "(make a new stream) to read the new version")
        if status in _RETRIED:
            return OSError(errno.EIO, f"{method} {path} on {self.host}: {status} {said} after {ATTEMPTS} "
                                      "attempts")
        return FetchError(errno.EIO, f"{method} {path} on {self.host}: {status} {said}")


class RemoteFile(RangeFile):
    """A read-only, seekable file over ranged requests, for readers that seek (a Parquet footer's reader).

    Its first read in the last `TAIL` bytes fetches all of them, so a footer (the length, then the
    metadata before it) costs one request; any other read is a request of its own.
    """

    TAIL = 64 << 10

    def __init__(self, api: FilesApi, path: str, size: int, mtime_ns: int) -> None:
        super().__init__(size)
        self.api, self.path, self.mtime_ns = api, path, mtime_ns
        self._tail: bytes | None = None

    def _range(self, start: int, stop: int) -> bytes:
        tail_from = max(0, self.size - self.TAIL)
        if start < tail_from:
            return self._fetch(start, stop)
        if self._tail is None:
            self._tail = self._fetch(tail_from, self.size)
        return self._tail[start - tail_from:stop - tail_from]

    def _fetch(self, start: int, stop: int) -> bytes:
        out = bytearray(stop - start)

        def write(view: memoryview, at: int) -> None:
            out[at - start:at - start + len(view)] = view

        self.api.read(self.path, start, stop, write, size=self.size, mtime_ns=self.mtime_ns)
        return bytes(out)


def _message(r) -> str:
    """What an error response says (its body read whole)."""
    try:
        body = r.json()
        return f"{body.get('error_code', '')} {body.get('message', '')}".strip() or r.reason
    except (ValueError, AttributeError, *_transport_errors()):  # not JSON, not an object, or cut short
        return r.reason or str(r.status)


def _connections(host: str, size: int) -> Callable[..., Any]:
    """`urlopen(method, target, ...)` of a pool of up to `size` connections to `host` (`target`: a path on it),
    through the proxy that the environment names for it, if any, trusting the certificates that `requests` would
    (read now, once: `requests` reads them on every request)."""
    import certifi
    import urllib3

    trusted = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or certifi.where()
    options = {"maxsize": size, "ca_certs": trusted}
    where = urllib.parse.urlsplit(host)
    proxy = urllib.request.getproxies().get(where.scheme)
    if proxy and not urllib.request.proxy_bypass(where.hostname or ""):
        proxied = urllib3.ProxyManager(proxy, **options)  # an http:// host is asked by its whole URL there
        return lambda method, target, **kw: proxied.urlopen(method, host + target, **kw)
    # The host's own pool, asked by path: a manager would parse each URL again to find it.
    return urllib3.PoolManager(**options).connection_from_url(host).urlopen


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a `Retry-After` header: a number of seconds, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else None


def _listed_mtime_ns(millis: int | None) -> int:
    """A listing's mtime (milliseconds) cut to whole seconds, in ns.

    `HEAD`'s `Last-Modified` has whole seconds only; the node cache keys a copy by (path, size, mtime), so
    a file listed (a stream) and the same file stat'ed (a pointer, a checkpoint, an index) must give the
    same mtime, or the same bytes are fetched and held twice. A rewrite of a file in the same second with
    the same length keeps its key, as it would have under `If-Unmodified-Since`'s whole seconds anyway.
    """
    return int(millis or 0) // 1000 * 10**9


def _mtime_ns(value: str | None) -> int:
    when = email.utils.parsedate_to_datetime(value) if value else None
    return int(when.timestamp()) * 10**9 if when else 0


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a request that got no complete answer raises: a connection refused, reset or timed out, a body cut."""
    import urllib3

    return (urllib3.exceptions.HTTPError, ConnectionError)


__all__ = ["ATTEMPTS", "FilesApi", "MAX_IN_FLIGHT", "RemoteFile"]
