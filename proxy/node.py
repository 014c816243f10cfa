"""The mqproxy node: a client instance toward the NameServers and brokers, and the gRPC
server in front of it."""

from __future__ import annotations

import attrs
import trio

from ..client.config import ClientConfig
from ..client.instance import ClientInstance
from ..client.producer import Producer
from ..cluster.logging import get_logger
from .config import ProxyConfig
from .h2_server import serve_grpc
from .service import MessagingService

log = get_logger(node="proxy")
#: the producer group the proxy sends under on the remoting side
PROXY_PRODUCER_GROUP = "PROXY_PRODUCER"


async def run_proxy(config: ProxyConfig, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Run until cancelled; started, reports the gRPC port bound."""
    client_config = attrs.evolve(ClientConfig(), namesrv_addr=config.namesrv_addr,
                                 call_timeout_s=config.call_timeout_s)
    async with ClientInstance(client_config) as instance, \
            Producer(PROXY_PRODUCER_GROUP, instance=instance) as producer, \
            trio.open_nursery() as nursery:
        service = MessagingService(config, instance, producer)
        listeners = await nursery.start(serve_grpc, config, service)
        port = listeners[0].socket.getsockname()[1]
        log.info("mqproxy started", grpc_port=port, namesrv=config.namesrv_addr)
        task_status.started(port)
