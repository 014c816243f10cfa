"""The Trio shell serving ``GET /metrics`` (Prometheus text) for one node.

A deliberately small HTTP/1.1 responder: one request per connection (``Connection: close``),
request head capped at ``MAX_REQUEST_HEAD_BYTES`` and ``REQUEST_TIMEOUT_S``; ``/metrics`` ->
200 with the registry's text, any other path -> 404, any method but GET/HEAD -> 405.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Final

import trio

from rmq_cluster.cluster.logging import get_logger
from rmq_cluster.cluster.metrics import CONTENT_TYPE

#: Longest request head read before answering 431.
MAX_REQUEST_HEAD_BYTES: Final = 8 * 1024
#: A client must send its request head within this long.
REQUEST_TIMEOUT_S: Final = 5.0
METRICS_PATH: Final = "/metrics"
_RECEIVE_BYTES: Final = 4096


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
              *, head_only: bool = False) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    return head if head_only else head + body


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


async def _handle(stream: trio.SocketStream, render: Callable[[], str], log: object) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT_S) as scope:
            head = await _read_head(stream)
        if scope.cancelled_caught:
            return
        if head is None:
            await stream.send_all(_response("431 Request Header Fields Too Large", b""))
            return
        line = head.split(b"\n", 1)[0].decode("latin-1").strip()
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            await stream.send_all(_response("400 Bad Request", b"bad request line\n"))
            return
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            await stream.send_all(_response("405 Method Not Allowed", b"GET only\n"))
            return
        if target != METRICS_PATH:
            await stream.send_all(_response("404 Not Found", b"try /metrics\n"))
            return
        body = render().encode("utf-8")
        await stream.send_all(_response("200 OK", body, CONTENT_TYPE, head_only=method == "HEAD"))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return
    finally:
        await stream.aclose()


async def serve_metrics(
    render: Callable[[], str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    node: str = "metrics",
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``render()`` at ``http://host:port/metrics`` until cancelled (port 0: ephemeral)."""
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

    async def handler(stream: trio.SocketStream) -> None:
        await _handle(stream, render, log)

    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        await trio.serve_listeners(handler, listeners, handler_nursery=nursery)


def fetch_metrics(addr: str, timeout_s: float = REQUEST_TIMEOUT_S) -> str:
    """Blocking GET of ``http://addr/metrics`` (for the CLI); OSError when unreachable."""
    with urllib.request.urlopen(f"http://{addr}{METRICS_PATH}", timeout=timeout_s) as resp:
        return resp.read().decode("utf-8")
