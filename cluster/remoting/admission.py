"""Who may open one more connection to a server: the node's connection limit
(``serverMaxConnections``) and the limit per peer address (``serverMaxConnectionsPerAddress``).
Pure: the server's accept loop asks ``admit`` for each accepted socket and calls ``closed`` when
an admitted one ends.

Invariants: ``open`` is the number of admitted connections not yet closed and the sum of
``by_address``; no address holds more than ``max_per_address`` of them, and ``open`` never
passes ``max_connections``. With ``max_per_address`` below ``max_connections``, one address
cannot fill the node: it takes ``ceil(max_connections / max_per_address)`` addresses.
"""

from __future__ import annotations

import enum


class Refused(enum.Enum):
    """Why a connection was closed at accept."""

    NODE_FULL = "serverMaxConnections"
    ADDRESS_FULL = "serverMaxConnectionsPerAddress"


class ConnectionAdmission:
    """The open connections of one server, in total and per peer address."""

    __slots__ = ("by_address", "max_connections", "max_per_address", "open", "refused")

    def __init__(self, max_connections: int, max_per_address: int) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if max_per_address < 1:
            raise ValueError(f"max_per_address must be at least 1, got {max_per_address}")
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.open = 0
        self.by_address: dict[str, int] = {}  # addresses with at least one open connection
        self.refused = dict.fromkeys(Refused, 0)  # refusals so far, per reason

    def admit(self, address: str) -> Refused | None:
        """Count a new connection from ``address``, or say why it must be closed (counted)."""
        held = self.by_address.get(address, 0)
        if held >= self.max_per_address:
            return self._refuse(Refused.ADDRESS_FULL)
        if self.open >= self.max_connections:
            return self._refuse(Refused.NODE_FULL)
        self.by_address[address] = held + 1
        self.open += 1
        return None

    def _refuse(self, reason: Refused) -> Refused:
        self.refused[reason] += 1
        return reason

    def closed(self, address: str) -> None:
        """An admitted connection from ``address`` ended."""
        held = self.by_address.pop(address, 0) - 1
        if held > 0:
            self.by_address[address] = held
        self.open -= 1
