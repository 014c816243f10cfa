"""What the parts of a broker may use of it: the narrow interfaces ``BrokerNode`` satisfies.

``BrokerContext`` is a request processor's whole view of its broker (``processors/*``, the
metrics endpoint): its settings, the store, the tables (topics, offsets, groups, clients, locks,
parked pulls, transactions), the clock and the few hooks that tell the broker something changed.
``BrokerHost`` adds what the components that *drive* a broker use (the DLedger role handler and
the controller-mode replicas manager: identity, role, registration, the service loops they
start and stop). Both are ``typing.Protocol``: the controller satisfies them structurally, and
no module below ``broker/node.py`` imports it, so the import graph has no cycle.

Attributes (not read-only properties) are the ones their users assign: ``settings``/``bcfg``
(UPDATE_BROKER_CONFIG), ``is_slave``/``broker_id``/``master_addr`` (role changes),
``broker_addr``/``address``/``epoch_file``/``replica_id`` (controller mode).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import trio

    from ..cluster.acl.guard import AclGuard
    from ..cluster.metrics import Histogram
    from ..cluster.remoting.server import RemotingServer
    from ..ha.master import InSyncState
    from ..ha.service import HAService
    from ..store.epoch_file import EpochFile
    from ..store.message_store import MessageStore
    from ..store.timer.timer_store import TimerStore
    from .clients import ClientManager, RebalanceLockManager
    from .config import BrokerConfig, BrokerSettings
    from .long_polling import PullRequestHoldService
    from .offsets import ConsumerOffsetManager, SubscriptionGroupManager
    from .processors.common import TopicAccess
    from .schedule import ScheduleMessageService
    from .stats import BrokerStats
    from .topic_config import TopicConfigManager
    from .transaction import TransactionState


class BrokerContext(Protocol):
    """A request processor's view of its broker."""

    # -- settings (UPDATE_BROKER_CONFIG installs new ones: read them per request)
    settings: BrokerSettings
    bcfg: BrokerConfig
    #: the properties file the broker was started from (None: not written back)
    config_file: str | None
    #: called after new settings were installed (processors caching a flag re-read it)
    config_listeners: list[Callable[[], None]]
    is_slave: bool
    broker_id: int
    #: (brokerIP1, listenPort): the store host written into every stored message
    store_host: tuple[str, int]
    #: ip:port registered with the NameServers ("" before the server listens)
    broker_addr: str
    boot_timestamp_ms: int
    now_ms: Callable[[], int]
    log: Any

    # -- state
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    groups: SubscriptionGroupManager
    clients: ClientManager
    locks: RebalanceLockManager
    hold: PullRequestHoldService
    stats: BrokerStats
    transactions: TransactionState
    #: ACL on the topic of a message read by offset or id (None: no ACL)
    topic_access: TopicAccess | None
    acl: AclGuard | None
    server: RemotingServer | None
    ha: HAService | None
    #: the timer store while this broker delivers timers (a master), else None
    timer: TimerStore | None

    @property
    def store(self) -> MessageStore:
        """The open store (raises RuntimeError before the broker runs)."""
        ...

    @property
    def store_or_none(self) -> MessageStore | None:
        """The store once open, else None (for readers that may run before it opens)."""
        ...

    @property
    def schedule(self) -> ScheduleMessageService: ...

    @property
    def send_latency(self) -> Histogram | None:
        """Send handling time histogram (None without a metrics endpoint)."""
        ...

    # -- hooks: tell the broker something changed
    def topic_created(self, topic: str) -> None:
        """A topic was created, changed or deleted: persist and re-register."""

    def mark_dirty(self) -> None:
        """Offsets or groups changed: persist the config files soon."""

    async def register_topics_now(self, topics: Sequence[str], wait_s: float = ...) -> None:
        """Wait (at most ``wait_s``) until the NameServers were told about ``topics``."""

    async def register_all(self) -> None:
        """REGISTER_BROKER to every NameServer at once."""

    def ensure_transaction_topics(self) -> None: ...

    def notify_consumer_ids_changed(self, group: str) -> None: ...

    def state_changed(self) -> None:
        """Client tables or parked pulls changed: wake waiters."""


class BrokerHost(BrokerContext, Protocol):
    """What the components that drive a broker's role use of it (``dledger_role.py``,
    ``replicas_manager.py``): a ``BrokerContext`` plus identity, role and service loops."""

    node: str
    master_addr: str | None
    address: tuple[str, int] | None
    epoch_file: EpochFile | None
    replica_id: int | None
    #: controller mode, as master: the SYNC put rule and the SyncStateSet size (HAService)
    in_sync: InSyncState | None
    #: the store or None (the replicas manager reads it while the inner broker may be closed)
    _store: MessageStore | None

    async def run(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = ...
    ) -> None: ...

    # the master-only services a role change starts and stops
    async def _schedule_loop(self) -> None: ...

    async def _slave_sync_loop(self) -> None: ...

    async def _transaction_check_loop(self) -> None: ...
