"""The broker node's entry point for embedding: ``serve(settings)`` runs one broker.

    async with trio.open_nursery() as n:
        host, port = await n.start(broker.server.serve, settings)

``settings`` is a ``BrokerSettings`` (``broker.config.load_broker_config`` builds one from
broker.conf properties). Cancelling the task stops the broker cleanly: UNREGISTER_BROKER to
every NameServer, config files written, the store closed.
"""

from __future__ import annotations

import trio

from .config import BrokerSettings
from .node import BrokerNode


async def serve(
    settings: BrokerSettings,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a broker until cancelled; ``task_status.started((host, port))`` once serving."""
    await BrokerNode(settings).run(task_status=task_status)
