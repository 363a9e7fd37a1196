"""HTTP Range requests to the Hub through huggingface_hub's session, bounded in time and checked.

huggingface_hub downloads whole files; npbert asks for byte ranges of the weights file, with
huggingface_hub's session (its proxies, certificates and user agent) and headers (the token).
That session is requests' in huggingface_hub 0.x, httpx's in 1.x and httpx2's in 2.x; the
three differ in how a response is streamed and in what they raise, and `_stream` and
`network_errors` are the only places that know it.

Every response is held to what was asked: a 206 whose Content-Range is exactly the range
asked for, with that many bytes, no more and no fewer. The time is bounded twice: the HTTP
client's own timeout between two network reads (a stalled server), and a floor on the speed
over each such interval (a server that trickles a byte at a time never lets the first fire).
"""

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from npbert.errors import InputError

LOW_SPEED = 1024  # bytes/s: slower than this over a whole timeout interval is given up
READ_SIZE = 1 << 20  # most bytes taken from one network read
RETRY_STATUSES = (429, 500, 502, 503, 504)  # a busy or restarting server: may pass
RETRY_WAITS = (1, 2, 4)  # seconds before each retry, unless Retry-After says
LONGEST_WAIT = 30  # seconds: a Retry-After longer than this is an error now


class RangeIgnored(Exception):
    """The server answered a Range request with something other than the part (200, not 206):
    the whole file, or a page (a proxy's sign-in page). Its text: the status and Content-Type."""


def get_range(url: str, start: int, end: int, *, token, timeout: float, progress=None):
    """Bytes [start, end) of the file at `url` as a uint8 array, the file's size and its
    ETag ("" where the server sends none), which tells one version of the file from another.

    Raises RangeIgnored on a 200, huggingface_hub's errors on an error status (after
    RETRY_WAITS, for the statuses that may pass), the client's network errors
    (network_errors()) when it is cut short or stalls for `timeout` seconds, and InputError
    when the response is not exactly what was asked or comes too slowly. `progress` (a tqdm
    bar) is advanced by the bytes received.
    """
    from huggingface_hub.utils import HfHubHTTPError

    # huggingface_hub's http_backoff retries too, but its streaming form differs between
    # its versions, and it would also retry a stalled read, which `timeout` is to end.
    for wait in (*RETRY_WAITS, None):
        try:
            return _get_range_once(url, start, end, token, timeout, progress)
        except HfHubHTTPError as error:
            pause = _retry_pause(error.response, wait)
            if pause is None:
                raise
            time.sleep(pause)


def _retry_pause(response, wait: float | None) -> float | None:
    """Seconds to wait before asking again, or None: not to ask again."""
    if wait is None or response is None or response.status_code not in RETRY_STATUSES:
        return None
    after = response.headers.get("Retry-After", "")
    if not after.isdigit():  # absent, or an HTTP date: the usual back-off
        return wait
    return int(after) if int(after) <= LONGEST_WAIT else None


def _get_range_once(url, start, end, token, timeout, progress):
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    headers = {
        **build_hf_headers(token=token),
        "Range": f"bytes={start}-{end - 1}",
        "Accept-Encoding": "identity",  # the bytes as stored, so lengths are what was asked
    }
    with _stream(url, headers, timeout) as (response, chunks):
        hf_raise_for_status(response)
        if response.status_code != 206:
            kind = response.headers.get("Content-Type", "no Content-Type")
            raise RangeIgnored(f"{response.status_code}, {kind}")
        size = _checked_content_range(response.headers, start, end, url)
        body = _read_body(chunks, end - start, timeout, url, progress)
        return body, size, response.headers.get("ETag", "")


@contextmanager
def _stream(url: str, headers: dict, timeout: float):
    """(response, iterator over the body's bytes as each network read brings them)."""
    from huggingface_hub import get_session

    session = get_session()
    if _uses_requests(session):  # huggingface_hub 0.x. requests' chunked readers wait to
        # fill each chunk, and a trickle fills it slowly enough to never time out; read1
        # returns what one network read brings.
        with session.get(url, headers=headers, timeout=timeout, stream=True) as response:
            yield response, iter(lambda: response.raw.read1(READ_SIZE), b"")
    else:  # httpx (huggingface_hub 1.x) or httpx2 (2.x): iter_raw yields each network read
        with session.stream(
            "GET", url, headers=headers, timeout=timeout, follow_redirects=True
        ) as response:
            yield response, response.iter_raw()


def network_errors() -> tuple[type[Exception], ...]:
    """The exceptions of the HTTP client huggingface_hub uses for a request that got no
    usable answer (a connection refused, reset, timed out or cut short, redirects in a loop):
    requests' and urllib3's (0.x), httpx's (1.x), httpx2's (2.x)."""
    from huggingface_hub import get_session

    session = get_session()
    client = _library(session)
    if _uses_requests(session):
        import urllib3  # read1 raises urllib3's own errors, not requests'

        return (client.RequestException, urllib3.exceptions.HTTPError)
    return (client.RequestError,)  # TransportError's base, with TooManyRedirects


def _library(session):
    """The module of the HTTP library that made the session: requests, httpx or httpx2."""
    return sys.modules[type(session).__module__.partition(".")[0]]


def _uses_requests(session) -> bool:
    return _library(session).__name__ == "requests"


def _checked_content_range(headers, start: int, end: int, url: str) -> int:
    """The file's size from a 206's Content-Range, which must be the range asked for."""
    value = headers.get("Content-Range", "")
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", value.strip())
    if match and int(match[1]) == start and int(match[2]) + 1 == int(match[3]) < end:
        # the range cut at the file's end, as HTTP has it: the file is shorter than asked
        raise InputError(
            f"{url}: the file is {match[3]} bytes long, and bytes {start}-{end - 1} were "
            "asked for: it is too short to be what its name says"
        )
    if not match or (int(match[1]), int(match[2]) + 1) != (start, end):
        raise InputError(
            f"{url}: asked for bytes {start}-{end - 1}, the server answered Content-Range "
            f"{value!r}; nothing was cached, try again"
        )
    length = headers.get("Content-Length")
    if length is not None and length != str(end - start):
        raise InputError(
            f"{url}: asked for {end - start} bytes, the server announced Content-Length "
            f"{length}; nothing was cached, try again"
        )
    return int(match[3])


def _read_body(chunks: Iterator[bytes], length: int, timeout: float, url: str, progress):
    """Exactly `length` bytes from `chunks`, given up on when fewer than LOW_SPEED bytes a
    second arrive over `timeout` seconds."""
    body = np.empty(length, np.uint8)
    filled = 0
    interval_start, interval_bytes = time.monotonic(), 0
    for chunk in chunks:
        if filled + len(chunk) > length:
            raise InputError(
                f"{url}: asked for {length} bytes, the server sent more; nothing was cached"
            )
        body[filled : filled + len(chunk)] = np.frombuffer(chunk, np.uint8)
        filled += len(chunk)
        interval_bytes += len(chunk)
        if progress is not None:
            progress.update(len(chunk))
        elapsed = time.monotonic() - interval_start
        if elapsed >= timeout:
            if interval_bytes < LOW_SPEED * elapsed:
                raise InputError(
                    f"{url}: {interval_bytes} bytes in {elapsed:.1f} s, slower than "
                    f"{LOW_SPEED} bytes/s; nothing was cached, try again"
                )
            interval_start, interval_bytes = time.monotonic(), 0
    if filled != length:
        raise InputError(
            f"{url}: asked for {length} bytes, the server sent {filled}; nothing was cached, "
            "try again"
        )
    return body
