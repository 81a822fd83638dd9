"""A Databricks Files API server over a local folder, for tests and benchmarks.

`FilesApiServer(root)` serves the folder `root` as `/Volumes` on
127.0.0.1 with the endpoints `databricks-sdk` speaks (see README.md beside
this file): `GET` (with `Range`) / `HEAD` / `PUT ?overwrite=` / `DELETE` on
`/api/2.0/fs/files{path}`, and a paged `GET` / `HEAD` / `PUT` / `DELETE` on
`/api/2.0/fs/directories{path}`. Requests need `Authorization: Bearer
<token>`. Latency, bandwidth per response and faults (bursts of 429 / 503,
connections reset mid-body, bodies shorter than their `Content-Length`) are
set on the running server, and every request is traced for tests to count.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FILES = "/api/2.0/fs/files"
DIRECTORIES = "/api/2.0/fs/directories"
MAX_PAGE = 1000
_CHUNK = 64 << 10


@dataclass
class Request:
    """One request the server answered: what was asked and what went back."""

    method: str
    path: str  # the volume path, `/Volumes/...` (or the endpoint's path for any other URL)
    endpoint: str  # "files", "directories" or "other"
    range: str | None
    status: int
    sent: int  # body bytes written


@dataclass
class Faults:
    """What goes wrong, set on a running server (`server.faults`); counts are used up as requests meet them.

    Attributes:
        latency_s: added before each answer (a round trip to the service).
        mbps: bandwidth of each response body in MB/s (0: unlimited).
        status: the next `count` matching requests are answered with this status (429 or 503) and
            `Retry-After: retry_after`.
        resets: the next `resets` matching `GET`s of a file send `reset_after` bytes of the body,
            then reset the connection.
        shorts: the next `shorts` matching `GET`s of a file send `short_by` bytes fewer than their
            `Content-Length` promises, then close the connection.
        match: the faults above only meet requests whose volume path contains this string.
    """

    latency_s: float = 0.0
    mbps: float = 0.0
    status: int = 503
    count: int = 0
    retry_after: float | None = 0.05
    resets: int = 0
    reset_after: int = 1000
    shorts: int = 0
    short_by: int = 1
    match: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, kind: str, path: str) -> bool:
        """Use up one fault of `kind` ("count", "resets" or "shorts") if one is left for `path`."""
        with self._lock:
            if self.match not in path or getattr(self, kind) <= 0:
                return False
            setattr(self, kind, getattr(self, kind) - 1)
            return True


class FilesApiServer:
    """A threaded Files API server on 127.0.0.1 serving `root` as `/Volumes`.

    Args:
        root: the local folder that stands for `/Volumes`.
        token: the personal access token requests must bear; any other gets 403, none 401.
        page_size: the most entries a listing page holds (the service's own bound is 1,000).

    Use as a context manager, or `start()` / `stop()`. `host` is what
    `WorkspaceClient(host=..., token=...)` takes; `trace` holds a `Request`
    per answered request (`clear_trace()` empties it); `peak_unanswered` is
    the most requests that waited for their answer at once, what a client's
    bound on its requests in flight keeps down; `connections` counts the
    connections clients opened (a client that reuses them opens few).
    """

    def __init__(self, root: str | os.PathLike, *, token: str = "dapi-test", page_size: int = MAX_PAGE) -> None:
        self.root = os.path.abspath(root)
        self.token = token
        self.page_size = min(page_size, MAX_PAGE)
        self.faults = Faults()
        self.trace: list[Request] = []
        self.peak_unanswered = 0
        self.connections = 0
        self._unanswered = 0
        self._trace_lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        assert self._httpd is not None, "start() the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> FilesApiServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.request_queue_size = 256
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="files-api",
                                        daemon=True)  # polled often: a test's server stops at once
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FilesApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def clear_trace(self) -> None:
        with self._trace_lock:
            self.trace.clear()

    def requests(self, method: str | None = None, endpoint: str | None = None) -> list[Request]:
        """The traced requests, of one method and endpoint when given."""
        with self._trace_lock:
            return [r for r in self.trace if (method is None or r.method == method)
                    and (endpoint is None or r.endpoint == endpoint)]

    def _record(self, request: Request) -> None:
        with self._trace_lock:
            self.trace.append(request)
            self._unanswered += 1
            self.peak_unanswered = max(self.peak_unanswered, self._unanswered)

    def _answered(self) -> None:
        with self._trace_lock:
            self._unanswered -= 1


class _Handler(BaseHTTPRequestHandler):
    owner: FilesApiServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client's pool reuses connections, as against the service
    # Headers and body go out in separate writes: with Nagle's algorithm on, the body's last segment waits for
    # the client's delayed ACK of the headers (40 ms on Linux), an answer time the service does not have.
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.owner._trace_lock:
            self.owner.connections += 1

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        endpoint, vpath = "other", url.path
        for prefix, name in ((FILES, "files"), (DIRECTORIES, "directories")):
            if url.path.startswith(prefix + "/"):
                endpoint, vpath = name, urllib.parse.unquote(url.path[len(prefix):])
        # Traced before it is answered, and filled in as it is: a client that has its answer finds it there.
        self._request = Request(method, vpath, endpoint, self.headers.get("Range"), 0, 0)
        self.owner._record(self._request)
        self._waiting = True
        try:
            body = self._body() if method in ("PUT", "POST") else b""
            faults = self.owner.faults
            if faults.latency_s:
                time.sleep(faults.latency_s)
            if url.path == "/.well-known/databricks-config":  # the SDK's discovery when it is configured
                return self._json(200, {"oidc_endpoint": f"http://127.0.0.1:{self.server.server_address[1]}/oidc"})
            if endpoint == "other":  # create-download-url, endpoint discovery: the plain GET serves downloads
                return self._error(404, "NOT_FOUND", f"no such endpoint: {method} {url.path}")
            auth = self.headers.get("Authorization")
            if auth is None:
                return self._error(401, "UNAUTHENTICATED", "no credentials were sent")
            if auth != f"Bearer {self.owner.token}":
                return self._error(403, "PERMISSION_DENIED", "invalid access token")
            if faults.take("count", vpath):
                headers = {} if faults.retry_after is None else {"Retry-After": f"{faults.retry_after:g}"}
                code = "TOO_MANY_REQUESTS" if faults.status == 429 else "TEMPORARILY_UNAVAILABLE"
                return self._error(faults.status, code, "try again later", headers)
            local = self._local(vpath)
            if local is None:
                return self._error(400, "INVALID_PARAMETER_VALUE", f"{vpath} is not a path under /Volumes")
            serve = getattr(self, f"_{'file' if endpoint == 'files' else 'dir'}_{method.lower()}", None)
            if serve is None:
                return self._error(405, "BAD_REQUEST", f"{method} is not served on {endpoint}")
            serve(vpath, local, query, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self._answer()

    # --- files ---------------------------------------------------------------------------------

    def _file_head(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        st = _stat_file(local)
        if st is None:
            return self._error(404, "NOT_FOUND", f"{vpath} does not exist", head=True)
        self._start(200, {"Content-Length": str(st.st_size), "Content-Type": "application/octet-stream",
                          "Last-Modified": _http_date(st.st_mtime)})

    def _file_get(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        st = _stat_file(local)
        if st is None:
            return self._error(404, "NOT_FOUND", f"{vpath} does not exist")
        unmodified = self.headers.get("If-Unmodified-Since")
        if unmodified and int(st.st_mtime) > email.utils.parsedate_to_datetime(unmodified).timestamp():
            return self._error(412, "PRECONDITION_FAILED", f"{vpath} was modified since {unmodified}")
        size, start, stop, status = st.st_size, 0, st.st_size, 200
        spec = self.headers.get("Range")
        headers = {"Content-Type": "application/octet-stream", "Last-Modified": _http_date(st.st_mtime),
                   "Accept-Ranges": "bytes"}
        if spec:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", spec.strip())
            if m is None or not (m.group(1) or m.group(2)):
                return self._error(400, "INVALID_PARAMETER_VALUE", f"unreadable Range: {spec}")
            if m.group(1):
                start, stop = int(m.group(1)), min(size, int(m.group(2)) + 1) if m.group(2) else size
            else:  # a suffix: the last N bytes
                start, stop = max(0, size - int(m.group(2))), size
            if start >= size or stop <= start:
                return self._error(416, "INVALID_PARAMETER_VALUE", f"Range {spec} of {size} bytes",
                                   {"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        faults = self.owner.faults
        length = stop - start
        reset = faults.take("resets", vpath)
        short = not reset and faults.take("shorts", vpath)
        send = min(length, faults.reset_after) if reset else max(0, length - faults.short_by) if short else length
        headers["Content-Length"] = str(length)
        self._start(status, headers)
        with open(local, "rb") as f:
            f.seek(start)
            self._stream(f, send)
        if reset:
            self._reset()
        elif short:
            self.close_connection = True
            self.wfile.flush()

    def _file_put(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        overwrite = query.get("overwrite", "false").lower() == "true"
        if os.path.isdir(local):
            return self._error(409, "ALREADY_EXISTS", f"{vpath} is a directory")
        if os.path.exists(local) and not overwrite:
            return self._error(409, "ALREADY_EXISTS", f"{vpath} already exists")
        os.makedirs(os.path.dirname(local), exist_ok=True)
        tmp = f"{os.path.dirname(local)}/.{os.path.basename(local)}.{threading.get_ident()}.upload"
        with open(tmp, "wb") as f:
            f.write(body)
        os.replace(tmp, local)  # whole or not at all, as an object store's PUT
        self._start(204, {"Content-Length": "0"})

    def _file_delete(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        if _stat_file(local) is None:
            return self._error(404, "NOT_FOUND", f"{vpath} does not exist")
        os.unlink(local)
        self._start(204, {"Content-Length": "0"})

    # --- directories ---------------------------------------------------------------------------

    def _dir_head(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        if not os.path.isdir(local):
            return self._error(404, "NOT_FOUND", f"{vpath} does not exist", head=True)
        self._start(200, {"Content-Length": "0"})

    def _dir_get(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        if not os.path.isdir(local):
            return self._error(404, "NOT_FOUND", f"The directory being accessed is not found: {vpath}")
        size = min(int(query.get("page_size") or MAX_PAGE), self.owner.page_size)
        after = query.get("page_token", "")
        names = sorted(n for n in os.listdir(local) if not n.endswith(".upload") and n > after)
        page, contents = names[:size], []
        for name in page:
            try:
                st = os.stat(f"{local}/{name}")
            except FileNotFoundError:
                continue
            entry = {"path": f"{vpath.rstrip('/')}/{name}", "name": name, "is_directory": os.path.isdir(f"{local}/{name}")}
            if not entry["is_directory"]:
                entry.update(file_size=st.st_size, last_modified=int(st.st_mtime * 1000))
            contents.append(entry)
        out: dict = {"contents": contents} if contents else {}
        if len(names) > size:
            out["next_page_token"] = page[-1]
        self._json(200, out)

    def _dir_put(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        os.makedirs(local, exist_ok=True)
        self._start(204, {"Content-Length": "0"})

    def _dir_delete(self, vpath: str, local: str, query: dict, body: bytes) -> None:
        if not os.path.isdir(local):
            return self._error(404, "NOT_FOUND", f"{vpath} does not exist")
        if os.listdir(local):
            return self._error(400, "DIRECTORY_NOT_EMPTY", f"{vpath} is not empty")
        os.rmdir(local)
        self._start(204, {"Content-Length": "0"})

    # --- plumbing ------------------------------------------------------------------------------

    def _local(self, vpath: str) -> str | None:
        parts = vpath.rstrip("/").split("/")
        if len(parts) < 2 or parts[0] != "" or parts[1] != "Volumes" or ".." in parts:
            return None
        return self.owner.root + "/".join([""] + parts[2:])

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self) -> None:
        """Count the request answered, once: when its status line goes out, or when it is given up."""
        if self._waiting:
            self._waiting = False
            self.owner._answered()

    def _start(self, status: int, headers: dict[str, str]) -> None:
        self._request.status = status
        self._answer()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _json(self, status: int, obj: dict, headers: dict[str, str] | None = None, head: bool = False) -> None:
        data = json.dumps(obj).encode()
        self._start(status, {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})})
        if not head:
            self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
               head: bool = False) -> None:
        self._json(status, {"error_code": code, "message": message}, headers, head or self.command == "HEAD")

    def _stream(self, f, n: int) -> None:
        """Send `n` bytes of `f`, at the set bandwidth."""
        mbps = self.owner.faults.mbps
        begun, sent = time.monotonic(), 0
        while sent < n:
            chunk = f.read(min(_CHUNK, n - sent))
            if not chunk:
                break
            sent += len(chunk)
            self._request.sent = sent
            self.wfile.write(chunk)
            if mbps:
                ahead = begun + sent / (mbps * 1e6) - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)

    def _reset(self) -> None:
        """Reset the connection (RST, not FIN): what a load balancer that drops a stream does.

        After a pause: a reset discards what the client has not read yet, and the bytes sent are meant
        to arrive.
        """
        self.wfile.flush()
        time.sleep(0.2)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


def _stat_file(local: str) -> os.stat_result | None:
    try:
        st = os.stat(local)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return None if os.path.isdir(local) else st


def _http_date(mtime: float) -> str:
    return email.utils.formatdate(mtime, usegmt=True)


__all__ = ["DIRECTORIES", "FILES", "Faults", "FilesApiServer", "Request"]
