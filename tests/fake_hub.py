"""A Hub-compatible HTTP server on 127.0.0.1 serving checkpoint directories, for the tests.

It answers what huggingface_hub asks of the Hub:
    GET  /api/models/{repo}[/revision/{rev}]         model info: sha and file list
    HEAD /{repo}/resolve/{rev}/{file}                X-Repo-Commit, ETag, Content-Length
    GET  /{repo}/resolve/{rev}/{file}                the file, or 206 for a Range request
with 404 + X-Error-Code for unknown repos, revisions and files, and 401 for a gated repo
without the right token. It counts the requests and the body bytes it sends, can be told to
ignore Range, and injects faults (FAULTS) into the requests a Fault matches. A fault that holds
a connection holds it until `release` is set or HOLD seconds pass, whichever comes first.
"""

import hashlib
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN = "hf_fake_token_for_tests"
REVOKED = "hf_revoked_token_for_tests"  # a token the Hub does not know: 401 for every request
HOLD = 60.0  # seconds a stalled or trickling answer lasts at most
TRICKLE = 0.05  # seconds between two bytes of a trickle
# What a fault does to the response of a request it matches:
FAULTS = {
    "stall": "read the request and never answer",
    "stall_body": "send the headers and half the body, then nothing",
    "trickle": "send the headers, then the body a byte at a time",
    "reset": "send half the body, then reset the connection (RST)",
    "short": "announce the whole body, send half, then close",
    "wrong_range": "send another range's bytes, with that range's Content-Range",
    "no_content_range": "answer 206 without Content-Range",
    "wrong_length": "announce and send one byte more than asked, Content-Range as asked",
    "wrong_size": "say in Content-Range that the file is a byte longer",
    "error_503": "answer 503 Service Unavailable",
    "error_429": "answer 429 Too Many Requests",
    "error_403": "answer 403 Forbidden",
    "html_200": "answer 200 with an HTML page (a login page, a web server at the wrong address)",
    "list_200": "answer 200 with JSON that is not an object: []",
    "redirect_loop": "answer 302 Found, to the address asked for",
    "changed_etag": "answer with another ETag, as for a file replaced since the last request",
    "no_etag": "answer without an ETag header (a proxy that strips it)",
    "weak_etag": 'answer with the file\'s ETag marked weak, W/"..."',
    "no_commit": "answer without an X-Repo-Commit header",
    "path_commit": "answer with X-Repo-Commit ../../outside, a path, not a commit",
    "no_revision": "answer 404 RevisionNotFound, as for a repo without the branch asked for",
}


@dataclass
class Fault:
    kind: str  # a key of FAULTS
    matches: Callable[[str, str, str], bool]  # (method, path, Range header) -> applies
    times: int = 1  # requests it applies to, then it is spent


@dataclass
class Repo:
    directory: Path
    sha: str
    tags: tuple[str, ...] = ()
    gated: bool = False

    def commit(self, revision: str) -> str | None:
        return self.sha if revision in ("main", self.sha, *self.tags) else None


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, range
    bytes_sent: int = 0
    ignore_range: bool = False
    faults: list[Fault] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    etags: dict[Path, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo_id: str, directory: Path, *, tags=(), gated=False) -> str:
        digest = hashlib.sha1(repo_id.encode())
        for path in sorted(p for p in directory.iterdir() if p.is_file()):
            digest.update(path.name.encode() + self.etag(path).encode())
        self.repos[repo_id] = Repo(directory, digest.hexdigest(), tuple(tags), gated)
        return self.repos[repo_id].sha

    def etag(self, path: Path) -> str:
        """The file's sha256, as the Hub's ETag for LFS files, computed once per file."""
        if path not in self.etags:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            self.etags[path] = f'"{digest.hexdigest()}"'
        return self.etags[path]

    def reset_counts(self) -> None:
        with self.lock:
            self.requests.clear()
            self.bytes_sent = 0

    def take_fault(self, method: str, path: str, wanted: str) -> str | None:
        """The kind of the first unspent fault matching this request, spending one use."""
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.matches(method, path, wanted):
                    fault.times -= 1
                    return fault.kind
        return None


def make_handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def do_HEAD(self):
            self.route(body=False)

        def do_GET(self):
            self.route(body=True)

        def route(self, body: bool):
            wanted = self.headers.get("Range", "")
            with hub.lock:
                hub.requests.append((self.command, self.path, wanted))
            path = self.path.split("?")[0]
            self.fault = hub.take_fault(self.command, path, wanted)
            if self.fault == "stall":
                hub.release.wait(HOLD)
                self.close_connection = True
                return
            if self.headers.get("Authorization") == f"Bearer {REVOKED}":  # the Hub's answer
                return self.error(401, None, "Invalid credentials in Authorization header")
            if self.fault == "error_503":
                return self.error(503, "ServiceUnavailable", "injected fault")
            if self.fault == "error_403":
                return self.error(403, None, "injected fault")
            if self.fault == "error_429":
                return self.error(429, None, "injected fault", retry_after=1)
            if self.fault == "no_revision":
                return self.error(404, "RevisionNotFound", "Invalid rev id")
            if self.fault == "redirect_loop":
                return self.send(302, b"", {"Location": self.path}, body)
            if self.fault in ("html_200", "list_200"):
                page = b"<html>sign in</html>" if self.fault == "html_200" else b"[]"
                return self.send(200, page, {"Content-Type": "text/html"}, body)
            if path.startswith("/api/models/"):
                return self.model_info(path.removeprefix("/api/models/"))
            match = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
            if not match:
                return self.error(404, "EntryNotFound", "no such route")
            self.file(*match.groups(), body=body)

        def repo(self, repo_id: str) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self.error(404, "RepoNotFound", "Repository not found")
            elif repo.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.error(401, "GatedRepo", f"Access to model {repo_id} is restricted.")
                return None
            return repo

        def model_info(self, rest: str):
            repo_id, _, revision = rest.partition("/revision/")
            repo = self.repo(repo_id)
            if repo is None:
                return
            commit = repo.commit(revision or "main")
            if commit is None:
                return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            files = sorted(p.name for p in repo.directory.iterdir() if p.is_file())
            info = {  # the fields the Hub always sends (huggingface_hub 0.x requires some)
                "id": repo_id,
                "modelId": repo_id,
                "sha": commit,
                "private": False,
                "gated": "auto" if repo.gated else False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": [{"rfilename": name} for name in files],
            }
            self.send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})

        def file(self, repo_id: str, revision: str, filename: str, body: bool):
            repo = self.repo(repo_id)
            if repo is None:
                return
            commit = repo.commit(revision)
            if commit is None:
                return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            path = repo.directory / filename
            if not path.is_file():
                return self.error(404, "EntryNotFound", f"{filename} does not exist", commit)
            size = path.stat().st_size
            etag = '"changed"' if self.fault == "changed_etag" else hub.etag(path)
            etag = f"W/{etag}" if self.fault == "weak_etag" else etag
            commit = "../../outside" if self.fault == "path_commit" else commit
            headers = {"X-Repo-Commit": commit, "ETag": etag, "Accept-Ranges": "bytes"}
            for name, fault in (("ETag", "no_etag"), ("X-Repo-Commit", "no_commit")):
                if self.fault == fault:
                    del headers[name]
            wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            start, end, status = 0, size, 200
            if wanted and not hub.ignore_range:
                start = int(wanted[1])
                end = min(int(wanted[2]) + 1 if wanted[2] else size, size)
                status = 206
                start, end, headers["Content-Range"] = self.ranged(start, end, size)
            with open(path, "rb") as f:  # only the bytes asked for: some files are large
                f.seek(start)
                self.send(
                    status, f.read(end - start) if body else b"", headers, body, length=end - start
                )

        def ranged(self, start: int, end: int, size: int) -> tuple[int, int, str]:
            """(start, end, Content-Range) to answer a Range request with, faults applied."""
            claimed = f"bytes {start}-{end - 1}/{size}"
            if self.fault == "wrong_range":
                shift = min(1024, start) or -min(1024, size - end)
                start, end = start - shift, end - shift
                claimed = f"bytes {start}-{end - 1}/{size}"
            elif self.fault == "wrong_length":
                end = min(end + 1, size)
            elif self.fault == "wrong_size":
                claimed = f"bytes {start}-{end - 1}/{size + 1}"
            return start, end, claimed

        def error(self, status: int, code: str | None, message: str, commit=None, retry_after=0):
            headers = {"X-Error-Message": message, "Content-Type": "application/json"}
            if code:
                headers["X-Error-Code"] = code
            if retry_after:
                headers["Retry-After"] = str(retry_after)
            if commit:
                headers["X-Repo-Commit"] = commit
            self.send(status, json.dumps({"error": message}).encode(), headers)

        def send(self, status: int, data: bytes, headers: dict, body=True, length=None):
            self.send_response(status)
            for key, value in headers.items():
                if not (key == "Content-Range" and self.fault == "no_content_range"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data) if length is None else length))
            self.end_headers()
            if not body:
                return
            try:
                self.send_body(data)
            except OSError:  # the client gave up: what a faulty answer is for
                self.close_connection = True

        def send_body(self, data: bytes):
            half = data[: len(data) // 2]
            if self.fault == "stall_body":
                self.write(half)
                hub.release.wait(HOLD)
                self.close_connection = True
            elif self.fault == "trickle":
                deadline = time.monotonic() + HOLD
                for i in range(len(data)):
                    if hub.release.wait(TRICKLE) or time.monotonic() > deadline:
                        break
                    self.write(data[i : i + 1])
                self.close_connection = True
            elif self.fault in ("reset", "short"):
                self.write(half)
                if self.fault == "reset":  # linger 0: close sends RST, not FIN
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                self.close_connection = True
            else:
                self.write(data)

        def write(self, data: bytes):
            self.wfile.write(data)
            self.wfile.flush()
            with hub.lock:
                hub.bytes_sent += len(data)

    return Handler


def serve(hub: FakeHub) -> ThreadingHTTPServer:
    """Start the server on a free loopback port in a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(hub))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
