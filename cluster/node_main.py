"""A node's ``python -m`` entry: run it, print its boot line, stop on SIGTERM or SIGINT."""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable
from typing import Any

import trio

from cluster.logging import get_logger


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
            print(boot_line(), flush=True)
            async for signum in signals:
                log.info("shutdown requested", signal=signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
