"""DLedger role changes -> broker roles (RocketMQ ``DLedgerRoleChangeHandler``).

The store's DLedger CommitLog (``dledger/commitlog_adapter.py``) reports every role change and
the moment a new leader is ready to serve (its no-op committed and dispatched, queue offsets
rebuilt).  This task turns that into the broker's role:

* **ready leader -> master**: brokerId 0, writes accepted, the delay-level and transaction check
  services run, registered with every NameServer at once (so routes follow the leader);
* **follower / candidate / leader not yet ready -> slave**: brokerId = position in dLegerPeers + 1,
  the store refuses writes (SERVICE_NOT_AVAILABLE naming the leader), SlaveSynchronize copies
  topics, offsets and subscription groups from the master the NameServer names, registered at
  once.

A broker in DLedger mode boots as a slave (RocketMQ boots with brokerId -1 and registers once a
role is known; registering as a slave at once lets ``rmq-cluster up`` see every member).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..cluster.logging import get_logger
from ..dledger.commitlog_adapter import DLedgerCommitLog
from ..store.message_store import MessageStore

if TYPE_CHECKING:
    from .context import BrokerHost

log = get_logger(component="dledger_role")

MASTER_ID = 0
#: A slave that does not know its master yet (the new leader registers a moment after it won)
#: registers again this often until the NameServer names one.
MASTER_LOOKUP_INTERVAL_S = 0.5


class DLedgerRoleHandler:
    def __init__(
        self, ctrl: BrokerHost, store: MessageStore, backend: DLedgerCommitLog
    ) -> None:
        self.ctrl = ctrl
        self.store = store
        #: the store's CommitLog backend: role, readiness and the node live there
        self.backend = backend
        self.log = get_logger(node=ctrl.node, role="dledger-role")
        self._changed = trio.Event()
        self.is_master = False
        self.changes = 0
        backend.on_role_change = self.notify
        # register as a slave until elected; ``is_slave`` itself flips in run(), after the
        # processors were built (the send processor leaves the refusal to the store, which
        # names the leader)
        ctrl.broker_id = ctrl.settings.dledger.slave_broker_id()
        ctrl.is_slave = False  # brokerRole is ignored in DLedger mode (RocketMQ too)

    def notify(self) -> None:
        self._changed.set()

    def apply_role(self, *, master: bool) -> None:
        ctrl = self.ctrl
        self.is_master = master
        ctrl.is_slave = not master
        ctrl.broker_id = MASTER_ID if master else ctrl.settings.dledger.slave_broker_id()
        ctrl.master_addr = None  # a slave learns the (new) master from REGISTER_BROKER
        if master:
            self.adopt_logged_topics()

    def adopt_logged_topics(self) -> list[str]:
        """A new master serves every topic its committed log holds: topics created on the old
        leader after this node's last SlaveSynchronize get a config (queues = highest queue id
        seen + 1), so their messages stay readable and routable."""
        ctrl = self.ctrl
        adopted = ctrl.topics.adopt_stored(list(self.store.cqs.queues))
        if adopted:
            self.log.info("topics adopted from the log", topics=adopted)
            ctrl.topic_created(adopted[0])  # persist and re-register
        return adopted

    async def run(self) -> None:
        """Follow the store's role until cancelled."""
        ctrl = self.ctrl
        while True:
            self._changed = trio.Event()
            master = self.backend.leader_ready
            self.apply_role(master=master)
            self.changes += 1
            node = self.backend.node
            self.log.info(
                "broker role follows dledger",
                broker_role="MASTER" if master else "SLAVE",
                broker_id=ctrl.broker_id,
                dledger_role=node.role.value if node is not None else "CANDIDATE",
                term=node.term if node is not None else 0,
                leader=node.leader_id if node is not None else "",
            )
            await ctrl.register_all()  # routes follow the leader at once
            ctrl.state_changed()
            async with trio.open_nursery() as nursery:
                if master:
                    nursery.start_soon(ctrl._schedule_loop)
                    nursery.start_soon(ctrl._transaction_check_loop)
                else:
                    nursery.start_soon(ctrl._slave_sync_loop)
                    nursery.start_soon(self._learn_master)
                await self._changed.wait()
                nursery.cancel_scope.cancel()

    async def _learn_master(self) -> None:
        """Register until the NameServer's answer names the master (which sets ``master_addr``
        and wakes SlaveSynchronize)."""
        ctrl = self.ctrl
        while ctrl.master_addr is None:
            await trio.sleep(MASTER_LOOKUP_INTERVAL_S)
            await ctrl.register_all()

