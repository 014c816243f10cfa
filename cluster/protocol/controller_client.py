"""Calling the controllers (controller mode): a request goes to the leader, whichever of the
``controllerAddr`` list it is.  CONTROLLER_NOT_LEADER (2007) and unreachable controllers move on
to the next address; the last one that answered as leader is tried first next time."""

from __future__ import annotations

from typing import Final

from ..remoting.client_pool import RemotingClient
from ..remoting.codec import RemotingCommand
from ..remoting.errors import RemotingError
from .controller import ControllerResponseCode

#: Per-controller call timeout.
CONTROLLER_CALL_TIMEOUT_S: Final = 1.0


def parse_controller_addrs(text: str) -> list[str]:
    """``controllerAddr`` (``;``- or ``,``-separated host:port list) -> addresses."""
    out = []
    for part in text.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"controllerAddr: {part!r} is not host:port")
        out.append(part)
    return out


def is_host_port(text: str) -> bool:
    """``text`` is one ``host:port`` (an address a controller answer may name)."""
    host, sep, port = text.rpartition(":")
    return (bool(sep and host and port.isdigit()) and 0 < int(port) < 65536
            and len(text) <= 255 and text.isprintable() and not any(c in text for c in " ;,"))


class NoControllerLeader(RemotingError):
    """No controller answered as the leader."""


class ControllerClient:
    def __init__(self, client: RemotingClient, addrs: list[str]) -> None:
        if not addrs:
            raise ValueError("controllerAddr: no controller address")
        self.client = client
        self.addrs = list(addrs)
        self.leader = 0
        self.calls = 0

    async def call(
        self, request: RemotingCommand, timeout: float = CONTROLLER_CALL_TIMEOUT_S
    ) -> RemotingCommand:
        """The leader's answer to ``request`` (any code but CONTROLLER_NOT_LEADER)."""
        self.calls += 1
        errors = []
        n = len(self.addrs)
        for k in range(n):
            i = (self.leader + k) % n
            addr = self.addrs[i]
            try:
                response = await self.client.invoke(addr, request, timeout)
            except (RemotingError, OSError) as exc:
                errors.append(f"{addr}: {exc}")
                continue
            if response.code == ControllerResponseCode.CONTROLLER_NOT_LEADER:
                errors.append(f"{addr}: {response.remark}")
                continue
            self.leader = i
            return response
        raise NoControllerLeader("no controller leader: " + "; ".join(errors))
