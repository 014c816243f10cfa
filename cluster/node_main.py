"""A node's ``python -m`` entry: run it, print its boot line, stop on SIGTERM or SIGINT."""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable
from typing import Any, Final

import trio

from rmq_cluster.cluster.logging import get_logger

#: Young-generation threshold of the garbage collector in a node process (CPython's default is
#: 700 net container allocations). A broker keeps every in-flight request's objects alive until
#: it answers; on a SYNC_MASTER that is until the slave's ack (256 sends in flight = thousands
#: of objects), so the count kept crossing 700 and the collector walked those live objects
#: ~230 times per 100k sends (4x an ASYNC master; measured with gc.callbacks on bench.ha). At
#: 10k it runs a few times per 100k sends; the young generation stays a few MB at most.
GC_GEN0_THRESHOLD: Final = 10_000


async def serve_until_signal(
    start: Callable[..., Any], boot_line: Callable[[], str], *, node: str, role: str
) -> None:
    """``nursery.start(start)``; once it reports ready, print ``boot_line()`` (what RocketMQ's
    scripts and our supervisor wait for); on SIGTERM or SIGINT cancel it and return."""
    log = get_logger(node=node, role=role)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(start)
            # everything loaded at boot (configs, tables, caches) lives as long as the process:
            # keep it out of every later garbage collection (full collections walk it otherwise)
            gc.collect()
            gc.freeze()
            _, gen1, gen2 = gc.get_threshold()
            gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
            print(boot_line(), flush=True)
            async for signum in signals:
                log.info("shutdown requested", signal=signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
