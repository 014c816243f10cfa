"""Where the proxy sends a call meant for one broker group's master (a POP receive, an ack, a
change of invisible time, a dead-letter forward, an end of transaction): the master address
the proxy's client instance already knows for that group (the cache the send path uses,
``ClientInstance.master_addr``), fetched from the NameServer only when it knows none. A call
that fails for want of a master (no answer, or the broker saying it is not the master)
makes the instance suspect the group: it re-reads the route at once and then every
``failover_route_poll_s`` until a new master shows up (client/suspects.py); the call is made
once more when the route already names a new one. An idempotent call (an ack, a change of
invisible time) whose connection was lost under it, while the route still names the same
master, is made once more on a new connection to it, within its deadline (calls.py)."""

from __future__ import annotations

from functools import partial
from typing import Final

import trio

from ..client.errors import MQRemotingError
from ..client.instance import ClientInstance
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import ResponseCode
from . import convert
from .calls import lost_in_flight, once_more
from .pb import definition_pb2 as pb

#: broker answers that mean "not the master (any more)" (the producer's FAILOVER codes, and
#: the slave's refusal of a write)
NOT_MASTER_CODES: Final = frozenset({
    ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE,
})


class MasterRoutes:
    """Master addresses by broker group, cached in ``instance`` and re-read on failure."""

    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance

    async def master(self, topic: str, broker: str) -> str:
        """The master address of ``broker`` (a group serving ``topic``); ProxyError NOT_FOUND
        when the route names none."""
        addr = self.instance.master_addr(broker)
        if addr is None:
            await self.instance.update_route(topic)
            addr = self.instance.master_addr(broker)
        if addr is None:
            raise convert.ProxyError(pb.NOT_FOUND, f"no master for broker {broker!r}")
        return addr

    async def invoke(self, topic: str, broker: str, cmd: RemotingCommand,
                     timeout: float | None = None, *, idempotent: bool = False
                     ) -> tuple[str, RemotingCommand]:
        """``cmd`` to ``broker``'s master: the address called and its answer. After a failure
        for want of a master, once more on the new master if the route already names one;
        ``idempotent``: when the connection was lost under the call and the route still names
        the same master, once more to it on a new connection (calls.py), within the deadline."""
        t = self.instance.config.call_timeout_s if timeout is None else timeout
        deadline = trio.current_time() + t
        addr = await self.master(topic, broker)
        try:
            resp = await self.instance.invoke(addr, cmd, t)
        except MQRemotingError as exc:
            if not await self.instance.refresh_after_failure(topic, broker):
                if not (idempotent and lost_in_flight(exc)):
                    raise
                try:  # the same master, on a new connection; unless another takes its place
                    return addr, await once_more(
                        partial(self.instance.invoke, addr, cmd), deadline, exc,
                        f"code {cmd.code}",
                        # another master took its place; none named (the NameServer dropped
                        # the dead one until it registers again) is no reason to give up
                        lambda: self.instance.master_addr(broker) in (addr, None))
                except MQRemotingError:
                    if self.instance.master_addr(broker) in (addr, None):
                        raise
        else:
            if resp.code not in NOT_MASTER_CODES:
                return addr, resp
            if not await self.instance.refresh_after_failure(topic, broker):
                return addr, resp
        addr = await self.master(topic, broker)
        return addr, await self.instance.invoke(addr, cmd, timeout)
