"""The Trio shell serving ``GET /metrics`` (Prometheus text) for one node.

A deliberately small HTTP/1.1 responder: one request per connection (``Connection: close``),
request head capped at ``MAX_REQUEST_HEAD_BYTES`` and ``REQUEST_TIMEOUT_S``; ``/metrics`` ->
200 with the registry's text, any other path -> 404, any method but GET/HEAD -> 405.

What a scrape may cost the node, bounded:

* **one build for many scrapes.** ``ExpositionCache`` serves the text it built to every scrape
  for ``max_age_s`` seconds (the broker's ``metricsCacheSeconds``) after the build started,
  and scrapes that arrive while a build runs wait for that build instead of starting their
  own (also with ``max_age_s`` 0);
* **never long on the event loop.** A build is a generator (``cluster.metrics.Steps``) that
  ``run_steps`` runs ``BUILD_SLICE_S`` at a time, letting every other task run between two
  slices: a send's latency during a build grows by about one slice, not by the build;
* **few connections.** At most ``MAX_SCRAPE_CONNECTIONS`` connections are served at once; one
  more is closed as soon as it is accepted. A response must be sent within
  ``RESPONSE_TIMEOUT_S``.
* **a token, when set.** With a token (the broker's ``metricsToken``) only a request carrying
  ``Authorization: Bearer <token>`` gets the text (compared in constant time); any other gets
  401 before anything is built.
"""

from __future__ import annotations

import hmac
import time
import urllib.request
from collections.abc import Callable
from typing import Any, Final

import trio

from .logging import get_logger
from .metrics import CONTENT_TYPE, Steps

#: Longest request head read before answering 431.
MAX_REQUEST_HEAD_BYTES: Final = 8 * 1024
#: A client must send its request head within this long.
REQUEST_TIMEOUT_S: Final = 5.0
#: A response must be sent within this long (a reader that stalls is dropped).
RESPONSE_TIMEOUT_S: Final = 10.0
#: Connections served at once; more are closed as soon as accepted.
MAX_SCRAPE_CONNECTIONS: Final = 64
#: Longest the event loop runs a build without letting other tasks run.
BUILD_SLICE_S: Final = 0.002
METRICS_PATH: Final = "/metrics"
_RECEIVE_BYTES: Final = 4096


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
              *, head_only: bool = False, extra: str = "") -> tuple[bytes, ...]:
    """The response's head and body, to send one after the other."""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    ).encode("ascii")
    return (head,) if head_only else (head, body)


async def run_steps(steps: Steps, slice_s: float = BUILD_SLICE_S) -> str:
    """Run a build in steps on this event loop, ``slice_s`` at a time -> its text."""
    clock = time.perf_counter
    until = clock() + slice_s
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return str(stop.value)
        if clock() >= until:
            await trio.lowlevel.checkpoint()  # what is ready runs now (sockets polled too)
            until = clock() + slice_s


class ExpositionCache:
    """The last text built, shared by scrapes (see the module's doc)."""

    def __init__(self, build: Callable[[], Steps], max_age_s: Callable[[], float]) -> None:
        self._build = build
        self._max_age_s = max_age_s
        self._body: bytes | None = None
        self._started = -float("inf")  # when the build of ``_body`` started (trio clock)
        self._generation = 0
        self._building: trio.Event | None = None

    async def get(self) -> bytes:
        waited_for = -1
        while True:
            body = self._body
            if body is not None and (
                self._generation == waited_for
                or trio.current_time() - self._started < self._max_age_s()
            ):
                return body
            if self._building is None:
                return await self._rebuild()
            waited_for = self._generation + 1
            await self._building.wait()  # (a failed build: the loop tries again)

    async def _rebuild(self) -> bytes:
        done = self._building = trio.Event()
        started = trio.current_time()
        try:
            body = (await run_steps(self._build())).encode("utf-8")
            self._body, self._started = body, started
            self._generation += 1
            return body
        finally:
            self._building = None
            done.set()


def _header(head: bytes, name: bytes) -> bytes | None:
    """The value of the first header called ``name`` (lower case) in a request head."""
    for line in head.split(b"\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip()
    return None


def _authorized(head: bytes, token: str) -> bool:
    if not token:
        return True
    got = _header(head, b"authorization") or b""
    scheme, _, credential = got.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(
        credential.strip(), token.encode("utf-8")
    )


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    data = bytearray()
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_REQUEST_HEAD_BYTES:
            return None
        chunk = await stream.receive_some(_RECEIVE_BYTES)
        if not chunk:
            break
        data += chunk
    return bytes(data)


async def _answer(
    head: bytes | None, cache: ExpositionCache, token: str, log: Any
) -> tuple[bytes, ...]:
    """The response to one request head."""
    if head is None:
        return _response("431 Request Header Fields Too Large", b"")
    line = head.split(b"\n", 1)[0].decode("latin-1").strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response("400 Bad Request", b"bad request line\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", b"GET only\n")
    if target != METRICS_PATH:
        return _response("404 Not Found", b"try /metrics\n")
    if not _authorized(head, token):
        return _response("401 Unauthorized", b"a bearer token is required\n",
                         extra='WWW-Authenticate: Bearer realm="metrics"\r\n')
    try:
        body = await cache.get()
    except Exception as exc:  # a broken figure must not stop the listener (nor the node)
        log.error("metrics build failed", error=repr(exc))
        return _response("500 Internal Server Error", b"metrics build failed\n")
    return _response("200 OK", body, CONTENT_TYPE, head_only=method == "HEAD")


async def _handle(
    stream: trio.SocketStream, cache: ExpositionCache, token: str, log: Any
) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT_S) as scope:
            head = await _read_head(stream)
        if scope.cancelled_caught:
            return
        response = await _answer(head, cache, token, log)
        with trio.move_on_after(RESPONSE_TIMEOUT_S):
            for part in response:  # (the shared text is sent as it is, not copied)
                await stream.send_all(part)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return
    finally:
        await stream.aclose()


def _at_once(render: Callable[[], str]) -> Callable[[], Steps]:
    def build() -> Steps:
        return render()
        yield  # (a generator that returns at once)

    return build


async def serve_metrics(
    render: Callable[[], str] | None = None,
    *,
    build: Callable[[], Steps] | None = None,
    max_age_s: Callable[[], float] = lambda: 0.0,
    token: Callable[[], str] = lambda: "",
    host: str = "127.0.0.1",
    port: int = 0,
    node: str = "metrics",
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the text of ``build()`` (a build in steps; or of ``render()``, cheap and at once)
    at ``http://host:port/metrics`` until cancelled (port 0: ephemeral). ``max_age_s()`` and
    ``token()`` are read per scrape (the broker's live ``metricsCacheSeconds`` and
    ``metricsToken``)."""
    steps = build if build is not None else _at_once(render or (lambda: ""))
    cache = ExpositionCache(steps, max_age_s)
    log = get_logger(node=node)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen for metrics on {host}:{port}: {exc.strerror}"
                      ) from None
    sock = listeners[0].socket
    name = sock.getsockname()
    bound = (str(name[0]), int(name[1]))
    log.info("metrics listening", address=f"{bound[0]}:{bound[1]}", path=METRICS_PATH)
    active = 0

    async def handler(stream: trio.SocketStream) -> None:
        nonlocal active
        if active >= MAX_SCRAPE_CONNECTIONS:
            await stream.aclose()  # (as the remoting ports do past serverMaxConnections)
            return
        active += 1
        try:
            await _handle(stream, cache, token(), log)
        finally:
            active -= 1

    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        await trio.serve_listeners(handler, listeners, handler_nursery=nursery)


def fetch_metrics(addr: str, timeout_s: float = REQUEST_TIMEOUT_S, *, token: str = "") -> str:
    """Blocking GET of ``http://addr/metrics`` (for the CLI); OSError when unreachable or
    refused (``urllib.error.HTTPError``: 401 without the right ``token``)."""
    request = urllib.request.Request(f"http://{addr}{METRICS_PATH}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:
        return resp.read().decode("utf-8")
