"""Live nodes for the fuzz tests, whose Hypothesis rules and raw sockets are synchronous: the
nodes run on a Trio loop in a background thread (``LoopThread``), and ``connect`` opens a
blocking socket to one of them."""

from __future__ import annotations

import contextlib
import socket
import threading

import trio


class LoopThread:
    """A subclass's ``serve`` starts its nodes on the loop and, once they are up, awaits
    ``serving()``: that returns when the test calls ``stop``, and ``serve`` then stops them.
    What the loop raised is kept in ``error`` (and ``start`` fails with it)."""

    def __init__(self, name: str, *, start_timeout_s: float, what: str = "nodes") -> None:
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.start_timeout_s = start_timeout_s
        self._what = what
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    async def serve(self) -> None:
        raise NotImplementedError

    async def serving(self) -> None:
        """Say the nodes are up, then wait for ``stop``."""
        assert self._stop is not None
        self.ready.set()
        await self._stop.wait()

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    async def _run(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        await self.serve()

    def start(self) -> None:
        self._thread.start()
        if not self.ready.wait(self.start_timeout_s) or self.error is not None:
            raise RuntimeError(f"{self._what} did not start: {self.error!r}")

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(self.start_timeout_s)


def connect(addr: str, timeout: float) -> socket.socket:
    """A blocking connection to ``host:port``, every call on it bounded by ``timeout``."""
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.settimeout(timeout)
    return sock
