"""Who may open one more connection to a server: the node's connection limit
(``serverMaxConnections``), the limit per peer address (``serverMaxConnectionsPerAddress``) and
fair shares once the node is full. Pure: the server's accept loop asks ``admit`` for each
accepted socket and calls ``closed`` when an admitted one ends.

* An address holding ``max_per_address`` connections is refused (``ADDRESS_FULL``): with the
  default a tenth of the node's limit, one address cannot fill the node.
* Once ``max_connections`` are open, a newcomer is admitted only if some address holds at
  least two more connections than the newcomer's (``fair_share_victim``): the server closes one
  of that address's connections for it, so the addresses that hold the most give way first and
  every address keeps getting in until all hold about the same; otherwise it is refused
  (``NODE_FULL``).

Invariants: ``open`` is the sum of ``by_address`` (addresses with no open connection are not
kept); no address holds more than ``max_per_address``; ``open`` passes ``max_connections`` only
by evictions whose victim has not ended yet (its ``closed`` comes when its task ends; its
socket is closed at once).
"""

from __future__ import annotations

import enum


class Refused(enum.Enum):
    """Why a connection was closed at accept (the value: the setting that refused it)."""

    NODE_FULL = "serverMaxConnections"
    ADDRESS_FULL = "serverMaxConnectionsPerAddress"


class ConnectionAdmission:
    """The open connections of one server, in total and per peer address."""

    __slots__ = (
        "_by_count", "_top", "by_address", "evictions", "max_connections", "max_per_address",
        "open", "refused",
    )

    def __init__(self, max_connections: int, max_per_address: int) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if max_per_address < 1:
            raise ValueError(f"max_per_address must be at least 1, got {max_per_address}")
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.open = 0
        self.by_address: dict[str, int] = {}  # addresses with at least one open connection
        self._by_count: dict[int, set[str]] = {}  # connections held -> addresses holding so many
        self._top = 0  # the most connections one address holds
        self.refused = dict.fromkeys(Refused, 0)  # refusals so far, per reason
        self.evictions = 0  # connections closed to admit a newcomer at the node's limit

    def fair_share_victim(self, address: str) -> str | None:
        """At the node's limit: an address holding the most connections, if it holds at least
        two more than ``address`` (one of its connections may be closed for ``address``)."""
        if self._top < self.by_address.get(address, 0) + 2:
            return None
        return next(iter(self._by_count[self._top]))

    def admit(self, address: str, *, evicting: bool = False) -> Refused | None:
        """Count a new connection from ``address``, or say why it must be closed (counted).
        ``evicting``: a connection of ``fair_share_victim(address)`` is closed for this one,
        so the node's limit does not refuse it."""
        held = self.by_address.get(address, 0)
        if held >= self.max_per_address:
            return self._refuse(Refused.ADDRESS_FULL)
        if self.open >= self.max_connections and not evicting:
            return self._refuse(Refused.NODE_FULL)
        self.evictions += evicting
        self._move(address, held, held + 1)
        self.open += 1
        return None

    def closed(self, address: str) -> None:
        """An admitted connection from ``address`` ended."""
        held = self.by_address.get(address, 0)
        if held:
            self._move(address, held, held - 1)
            self.open -= 1

    def _refuse(self, reason: Refused) -> Refused:
        self.refused[reason] += 1
        return reason

    def _move(self, address: str, held: int, now: int) -> None:
        """``address`` holds ``now`` connections instead of ``held`` (one more or one less)."""
        if held:
            bucket = self._by_count[held]
            bucket.discard(address)
            if not bucket:
                del self._by_count[held]
        if now:
            self.by_address[address] = now
            self._by_count.setdefault(now, set()).add(address)
        else:
            del self.by_address[address]
        if now > self._top:
            self._top = now
        elif held == self._top and held not in self._by_count:
            self._top = now  # the only address at the top went down by one
