"""BrokerNode: one broker node composed in one nursery (RocketMQ calls it ``BrokerController``).

    broker = BrokerNode(settings)
    async with trio.open_nursery() as n:
        host, port = await n.start(broker.run)

``run`` loads the config files (topics, consumer offsets, subscription groups, delay offsets),
opens the store (recovering it), then runs, side by side: the store's services, the remoting
server on the listen port and the fast port (listenPort - 2), registration with every NameServer
(at start, every registerNameServerPeriod, and whenever topics change), client housekeeping
(idle clients dropped, NOTIFY_CONSUMER_IDS_CHANGED on membership changes), the delay-level
service and the timer wheel (``store/timer``: a master's, started and stopped with the role),
the transaction check service and persistence of the config files. On cancellation it
unregisters from every NameServer, writes the config files and closes the store cleanly.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import trio
import trio.lowlevel

from ..cluster.acl.guard import AclGuard, default_acl_path
from ..cluster.acl.permission import PUB
from ..cluster.acl.signing import credentials_from
from ..cluster.clock import now_ms
from ..cluster.logging import get_logger
from ..cluster.metrics import Histogram
from ..cluster.metrics_server import run_steps, serve_metrics
from ..cluster.node_main import NodeSupervisor
from ..cluster.protocol.controller import ControllerRequestCode, EpochEntryCache
from ..cluster.protocol.crc import crc32
from ..cluster.protocol.route import (
    ClusterInfo,
    PermName,
    RegisterBrokerBody,
    TopicRouteData,
)
from ..cluster.remoting.address import format_address
from ..cluster.remoting.client_pool import RemotingClient, open_remoting_client
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import RequestCode, ResponseCode
from ..cluster.remoting.connection import Connection
from ..cluster.remoting.errors import RemotingError
from ..cluster.remoting.headers import (
    CheckTransactionStateRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from ..cluster.remoting.processors import AnyProcessor, ProcessorTable
from ..cluster.remoting.server import RemotingServer
from ..dledger.commitlog_adapter import DLedgerCommitLog, open_dledger_store
from ..dledger.node import run_store_node
from ..ha.access import is_loopback_host
from ..ha.master import InSyncState
from ..ha.service import HAService
from ..store import flush as store_services
from ..store.epoch_file import EpochFile
from ..store.message_store import MessageStore
from ..store.timer.timer_store import MAX_ENQUEUE_PER_ROUND as TIMER_MAX_ENQUEUE_PER_ROUND
from ..store.timer.timer_store import TimerStore
from .clients import ClientManager, RebalanceLockManager
from .config import BrokerSettings
from .dledger_role import DLedgerRoleHandler
from .intervals import LiveInterval
from .long_polling import PullRequestHoldService
from .metrics import BrokerMetrics, timed
from .offsets import ConsumerOffsetManager, SubscriptionGroupManager
from .persist import (
    CONSUMER_OFFSET_FILE,
    DELAY_OFFSET_FILE,
    SUBSCRIPTION_GROUP_FILE,
    TOPICS_FILE,
    config_dir,
    read_file,
    write_atomically,
)
from .pop.wiring import BrokerPop
from .processors.admin import (
    MoreAdminProcessors,
    ResetOffsetProcessor,
    StatsProcessor,
)
from .processors.broker_config import BrokerConfigProcessor
from .processors.common import TopicAccess
from .processors.consumer import ConsumerProcessors
from .processors.end_transaction import EndTransactionProcessor
from .processors.gate import NameGate
from .processors.pull import PullProcessor
from .processors.relay import ConsumerRelayProcessors
from .processors.reply import ReplyProcessor
from .processors.send import (
    SendBackProcessor,
    SendProcessor,
    refused_answer,
    timeout_answer,
)
from .replicas_manager import ReplicasManager
from .schedule import ScheduleMessageService
from .stats import RATE_SAMPLE_PERIOD_S, BrokerStats
from .topic_config import SCHEDULE_TOPIC, TIMER_TOPIC, TopicConfigManager
from .transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    HalfCheck,
    TransactionState,
    check_recipient,
)

#: How long shutdown waits for UNREGISTER_BROKER answers.
UNREGISTER_TIMEOUT_S: Final = 3.0
#: How often a slave copies its master's configs and offsets (RocketMQ: 10 s).
SLAVE_SYNC_INTERVAL_S: Final = 10.0
#: Pause after an unexpected error in a background loop before it runs again.
LOOP_ERROR_BACKOFF_S: Final = 1.0
#: How long a heartbeat that created its group's retry topic waits for the NameServers to learn
#: it before answering (below the clients' 3 s call timeout; the register loop finishes the job
#: if this wait is cut short).
TOPIC_REGISTER_WAIT_S: Final = 2.0
#: Shortest pause between two lookups of this group's slave hosts (HA default allow-list).
HA_SLAVE_HOSTS_REFRESH_MIN_S: Final = 1.0
#: The rate sampler waits at least this many times what its last sample cost (metrics on, a
#: broker with very many queues): sampling takes at most 1/20 of the event loop.
SAMPLE_COST_SHARE: Final = 20


class BrokerNode:
    def __init__(
        self,
        settings: BrokerSettings,
        *,
        node: str | None = None,
        clock_ms: Callable[[], int] = now_ms,
        config_file: str | None = None,
        supervisor: NodeSupervisor | None = None,
        managed: bool = False,
    ) -> None:
        self.settings = settings
        #: controller mode: this is the broker proper, run by a ReplicasManager in its role
        self.managed = managed
        #: controller mode: the epoch file (GET_BROKER_EPOCH_CACHE) and this replica's id
        self.epoch_file: EpochFile | None = None
        self.replica_id: int | None = None
        #: controller mode, as master: the SYNC put rule and the SyncStateSet size (HAService)
        self.in_sync: InSyncState | None = None
        self.replicas: ReplicasManager | None = None
        #: the properties file it was started from (UPDATE_BROKER_CONFIG writes changes there)
        self.config_file = config_file
        #: called after UPDATE_BROKER_CONFIG installed new settings (processors caching a flag)
        self.config_listeners: list[Callable[[], None]] = []
        self.bcfg = settings.broker
        #: the transaction check loop's wait (transactionCheckInterval is a live key)
        self._check_interval = LiveInterval(
            lambda: self.bcfg.transaction_check_interval_ms / 1000.0
        )
        self.config_listeners.append(self._check_interval.changed)
        self.node = node or self.bcfg.broker_name
        self.now_ms = clock_ms
        self.log = get_logger(node=self.node, role="broker")
        #: every service task runs under it: one that fails ends the broker (node_main.py)
        self.supervisor = supervisor or NodeSupervisor(node=self.node, role="broker")
        self._ha_hosts_now = trio.Event()
        self.is_slave = settings.is_slave
        self.topics = TopicConfigManager(self.bcfg, clock_ms=clock_ms)
        self.offsets = ConsumerOffsetManager()
        self.groups = SubscriptionGroupManager(
            auto_create=self.bcfg.auto_create_subscription_group, clock_ms=clock_ms
        )
        self.clients = ClientManager(channel_expired_ms=self.bcfg.client_channel_expired_ms)
        self.locks = RebalanceLockManager()
        self.hold = PullRequestHoldService(on_change=self.state_changed)
        self.stats = BrokerStats()
        self.transactions = TransactionState()
        self.boot_timestamp_ms = clock_ms()
        self._store: MessageStore | None = None
        self._schedule: ScheduleMessageService | None = None
        self._nursery: trio.Nursery | None = None
        self._ns_client: RemotingClient | None = None
        self._init_wakeups()
        #: the timer store while this broker delivers timers (a master), else None
        self.timer: TimerStore | None = None
        self.address: tuple[str, int] | None = None
        self.fast_address: tuple[str, int] | None = None
        self.broker_addr = ""
        self.store_host: tuple[str, int] = (self.bcfg.broker_ip1, self.bcfg.listen_port)
        self.server: RemotingServer | None = None
        self.ha: HAService | None = None
        self.ha_port: int | None = None
        #: A slave's master (from REGISTER_BROKER's answer), synced every SLAVE_SYNC_INTERVAL_S.
        self.master_addr: str | None = None
        self._slave_sync_now = trio.Event()
        self.slave_sync_count = 0
        self.register_count = 0
        #: brokerId registered with the NameServers (DLedger mode changes it with the role)
        self.broker_id = self.bcfg.broker_id
        #: DLedger mode (enableDLegerCommitLog=true): the role handler, once running
        self.dledger_role: DLedgerRoleHandler | None = None
        #: Plain ACL (aclEnable=true) and the /metrics listener (metricsPort >= 0); None when off.
        self.acl: AclGuard | None = None
        #: ACL on the topic of a message read by offset or id (set with ``acl``)
        self.topic_access: TopicAccess | None = None
        #: every topic, group and queue id on the wire is checked here before any processor
        self.name_gate = NameGate(node=self.node)
        self.metrics: BrokerMetrics | None = None
        self.metrics_address: tuple[str, int] | None = None
        #: RocketMQ 5 POP consumption (broker/pop)
        self.pop = BrokerPop(self, self.topic_route)

    def _init_wakeups(self) -> None:
        """The events the service loops wait on, and the register loop's rounds."""
        self._register_now = trio.Event()
        #: register loop rounds: started, finished (a round includes every topic created
        #: before it started) and an event set (and replaced) as each round finishes
        self._register_round = 0
        self._register_round_done = 0
        self._register_round_ended = trio.Event()
        self._persist_now = trio.Event()
        self._schedule_wake = trio.Event()
        self._timer_wake = trio.Event()
        #: set by ``state_changed`` for ``wait_until``; made only while someone waits (a pull
        #: parks once a message when a consumer keeps up: no Event each time)
        self._changed: trio.Event | None = None

    # ------------------------------------------------------------------ accessors

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RuntimeError("the broker is not running")
        return self._store

    @property
    def store_or_none(self) -> MessageStore | None:
        return self._store

    @property
    def send_latency(self) -> Histogram | None:
        return self.metrics.send_latency if self.metrics is not None else None

    @property
    def schedule(self) -> ScheduleMessageService:
        if self._schedule is None:
            raise RuntimeError("the broker is not running")
        return self._schedule

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    # ------------------------------------------------------------------ hooks for processors

    def topic_created(self, topic: str) -> None:
        """A topic was created, changed or deleted: persist topics.json and re-register."""
        self._register_now.set()
        self._persist_now.set()

    def mark_dirty(self) -> None:
        self._persist_now.set()

    async def register_topics_now(
        self, topics: Sequence[str], wait_s: float = TOPIC_REGISTER_WAIT_S
    ) -> None:
        """``topics`` were created for a client about to look up their routes (consumer
        groups' retry topics, on a heartbeat; an admin's new topic): wait until the
        NameServers were told, as RocketMQ's ``createTopicInSendMessageBackMethod`` and
        ``registerIncrementBrokerData`` do (``registerBrokerAll`` at once, not at the next
        period). The register loop does it at once, one registration for every waiter; the
        wait is bounded by ``wait_s`` and registerBrokerTimeoutMills (the registration still
        goes on)."""
        self._persist_now.set()
        wanted = self._register_round + 1  # the next round to start includes ``topics``
        self._register_now.set()
        wait_s = min(wait_s, self.bcfg.register_broker_timeout_mills / 1000.0)
        with trio.move_on_after(wait_s):
            while self._register_round_done < wanted:
                await self._register_round_ended.wait()
        if self._register_round_done < wanted:
            self.log.info("topic registration still under way", topics=list(topics))

    def ensure_transaction_topics(self) -> None:
        for topic in (HALF_TOPIC, OP_HALF_TOPIC):
            _tc, created = self.topics.create_in_send_message_back(topic, 1, PermName.PERM_RW)
            if created:
                self.topic_created(topic)

    def notify_consumer_ids_changed(self, group: str) -> None:
        for channel in self.clients.consumer_channels(group):
            if isinstance(channel, Connection):
                self._spawn(self._notify_one, channel, group)

    async def _notify_one(self, conn: Connection, group: str) -> None:
        header = NotifyConsumerIdsChangedRequestHeader(consumer_group=group)
        request = RemotingCommand.request(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header.to_ext_fields(), oneway=True
        )
        try:
            await conn.invoke_oneway(request)
        except RemotingError as exc:
            self.log.debug("notify consumer ids changed failed", group=group, error=str(exc))

    def _on_arrival(
        self, topic: str, queue_id: int, next_offset: int, tags_code: int, store_ts: int
    ) -> None:
        self.hold.notify_message_arriving(topic, queue_id, next_offset, tags_code, store_ts)
        self.pop.message_arrived(topic)
        if topic == SCHEDULE_TOPIC:
            self._schedule_wake.set()
        elif topic == TIMER_TOPIC:
            self._timer_wake.set()

    # ------------------------------------------------------------------ processors

    def processors(self) -> dict[int, AnyProcessor]:
        # one send form, every store: answered at once, or held on the watermark its put must
        # pass (the flush, a slave's ack, DLedger's commit: store.append_marked)
        send_fn = SendProcessor(self).process
        pull = PullProcessor(self)
        cons = ConsumerProcessors(self)
        admin = MoreAdminProcessors(self)
        back = SendBackProcessor(self)
        end_tx = EndTransactionProcessor(self)
        relay = ConsumerRelayProcessors(self)
        reply = ReplyProcessor(self)
        rc = RequestCode
        return {
            rc.SEND_MESSAGE: send_fn,
            rc.SEND_MESSAGE_V2: send_fn,
            rc.SEND_BATCH_MESSAGE: send_fn,
            rc.PULL_MESSAGE: pull.process,
            rc.LITE_PULL_MESSAGE: pull.process,
            rc.CONSUMER_SEND_MSG_BACK: back.process,
            rc.END_TRANSACTION: end_tx.process,
            rc.HEART_BEAT: cons.heart_beat,
            rc.UNREGISTER_CLIENT: cons.unregister_client,
            rc.CHECK_CLIENT_CONFIG: cons.check_client_config,
            rc.GET_CONSUMER_LIST_BY_GROUP: cons.get_consumer_list_by_group,
            rc.UPDATE_CONSUMER_OFFSET: cons.update_consumer_offset,
            rc.QUERY_CONSUMER_OFFSET: cons.query_consumer_offset,
            rc.GET_MAX_OFFSET: cons.get_max_offset,
            rc.GET_MIN_OFFSET: cons.get_min_offset,
            rc.SEARCH_OFFSET_BY_TIMESTAMP: cons.search_offset_by_timestamp,
            rc.GET_EARLIEST_MSG_STORETIME: cons.get_earliest_msg_storetime,
            rc.LOCK_BATCH_MQ: cons.lock_batch_mq,
            rc.UNLOCK_BATCH_MQ: cons.unlock_batch_mq,
            rc.QUERY_MESSAGE: cons.query_message,
            rc.VIEW_MESSAGE_BY_ID: cons.view_message_by_id,
            rc.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
            rc.DELETE_TOPIC_IN_BROKER: admin.delete_topic,
            rc.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetProcessor(self).reset_offset,
            rc.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
            rc.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.update_and_create_subscription_group,
            rc.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.get_all_subscription_group,
            rc.GET_ALL_CONSUMER_OFFSET: admin.get_all_consumer_offset,
            rc.GET_ALL_DELAY_OFFSET: admin.get_all_delay_offset,
            rc.GET_BROKER_CONFIG: BrokerConfigProcessor(self).get_broker_config,  # secrets masked
            rc.GET_BROKER_RUNTIME_INFO: admin.get_broker_runtime_info,
            rc.GET_TOPIC_STATS_INFO: admin.get_topic_stats_info,
            rc.GET_CONSUME_STATS: admin.get_consume_stats,
            rc.GET_BROKER_CONSUME_STATS: admin.get_broker_consume_stats,
            rc.GET_CONSUMER_CONNECTION_LIST: admin.get_consumer_connection_list,
            rc.GET_PRODUCER_CONNECTION_LIST: admin.get_producer_connection_list,
            rc.DELETE_SUBSCRIPTIONGROUP: admin.delete_subscription_group,
            rc.QUERY_TOPIC_CONSUME_BY_WHO: admin.query_topic_consume_by_who,
            rc.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: admin.get_system_topic_list,
            rc.VIEW_BROKER_STATS_DATA: StatsProcessor(self).view_broker_stats_data,
            rc.SEND_REPLY_MESSAGE: reply.process,
            rc.SEND_REPLY_MESSAGE_V2: reply.process,
            rc.GET_CONSUMER_RUNNING_INFO: relay.get_consumer_running_info,
            rc.CONSUME_MESSAGE_DIRECTLY: relay.consume_message_directly,
            rc.QUERY_CONSUME_TIME_SPAN: relay.query_consume_time_span,
            rc.GET_TOPIC_CONFIG: relay.get_topic_config,  # RocketMQ 5's tools ask it
            rc.UPDATE_BROKER_CONFIG: BrokerConfigProcessor(self).update_broker_config,
            **self.pop.table(),  # RocketMQ 5 POP (broker/pop)
            # controller mode only (a replica's epochs; 4.x brokers do not know the code)
            **({ControllerRequestCode.GET_BROKER_EPOCH_CACHE: self.get_broker_epoch_cache}
               if self.managed else {}),
        }

    def get_broker_epoch_cache(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE (1007): this replica's epochs and CommitLog end (controller
        mode; a slave asks its master before it replicates, the master its slaves)."""
        if self.epoch_file is None or self._store is None:
            return request.response(ResponseCode.SYSTEM_ERROR, "not in controller mode")
        end = self._store.max_phys_offset
        cache = EpochEntryCache(
            self.bcfg.broker_cluster_name, self.bcfg.broker_name,
            self.replica_id if self.replica_id is not None else self.broker_id,
            self.epoch_file.cache(end), end,
        )
        return request.response(ResponseCode.SUCCESS, None, {}, cache.encode())

    # ------------------------------------------------------------------ lifecycle

    def _load_configs(self) -> None:
        """Blocking: read the config files (run in a worker thread)."""
        root = config_dir(self.settings.store.store_path_root_dir)
        self.topics.load(read_file(f"{root}/{TOPICS_FILE}"))
        self.offsets.load(read_file(f"{root}/{CONSUMER_OFFSET_FILE}"))
        self.groups.load(read_file(f"{root}/{SUBSCRIPTION_GROUP_FILE}"))
        for name in self.pop.file_names():
            self.pop.load(name, read_file(f"{root}/{name}"))

    async def persist(self, *, everything: bool = False) -> None:
        """Write the config files whose tables changed (all of them with ``everything``)."""
        root = config_dir(self.settings.store.store_path_root_dir)
        jobs: list[tuple[str, bytes]] = []
        if everything or self.topics.changed:
            self.topics.changed = False
            jobs.append((f"{root}/{TOPICS_FILE}", self.topics.encode()))
        if everything or self.groups.changed:
            self.groups.changed = False
            jobs.append((f"{root}/{SUBSCRIPTION_GROUP_FILE}", self.groups.encode()))
        if everything or self.offsets.changed:
            self.offsets.changed = False
            jobs.append((f"{root}/{CONSUMER_OFFSET_FILE}", self.offsets.encode()))
        jobs += [(f"{root}/{name}", data) for name, data in self.pop.take_changes(everything)]
        if self._schedule is not None and (everything or self._schedule.offsets.changed):
            self._schedule.offsets.changed = False
            jobs.append((f"{root}/{DELAY_OFFSET_FILE}", self._schedule.offsets.encode()))
        for path, data in jobs:
            try:
                await trio.to_thread.run_sync(write_atomically, path, data)
            except OSError as exc:
                self.log.error("persist failed", path=path, error=str(exc))

    async def run(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        if self.settings.controller_mode.enable and not self.managed:
            # controller mode: the replicas manager runs the broker in the role it is given
            self.replicas = ReplicasManager(self, functools.partial(
                BrokerNode, node=self.node, clock_ms=self.now_ms,
                config_file=self.config_file, supervisor=self.supervisor, managed=True,
            ))
            await self.replicas.run(task_status=task_status)
            return
        bcfg = self.bcfg
        scfg = self.settings.store
        await trio.to_thread.run_sync(self._load_configs)
        dcfg = self.settings.dledger
        store: MessageStore
        dledger: DLedgerCommitLog | None = None
        if dcfg.enable:
            store, dledger = await trio.to_thread.run_sync(
                lambda: open_dledger_store(scfg, dcfg, on_arrival=self._on_arrival)
            )
        else:
            store = await trio.to_thread.run_sync(
                lambda: MessageStore.open(scfg, on_arrival=self._on_arrival)
            )
        self._store = store
        # a send answer held on a watermark that did not pass in time (send.py): the message
        # is stored; a DLedger entry that did not commit (in time, or in its term) is not
        store.answer_timeouts_with(timeout_answer)
        if dledger is not None:
            dledger.answer_failures_with(refused_answer)
        if not dcfg.enable and not self.is_slave:
            # a master serves what its store holds (the DLedger role and the replicas manager
            # do the same when they take the lead)
            adopted = self.topics.adopt_stored(list(store.cqs.queues))
            if adopted:
                self.log.warning("topics in the store but not in topics.json adopted",
                                 topics=adopted)
                self.topic_created(adopted[0])  # persist and register
        try:
            async with trio.open_nursery() as outer:
                self._ns_client = await self.supervisor.start(
                    outer, "namesrv_client", self._ns_client_task
                )
                try:
                    await self._serve(store, dledger, task_status)
                finally:
                    with trio.CancelScope(shield=True):
                        try:
                            await self._unregister_all()
                        finally:  # the shielded client must end, whatever unregistering did
                            self._ns_client_done.set()
        finally:
            with trio.CancelScope(shield=True):
                self.hold.wake_all()
                await self.persist(everything=True)
                await trio.to_thread.run_sync(store.close)
                self.log.info("broker stopped", broker_name=bcfg.broker_name)

    async def _ns_client_task(
        self, task_status: trio.TaskStatus[RemotingClient] = trio.TASK_STATUS_IGNORED
    ) -> None:
        # Shielded: the NameServer client outlives the broker's cancellation long enough to
        # send UNREGISTER_BROKER; it ends when _ns_client_done is set.
        self._ns_client_done = trio.Event()
        with trio.CancelScope(shield=True):
            creds = credentials_from(self.bcfg.acl_access_key, self.bcfg.acl_secret_key)
            hook = creds.sign if creds is not None else None
            async with open_remoting_client(node=f"{self.node}-ns", rpc_hook=hook) as client:
                task_status.started(client)
                await self._ns_client_done.wait()

    async def _serve(
        self,
        store: MessageStore,
        dledger: DLedgerCommitLog | None,
        task_status: trio.TaskStatus[tuple[str, int]],
    ) -> None:
        bcfg = self.bcfg
        scfg = self.settings.store
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._start_store(nursery, store, dledger)
            # parked pulls (long polling) are woken by this one task, not a task each
            processors = self.processors()
            await self.supervisor.start(nursery, "long_polling", self.hold.run)
            processors = await self._guarded(nursery, processors)
            address, fast_address = await self._listen(nursery, processors)
            await self._start_services(nursery, store)
            self.log.info(
                "broker started",
                broker_addr=self.broker_addr,
                fast_port=fast_address[1],
                cluster=bcfg.broker_cluster_name,
                broker_name=bcfg.broker_name,
                broker_id=bcfg.broker_id,
                role=scfg.broker_role.value,
                flush=scfg.flush_disk_type.value,
                namesrv=bcfg.namesrv_addr,
                store=scfg.store_path_root_dir,
            )
            task_status.started(address)

    async def _start_store(
        self, nursery: trio.Nursery, store: MessageStore, dledger: DLedgerCommitLog | None
    ) -> None:
        """The store's services: the DLedger member, or the store services and HA."""
        bcfg = self.bcfg
        if dledger is not None:
            # DLedger mode: the Raft member replaces the store services and HA; the role
            # handler makes this broker a master or a slave as the group elects
            self.dledger_role = DLedgerRoleHandler(self, store, dledger)
            await self.supervisor.start(
                nursery, "dledger_node",
                functools.partial(run_store_node, dledger, host=bcfg.bind_address,
                                  secret=bcfg.cluster_secret),
            )
            return
        await self.supervisor.start(nursery, "store_services", store_services.run, store)
        # Master/slave replication: every broker listens on haListenPort (a master serves its
        # slaves there); a SLAVE also runs the HA client toward its master, which it learns
        # from REGISTER_BROKER's answer. A SYNC_MASTER's send answers wait on its acks.
        self.ha = HAService(
            store, self.settings.ha, host=bcfg.bind_address,
            auth_secret=bcfg.ha_secret,
            on_peer_refused=self._ha_peer_refused,
            in_sync=self.in_sync,
        )
        self.ha_port = await self.supervisor.start(nursery, "ha", self.ha.run)
        self.config_listeners.append(self._ha_config_changed)

    async def _guarded(
        self, nursery: trio.Nursery, processors: dict[int, AnyProcessor]
    ) -> dict[int, AnyProcessor]:
        """``processors`` timed (/metrics), behind the ACL (aclEnable) and the name gate."""
        bcfg = self.bcfg
        if bcfg.metrics_port >= 0:
            self.metrics = BrokerMetrics(self)
            for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                         RequestCode.SEND_BATCH_MESSAGE):
                if code in processors:
                    processors[code] = timed(processors[code], self.metrics.send_latency)
        if bcfg.acl_enable:
            acl_path = bcfg.acl_file or default_acl_path(bcfg.rocketmq_home)
            acl = AclGuard(acl_path, node=self.node)
            await trio.to_thread.run_sync(acl.load)
            self.acl = acl
            self.topic_access = acl.topic_access
            processors = acl.wrap(processors)
            self.supervisor.spawn(nursery, "acl", acl.run)
        return self.name_gate.wrap(processors)

    async def _listen(
        self, nursery: trio.Nursery, processors: dict[int, AnyProcessor]
    ) -> tuple[tuple[str, int], tuple[str, int]]:
        """The client ports (listenPort, the fast port; their addresses) and /metrics."""
        bcfg = self.bcfg
        server = RemotingServer(
            ProcessorTable(processors, None),
            node=self.node,
            idle_timeout=float(bcfg.server_channel_max_idle_time_seconds),
            on_close=self._on_close,
            max_connections=bcfg.server_max_connections,
            max_connections_per_address=bcfg.server_max_connections_per_address,
            max_buffered_input_bytes=bcfg.server_max_buffered_input_bytes,
            partial_frame_timeout=bcfg.server_partial_frame_timeout_seconds,
        )
        self.server = server
        sup = self.supervisor
        self.address = address = await sup.start(
            nursery, "listener", server.serve, bcfg.bind_address, bcfg.listen_port
        )
        self.fast_address = fast_address = await sup.start(
            nursery, "fast_listener", server.serve, bcfg.bind_address, bcfg.fast_port
        )
        if self.metrics is not None:
            self.metrics_address = await sup.start(
                nursery, "metrics", functools.partial(
                    serve_metrics, build=self.metrics.build, host=bcfg.bind_address,
                    port=bcfg.metrics_port, node=self.node,
                    max_age_s=lambda: self.bcfg.metrics_cache_seconds,
                    token=lambda: self.bcfg.metrics_token,
                )
            )
        port = bcfg.advertised_listen_port or address[1]
        self.broker_addr = format_address(bcfg.broker_ip1, port)
        self.store_host = (bcfg.broker_ip1, port)
        return address, fast_address

    async def _start_services(self, nursery: trio.Nursery, store: MessageStore) -> None:
        """Delay levels, registration, housekeeping, persistence and the role's services."""
        scfg = self.settings.store
        sup = self.supervisor
        schedule = ScheduleMessageService(store, scfg.message_delay_level, self.store_host)
        root = config_dir(scfg.store_path_root_dir)
        schedule.offsets.load(
            await trio.to_thread.run_sync(read_file, f"{root}/{DELAY_OFFSET_FILE}")
        )
        self._schedule = schedule
        await self.register_all()
        sup.spawn(nursery, "register", self._register_loop)
        sup.spawn(nursery, "housekeeping", self._housekeeping_loop)
        sup.spawn(nursery, "stats_sampler", self._sample_loop)
        sup.spawn(nursery, "persist", self._persist_loop)
        sup.spawn(nursery, "pop_revive", self.pop.revive_loop)
        if self.dledger_role is not None:
            # role-specific services follow
            sup.spawn(nursery, "dledger_role", self.dledger_role.run)
        elif not self.is_slave:  # a slave's store refuses writes; the master delivers
            sup.spawn(nursery, "schedule", self._schedule_loop)
            sup.spawn(nursery, "transaction_check", self._transaction_check_loop)
        else:
            sup.spawn(nursery, "slave_sync", self._slave_sync_loop)
        if self.ha is not None and self._ha_needs_slave_hosts():
            sup.spawn(nursery, "ha_slave_hosts", self._ha_slave_hosts_loop)

    # ------------------------------------------------------------------ HA port access

    def _ha_needs_slave_hosts(self) -> bool:
        """The HA default allow-list needs this group's slave hosts: a master binding a
        non-loopback address with haAllowedSlaveAddresses unset."""
        return (
            not self.is_slave
            and not self.settings.ha.ha_allowed_slave_addresses.strip()
            and not is_loopback_host(self.bcfg.bind_address)
        )

    def _ha_config_changed(self) -> None:
        """UPDATE_BROKER_CONFIG installed settings: a new haAllowedSlaveAddresses applies to
        the next HA connections."""
        ha = self.ha
        if ha is not None and self.settings.ha.allow_list != ha.configured_allow_list:
            self._spawn(ha.set_allowed_addresses, self.settings.ha)

    def _ha_peer_refused(self) -> None:
        self._ha_hosts_now.set()

    async def _ha_slave_hosts_loop(self) -> None:
        """Keep the HA port's default allow-list = the hosts of this group's slaves in the
        NameServers' cluster info: after each registration period, and soon after a peer
        was refused (a slave that just registered)."""
        while True:
            await self.ha_slave_hosts_once()
            with trio.move_on_after(self.bcfg.register_period_s):
                await self._ha_hosts_now.wait()
            self._ha_hosts_now = trio.Event()
            await trio.sleep(HA_SLAVE_HOSTS_REFRESH_MIN_S)

    async def ha_slave_hosts_once(self) -> None:
        client = self._ns_client
        if client is None or self.ha is None:
            return
        timeout = self.bcfg.register_broker_timeout_mills / 1000.0
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        for addr in self.bcfg.namesrv_addrs:
            try:
                response = await client.invoke(addr, request, timeout)
                if response.code != ResponseCode.SUCCESS:
                    continue
                info = ClusterInfo.decode(bytes(response.body or b""))
            except (RemotingError, OSError, ValueError) as exc:
                self.log.info("cluster info for HA failed", namesrv=addr, error=str(exc))
                continue
            group = info.broker_addr_table.get(self.bcfg.broker_name)
            if group is None:
                continue
            hosts = []
            for broker_id, broker_addr in group.broker_addrs.items():
                host, sep, _port = broker_addr.rpartition(":")
                if broker_id != 0 and sep:
                    hosts.append(host.strip("[]"))
            self.ha.set_slave_hosts(hosts)
            return

    # ------------------------------------------------------------------ registration

    def _register_request(self) -> RemotingCommand:
        bcfg = self.bcfg
        body = RegisterBrokerBody(self.topics.wrapper()).encode()
        ha_ip = bcfg.broker_ip2 or bcfg.broker_ip1
        ha_port = self.ha_port if self.ha_port is not None else bcfg.ha_port
        ha_port = bcfg.advertised_ha_listen_port or ha_port
        header = RegisterBrokerRequestHeader(
            broker_name=bcfg.broker_name,
            broker_addr=self.broker_addr,
            cluster_name=bcfg.broker_cluster_name,
            ha_server_addr=format_address(ha_ip, ha_port),
            broker_id=self.broker_id,
            compressed=False,
            body_crc32=crc32(body) & 0x7FFFFFFF,
        )
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)

    async def register_all(self) -> None:
        """REGISTER_BROKER to every NameServer at once; failures are logged."""
        client = self._ns_client
        addrs = self.bcfg.namesrv_addrs
        if client is None or not addrs:
            return
        request = self._register_request()
        timeout = self.bcfg.register_broker_timeout_mills / 1000.0

        async def one(addr: str) -> None:
            try:
                response = await client.invoke(addr, request, timeout)
            except (RemotingError, OSError) as exc:
                self.log.warning("register broker failed", namesrv=addr, error=str(exc))
                return
            if response.code != ResponseCode.SUCCESS:
                self.log.warning(
                    "register broker refused",
                    namesrv=addr,
                    code=response.code,
                    remark=response.remark,
                )
                return
            self.register_count += 1
            self.log.debug("registered", namesrv=addr)
            if self.is_slave:
                result = RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields)
                if self.ha is not None:
                    self.ha.update_master_address(result.ha_server_addr or None)
                if result.master_addr and result.master_addr != self.master_addr:
                    self.master_addr = result.master_addr
                    self._slave_sync_now.set()

        async with trio.open_nursery() as nursery:
            for addr in addrs:
                nursery.start_soon(one, addr)

    async def topic_route(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC from the first NameServer that knows ``topic`` (POP's
        QUERY_ASSIGNMENT allocates every broker's queues); None when none answers."""
        client = self._ns_client
        if client is None:
            return None
        timeout = self.bcfg.register_broker_timeout_mills / 1000.0
        for addr in self.bcfg.namesrv_addrs:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": topic})
            try:
                response = await client.invoke(addr, request, timeout)
                if response.code == ResponseCode.SUCCESS:
                    return TopicRouteData.decode(bytes(response.body))
            except (RemotingError, OSError, ValueError) as exc:
                self.log.debug("topic route lookup failed", namesrv=addr, error=str(exc))
        return None

    async def _unregister_all(self) -> None:
        client = self._ns_client
        addrs = self.bcfg.namesrv_addrs
        if client is None or not addrs or not self.broker_addr:
            return
        bcfg = self.bcfg
        header = UnregisterBrokerRequestHeader(
            broker_name=bcfg.broker_name,
            broker_addr=self.broker_addr,
            cluster_name=bcfg.broker_cluster_name,
            broker_id=self.broker_id,
        )
        request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext_fields())

        async def one(addr: str) -> None:
            try:
                await client.invoke(addr, request, UNREGISTER_TIMEOUT_S)
                self.log.info("unregistered", namesrv=addr)
            except (RemotingError, OSError) as exc:
                self.log.warning("unregister broker failed", namesrv=addr, error=str(exc))

        with trio.move_on_after(UNREGISTER_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for addr in addrs:
                    nursery.start_soon(one, addr)

    async def _register_loop(self) -> None:
        period = self.bcfg.register_period_s
        while True:
            with trio.move_on_after(period):
                await self._register_now.wait()
            self._register_now = trio.Event()
            self._register_round += 1
            try:
                await self.register_all()
            finally:
                self._register_round_done = self._register_round
                self._register_round_ended.set()
                self._register_round_ended = trio.Event()

    # ------------------------------------------------------------------ slave synchronize

    async def _slave_sync_loop(self) -> None:
        """A slave copies its master's topic configs, consumer offsets, delay offsets and
        subscription groups (RocketMQ's SlaveSynchronize: codes 21, 43, 45, 201), at once when
        it learns its master and every SLAVE_SYNC_INTERVAL_S after."""
        while True:
            with trio.move_on_after(SLAVE_SYNC_INTERVAL_S):
                await self._slave_sync_now.wait()
            self._slave_sync_now = trio.Event()
            if self.master_addr is not None:
                await self.slave_sync_once(self.master_addr)

    async def slave_sync_once(self, master_addr: str) -> None:
        client = self._ns_client
        if client is None:
            return
        timeout = self.bcfg.register_broker_timeout_mills / 1000.0
        bodies: dict[int, bytes] = {}
        for code in (
            RequestCode.GET_ALL_TOPIC_CONFIG,
            RequestCode.GET_ALL_CONSUMER_OFFSET,
            RequestCode.GET_ALL_DELAY_OFFSET,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        ):
            try:
                response = await client.invoke(master_addr, RemotingCommand.request(code), timeout)
            except (RemotingError, OSError) as exc:
                self.log.warning("slave sync failed", master=master_addr, code=code, error=str(exc))
                return
            if response.code != ResponseCode.SUCCESS:
                self.log.warning(
                    "slave sync refused", master=master_addr, code=code, remark=response.remark
                )
                return
            bodies[code] = bytes(response.body)
        try:
            topics = bodies[RequestCode.GET_ALL_TOPIC_CONFIG]
            if topics.strip():
                self.topics.table.clear()  # the master's table replaces ours, as in 4.x
                self.topics.load(topics)
                self.topics.changed = True
            self.offsets.load(bodies[RequestCode.GET_ALL_CONSUMER_OFFSET])
            self.offsets.changed = True
            if self._schedule is not None:
                self._schedule.offsets.load(bodies[RequestCode.GET_ALL_DELAY_OFFSET])
                self._schedule.offsets.changed = True
            self.groups.load(bodies[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG])
            self.groups.changed = True
        except ValueError as exc:  # a body we cannot read: keep what we have
            self.log.warning("slave sync body unreadable", master=master_addr, error=str(exc))
            return
        self.slave_sync_count += 1
        self._persist_now.set()
        self.state_changed()

    # ------------------------------------------------------------------ housekeeping

    def _on_close(self, conn: Connection) -> None:
        groups = self.clients.channel_closed(conn)
        self.state_changed()
        for group in groups:
            self.log.info("consumer channel closed", group=group, remote=conn.peer)
            self.notify_consumer_ids_changed(group)

    async def _housekeeping_loop(self) -> None:
        interval = self.bcfg.client_housekeeping_interval_ms / 1000.0
        while True:
            await trio.sleep(interval)
            expired, groups = self.clients.scan_not_active(self.now_ms())
            for channel in expired:
                self.log.warning("client channel expired", remote=getattr(channel, "peer", "?"))
                if isinstance(channel, Connection):
                    await channel.aclose()
            for group in groups:
                self.notify_consumer_ids_changed(group)
            if expired:
                self.state_changed()
            self.locks_gc()

    async def _sample_loop(self) -> None:
        """The totals behind every TPS figure, sampled every RATE_SAMPLE_PERIOD_S (stats.py);
        the per-topic and per-group ones (metrics on) in steps, and less often when walking
        the queues costs more than 1/SAMPLE_COST_SHARE of the time."""
        while True:
            started = time.monotonic()
            self.stats.sample(started)
            self.stats.roll_day(self.now_ms())
            if self.metrics is not None:
                await run_steps(self.metrics.sample(started))
            cost = time.monotonic() - started
            await trio.sleep(max(RATE_SAMPLE_PERIOD_S - cost, cost * SAMPLE_COST_SHARE))

    def locks_gc(self) -> None:
        now = self.now_ms()
        for group, locks in list(self.locks.table.items()):
            for mq, lock in list(locks.items()):
                if now - lock.last_update_ms > self.locks.max_live_ms:
                    del locks[mq]
            if not locks:
                del self.locks.table[group]

    async def _persist_loop(self) -> None:
        interval = self.bcfg.flush_consumer_offset_interval_ms / 1000.0
        while True:
            with trio.move_on_after(interval):
                await self._persist_now.wait()
            self._persist_now = trio.Event()
            await self.persist()

    # ------------------------------------------------------------------ delay levels

    async def _schedule_loop(self) -> None:
        """A master's deliveries of delayed messages: the delay levels and the timer wheel."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._delay_level_loop)
            if self.settings.store.timer_wheel_enable:
                nursery.start_soon(self._timer_loop)

    async def _timer_loop(self) -> None:
        """Index timer messages as they arrive and deliver each slot when it is over; asleep
        until the next slot is due or a timer message arrives. msyncs the timer files every
        timerFlushIntervalMs while they change; closes them when the broker stops delivering
        (shutdown, or a role change to slave)."""
        timer = await self._open_timer_store()
        self.timer = timer
        flushed = timer.writes
        flush_at: int | None = None
        try:
            while True:
                self._timer_wake = trio.Event()
                try:
                    while timer.enqueue() >= TIMER_MAX_ENQUEUE_PER_ROUND:
                        await trio.lowlevel.checkpoint()
                    due = timer.deliver_due()
                except Exception as exc:  # a bad record must not stop delivery for good
                    self.log.error("timer delivery failed", error=repr(exc))
                    due = self.now_ms() + int(LOOP_ERROR_BACKOFF_S * 1000)
                if timer.writes != flushed:
                    now = self.now_ms()
                    if flush_at is None:
                        flush_at = now + self.settings.store.timer_flush_interval_ms
                    if now >= flush_at:
                        flushed, flush_at = timer.writes, None
                        await trio.to_thread.run_sync(timer.flush)
                    else:
                        due = flush_at if due is None else min(due, flush_at)
                if due is None:
                    await self._timer_wake.wait()
                    continue
                with trio.move_on_after(max(0.0, (due - self.now_ms()) / 1000.0)):
                    await self._timer_wake.wait()
        finally:
            self.timer = None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(timer.close)

    async def _open_timer_store(self) -> TimerStore:
        """The timer store, opened once a timer message exists (or its files do): a broker
        that never saw one writes no timer file. A disk that cannot hold the files (ENOSPC)
        delays the timers, logged and tried again; it never stops the broker."""
        scfg = self.settings.store
        had_files = await trio.to_thread.run_sync(os.path.exists, scfg.timer_check_path)
        while True:
            self._timer_wake = trio.Event()
            if had_files or (
                self.store.get_max_offset_in_queue(TIMER_TOPIC, 0) > 0
            ):
                timer = TimerStore(self.store, scfg, self.store_host, self.now_ms)
                try:
                    await trio.to_thread.run_sync(timer.open)
                    return timer
                except OSError as exc:
                    self.log.error("timer store cannot open: timers wait", error=str(exc))
                    with contextlib.suppress(Exception):
                        await trio.to_thread.run_sync(timer.close)
                    await trio.sleep(LOOP_ERROR_BACKOFF_S)  # back-off timer, then again
                    continue
            await self._timer_wake.wait()

    async def _delay_level_loop(self) -> None:
        schedule = self.schedule
        while True:
            self._schedule_wake = trio.Event()
            next_due: int | None = None
            now = self.now_ms()
            for level in range(1, schedule.max_level + 1):
                try:
                    _moved, due = schedule.deliver_due(level, now)
                except Exception as exc:  # a bad record must not stop delivery for good
                    self.log.error("schedule delivery failed", level=level, error=repr(exc))
                    due = now + int(LOOP_ERROR_BACKOFF_S * 1000)
                if due is not None and (next_due is None or due < next_due):
                    next_due = due
            if next_due is None:
                await self._schedule_wake.wait()
                continue
            delay_s = max(0.0, (next_due - self.now_ms()) / 1000.0)
            with trio.move_on_after(delay_s):
                await self._schedule_wake.wait()

    # ------------------------------------------------------------------ transactions

    async def _transaction_check_loop(self) -> None:
        while True:
            await self._check_interval.wait()
            bcfg = self.bcfg  # (transactionTimeOut and transactionCheckMax are live keys too)
            if self.topics.select(HALF_TOPIC) is None:
                # Apache's first check pass creates the half topic (1 queue, read-write)
                # whether or not a transaction was ever sent: topic lists match its
                _tc, created = self.topics.create_in_send_message_back(
                    HALF_TOPIC, 1, PermName.PERM_RW
                )
                if created:
                    self.topic_created(HALF_TOPIC)
                continue
            try:
                checks = self.transactions.due_checks(
                    self.store,
                    self.now_ms(),
                    bcfg.transaction_timeout_ms,
                    bcfg.transaction_check_max,
                )
            except Exception as exc:
                self.log.error("transaction check failed", error=repr(exc))
                continue
            for check in checks:
                conn = self._check_recipient(check)
                if conn is None:
                    continue
                header = CheckTransactionStateRequestHeader(
                    tran_state_table_offset=check.queue_offset,
                    commit_log_offset=check.commitlog_offset,
                    msg_id=check.msg_id,
                    transaction_id=check.transaction_id,
                    offset_msg_id=check.offset_msg_id,
                )
                request = RemotingCommand.request(
                    RequestCode.CHECK_TRANSACTION_STATE,
                    header.to_ext_fields(),
                    check.body,
                    oneway=True,
                )
                try:
                    await conn.invoke_oneway(request)
                except RemotingError as exc:
                    self.log.info("transaction check send failed", error=str(exc))

    def _check_recipient(self, check: HalfCheck) -> Connection | None:
        """The producer connection to ask about ``check`` (``transaction.check_recipient``:
        under ACL one whose account may publish to its topic); None, logged, if none."""
        producers = [
            p for p in self.clients.producer_infos(check.group) if isinstance(p.channel, Connection)
        ]
        if not producers:
            self.log.info("no producer online for check", group=check.group)
            return None
        acl = self.acl
        may_publish = None if acl is None else (
            lambda p, topic: acl.account_may(p.access_key, p.addr, (topic,), PUB)
        )
        chosen = check_recipient(producers, check.topic, may_publish)
        if chosen is None:
            withheld = self.transactions.withhold(self.now_ms())
            if withheld:
                self.log.warning(
                    "transaction check withheld: no producer of the group may publish to the "
                    "topic", group=check.group, topic=check.topic, withheld=withheld,
                )
            return None
        return chosen.channel if isinstance(chosen.channel, Connection) else None

    # ------------------------------------------------------------------ observing

    def state_changed(self) -> None:
        """Client tables or parked pulls changed: wake ``wait_until`` callers."""
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    async def wait_until(self, predicate: Callable[[BrokerNode], bool]) -> None:
        """Return once ``predicate(self)`` holds, re-checked whenever clients join or leave or
        a pull parks. Bound it with ``trio.fail_after``."""
        while not predicate(self):
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()
