"""A node's ``python -m`` entry: run it, print its boot line, stop on SIGTERM or SIGINT; and the
``NodeSupervisor`` every node's service tasks run under.

No failure leaves a half-alive process: a service task that raises (or ends while the node
runs) is logged with its name and reason and ends the whole node -- its listeners close, the
process exits with ``EXIT_SERVICE_FAILED``. Stopping (after a failure or a signal) has a
deadline: a teardown stuck past ``NODE_STOP_DEADLINE_S`` (a shielded wait that never ends)
exits the process at once with ``EXIT_STOP_STUCK`` instead of leaving it alive with its ports
closed.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

import trio

from .logging import get_logger

#: Young-generation threshold of the garbage collector in a node process (CPython's default is
#: 700 net container allocations). A broker keeps every in-flight request's objects alive until
#: it answers; on a SYNC_MASTER that is until the slave's ack (256 sends in flight = thousands
#: of objects), so the count kept crossing 700 and the collector walked those live objects
#: ~230 times per 100k sends (4x an ASYNC master; measured with gc.callbacks on bench.ha). At
#: 10k it runs a few times per 100k sends; the young generation stays a few MB at most.
GC_GEN0_THRESHOLD: Final = 10_000
#: Longest a node process may take to stop once a service failed or a stop signal came.
NODE_STOP_DEADLINE_S: Final = 30.0
#: Exit status of a node process that stopped because a service failed.
EXIT_SERVICE_FAILED: Final = 1
#: Exit status of a node process whose stop passed NODE_STOP_DEADLINE_S (forced exit).
EXIT_STOP_STUCK: Final = 3


class ServiceEnded(RuntimeError):
    """A service task returned while the node was running (it must run until cancelled)."""


class NodeSupervisor:
    """Runs a node's service tasks: ``spawn``/``start`` them through it. The first that fails
    is logged (``service failed``, its name, the error) and recorded in ``failure``; the error
    then ends the node (trio cancels every other task of the node). With ``hard_exit`` (a
    node process: ``os._exit``), a failure or a stop starts a watchdog that ends the process
    if the stop does not finish within ``stop_deadline_s``. Embedded nodes (tests) pass no
    ``hard_exit``: the failure just propagates."""

    def __init__(
        self,
        *,
        node: str,
        role: str,
        hard_exit: Callable[[int], Any] | None = None,
        stop_deadline_s: float | None = None,
    ) -> None:
        self.log = get_logger(node=node, role=role)
        self.hard_exit = hard_exit
        #: None: NODE_STOP_DEADLINE_S
        self.stop_deadline_s = NODE_STOP_DEADLINE_S if stop_deadline_s is None else stop_deadline_s
        #: "<service>: <error>" of the first failure, None while all is well
        self.failure: str | None = None
        self._watchdog: threading.Timer | None = None

    # ------------------------------------------------------------------ running services

    def spawn(self, nursery: trio.Nursery, name: str, fn: Callable[..., Any], *args: Any) -> None:
        nursery.start_soon(functools.partial(self.guard, name, fn, *args), name=name)

    async def start(
        self, nursery: trio.Nursery, name: str, fn: Callable[..., Any], *args: Any
    ) -> Any:
        return await nursery.start(functools.partial(self._guard_start, name, fn, args), name=name)

    async def guard(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run one service: its failure (or its end while not cancelled) fails the node."""
        try:
            await fn(*args, **kwargs)
            await trio.lowlevel.checkpoint_if_cancelled()  # ended by a stop: fine
        except Exception as exc:
            self.fail(name, exc)
            raise
        ended = ServiceEnded(f"{name} ended while the node was running")
        self.fail(name, ended)
        raise ended

    async def _guard_start(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], *,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self.guard(name, fn, *args, task_status=task_status)

    def fail(self, name: str, exc: BaseException) -> None:
        """Record and log the node's first failure; start the stop deadline."""
        if self.failure is not None:
            return
        self.failure = f"{name}: {exc!r}"
        self.log.error("service failed, stopping the node", service=name, error=repr(exc),
                       exc_info=exc)
        self.arm()

    # ------------------------------------------------------------------ stop deadline

    def arm(self) -> None:
        """Start the stop deadline (once; only with ``hard_exit``)."""
        if self.hard_exit is None or self._watchdog is not None:
            return
        timer = threading.Timer(self.stop_deadline_s, self._stuck)
        timer.daemon = True
        self._watchdog = timer
        timer.start()

    def disarm(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()

    def _stuck(self) -> None:  # (in the watchdog thread)
        self.log.error("node did not stop in time, exiting now",
                       deadline_s=self.stop_deadline_s, failure=self.failure)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        assert self.hard_exit is not None
        self.hard_exit(EXIT_STOP_STUCK)


async def serve_until_signal(
    start: Callable[..., Any],
    boot_line: Callable[[], str],
    *,
    node: str,
    role: str,
    supervisor: NodeSupervisor | None = None,
) -> int:
    """``nursery.start(start)``; once it reports ready, print ``boot_line()`` (what RocketMQ's
    scripts and our supervisor wait for); on SIGTERM or SIGINT cancel it and return 0. A
    service failure after boot is logged and returns ``EXIT_SERVICE_FAILED``; a failure
    before boot raises (the caller prints why the node cannot start). Without a
    ``supervisor`` one with ``os._exit`` as its hard exit is used."""
    sup = supervisor or NodeSupervisor(node=node, role=role, hard_exit=os._exit)
    log = sup.log
    booted = False
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await sup.start(nursery, role, start)
                booted = True
                # everything loaded at boot (configs, tables, caches) lives as long as the
                # process: keep it out of every later garbage collection (full collections
                # walk it otherwise)
                gc.collect()
                gc.freeze()
                _, gen1, gen2 = gc.get_threshold()
                gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
                print(boot_line(), flush=True)
                try:
                    async for signum in signals:
                        log.info("shutdown requested", signal=signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        break
                finally:
                    sup.arm()  # a signal or a failure: the stop has a deadline
    except Exception as exc:
        if not booted:
            raise
        if sup.failure is None:
            sup.fail(role, exc)
        log.error("node stopped after a failure", reason=sup.failure)
        return EXIT_SERVICE_FAILED
    finally:
        sup.disarm()
    if sup.failure is not None:
        log.error("node stopped after a failure", reason=sup.failure)
        return EXIT_SERVICE_FAILED
    return 0
