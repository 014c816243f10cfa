"""A caller's own waiter for ``DLedgerNode.propose_with`` (the part broker/dledger_role.py's
send answer plays), recording every ``finish`` with the time it came."""

from __future__ import annotations

import trio

from rmq_cluster.dledger.node import AppendResult


class Sink:
    def __init__(self) -> None:
        self.index = -1
        self.term = 0
        self.deadline = 0.0
        self.result: AppendResult | None = None
        self.event: trio.Event | None = None
        self.calls: list[tuple[float, AppendResult]] = []
        self.done = trio.Event()

    def finish(self, result: AppendResult) -> None:
        self.calls.append((trio.current_time(), result))
        self.done.set()
        if self.result is None:
            self.result = result
