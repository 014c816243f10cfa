"""The NameServer node: the Trio shell around ``namesrv.processor`` and ``namesrv.route_info``.

``serve(config)`` listens (``bindAddress:listenPort``; port 0 = ephemeral), answers every 4.x
NameServer request, removes silent brokers every ``scanNotActiveBrokerInterval`` and removes a
broker at once when the connection it registered over closes. KV config changes are written to
``kvConfigPath`` (atomically, in a worker thread) before the request is answered.

NameServers are independent: nothing is shared or synchronised between nodes; brokers register
with each one.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import trio

from ..cluster.acl.guard import AclGuard, default_acl_path
from ..cluster.logging import get_logger
from ..cluster.metrics_server import serve_metrics
from ..cluster.node_main import NodeSupervisor
from ..cluster.remoting.address import format_address
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import RequestCode, ResponseCode
from ..cluster.remoting.connection import Connection
from ..cluster.remoting.processors import AnyProcessor, ProcessorTable
from ..cluster.remoting.server import RemotingServer
from .config import NamesrvConfig
from .kv_config import load_file, write_atomically
from .metrics import NamesrvMetrics
from .processor import (
    NAMESRV_REQUEST_CODES,
    NamesrvState,
    Reply,
    RequestContext,
    process,
)
from .route_info import RemovedBroker

#: Requests whose answer waits for kvConfig.json to be written.
_PERSISTING_CODES = frozenset({RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG})
#: Requests checked when aclEnable=true, admin accounts only: every request that changes the
#: cluster -- KV config, broker (un)registration and its liveness (QUERY_DATA_VERSION refreshes
#: a broker's timestamp, so a stranger could keep a dead broker routed), write permission,
#: topic deletion, config updates -- and the config read (GET_NAMESRV_CONFIG). Route, cluster,
#: topic-list and KV reads stay open, as RocketMQ's are. Brokers sign their calls with
#: ``aclAccessKey``/``aclSecretKey`` (an admin account of the NameServer's rules).
NAMESRV_ACL_CODES = frozenset(
    {
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.QUERY_DATA_VERSION,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.GET_NAMESRV_CONFIG,
    }
)
#: Requests that can change broker liveness without changing what routes look like.
_LIVENESS_CODES = frozenset(
    {RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.QUERY_DATA_VERSION}
)


class NamesrvServer:
    """One NameServer node. ``serve`` runs it; ``state`` and ``address`` are set once it started."""

    def __init__(
        self, config: NamesrvConfig, *, node: str = "namesrv",
        supervisor: NodeSupervisor | None = None,
    ) -> None:
        self.config = config
        self.node = node
        self.log = get_logger(node=node, role="namesrv")
        #: every service task runs under it: one that fails ends the node (node_main.py)
        self.supervisor = supervisor or NodeSupervisor(node=node, role="namesrv")
        self.state: NamesrvState | None = None
        self.address: tuple[str, int] | None = None
        self._changed = trio.Event()
        self._kv_lock = trio.Lock()
        #: Our id for each open connection (the route tables know connections by this id).
        self._conn_ids: dict[Connection, int] = {}
        self._connections: dict[int, Connection] = {}
        self._next_conn_id = itertools.count(1)
        #: Plain ACL on write requests (aclEnable=true) and /metrics (metricsPort >= 0).
        self.acl: AclGuard | None = None
        self.server: RemotingServer | None = None
        self.metrics_address: tuple[str, int] | None = None
        #: requests by code and registrations (counted always: a few integer adds), and the
        #: /metrics families
        self.metrics = NamesrvMetrics(
            node,
            routes=lambda: self._state.routes,
            connections=lambda: len(self.server.connections) if self.server else 0,
            acl_denials=lambda: self.acl.denials if self.acl else 0,
        )

    # ------------------------------------------------------------------ running

    async def serve(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        config = self.config
        kv = await trio.to_thread.run_sync(load_file, config.kv_config_path)
        self.state = NamesrvState.create(config, kv)
        self._notify()
        # Only KV writes wait (for the file); every other request is answered inline by the
        # connection's reader, its response batched with the others of the same read.
        processors: dict[int, AnyProcessor] = {
            code: self._handle if code in _PERSISTING_CODES else self._handle_inline
            for code in NAMESRV_REQUEST_CODES
        }
        if config.acl_enable:
            acl = AclGuard(
                config.acl_file or default_acl_path(config.rocketmq_home),
                node=self.node,
                guarded_codes=NAMESRV_ACL_CODES,
                admin_codes=NAMESRV_ACL_CODES,
            )
            await trio.to_thread.run_sync(acl.load)
            self.acl = acl
            processors = acl.wrap(processors)
        # any other code: ``process`` answers REQUEST_CODE_NOT_SUPPORTED (and it is counted)
        table = ProcessorTable(processors, self._handle_inline)
        server = RemotingServer(
            table,
            node=self.node,
            idle_timeout=float(config.server_channel_max_idle_time_seconds),
            on_connect=self._on_connect,
            on_close=self._on_close,
            max_connections=config.server_max_connections,
            max_connections_per_address=config.server_max_connections_per_address,
            max_buffered_input_bytes=config.server_max_buffered_input_bytes,
            partial_frame_timeout=config.server_partial_frame_timeout_seconds,
        )
        sup = self.supervisor
        async with trio.open_nursery() as nursery:
            bound: tuple[str, int] = await sup.start(
                nursery, "listener", server.serve, config.bind_address, config.listen_port
            )
            self.address = bound
            self.server = server
            sup.spawn(nursery, "scan_not_active_broker", self._scan_loop)
            if self.acl is not None:
                sup.spawn(nursery, "acl", self.acl.run)
            if config.metrics_port >= 0:
                self.metrics_address = await sup.start(
                    nursery, "metrics", functools.partial(
                        serve_metrics, self.metrics.render,
                        host=config.bind_address, port=config.metrics_port, node=self.node,
                        token=lambda: self._state.config.metrics_token,
                    )
                )
            self.log.info(
                "name server started",
                address=format_address(*bound),
                kv_config_path=config.kv_config_path,
                broker_expired_s=config.broker_expired_s,
                scan_interval_s=config.scan_interval_s,
                acl=self.acl is not None,
            )
            task_status.started(bound)

    @property
    def _state(self) -> NamesrvState:
        if self.state is None:
            raise RuntimeError("the name server is not serving")
        return self.state

    async def _scan_loop(self) -> None:
        while True:
            await trio.sleep(self._state.config.scan_interval_s)
            removed = self._state.routes.scan_not_active(trio.current_time())
            for broker in removed:
                self.log.warning(
                    "broker channel expired",
                    broker_addr=broker.broker_addr,
                    broker_name=broker.broker_name,
                    broker_id=broker.broker_id,
                    expired_s=self._state.config.broker_expired_s,
                )
                conn = self._connections.get(broker.conn_id) if broker.conn_id else None
                if conn is not None:
                    await conn.aclose()
            if removed:
                self._notify()

    # ------------------------------------------------------------------ requests

    def _process(self, conn: Connection, request: RemotingCommand) -> Reply:
        state = self._state
        generation = state.routes.generation
        registering = (
            request.ext_fields.get("brokerAddr")
            if request.code == RequestCode.REGISTER_BROKER
            else None
        )
        was_live = registering in state.routes.live_brokers
        reply = process(
            state,
            request,
            RequestContext(
                now=trio.current_time(), conn_id=self._conn_ids.get(conn), remote=conn.peer
            ),
        )
        self.metrics.request(request.code)
        new_broker = bool(registering) and not was_live and registering in state.routes.live_brokers
        if request.code == RequestCode.REGISTER_BROKER:
            self.metrics.registered(reply.response.code, new=new_broker)
        if new_broker:
            self.log.info(
                "new broker registered",
                broker_addr=registering,
                broker_name=request.ext_fields.get("brokerName"),
                broker_id=request.ext_fields.get("brokerId"),
                ha_server_addr=request.ext_fields.get("haServerAddr"),
                remote=conn.peer,
            )
        if reply.config_changed:
            self.config = state.config
            self.log.info("config updated", remote=conn.peer)
        if state.routes.generation != generation or request.code in _LIVENESS_CODES:
            self._notify()
        return reply

    def _handle_inline(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._process(conn, request).response

    async def _handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        reply = self._process(conn, request)
        if reply.kv_changed:
            error = await self._persist_kv()
            if error is not None:
                return request.response(ResponseCode.SYSTEM_ERROR, error)
        return reply.response

    async def _persist_kv(self) -> str | None:
        state = self._state
        async with self._kv_lock:
            data = state.kv.encode()  # the latest table, so writes never go back in time
            path = state.config.kv_config_path
            try:
                await trio.to_thread.run_sync(write_atomically, path, data)
            except OSError as exc:
                self.log.error("persist kvConfig failed", path=path, error=repr(exc))
                return f"persist kvConfig failed: {exc}"
        return None

    # ------------------------------------------------------------------ connections

    def _on_connect(self, conn: Connection) -> None:
        conn_id = next(self._next_conn_id)
        self._conn_ids[conn] = conn_id
        self._connections[conn_id] = conn

    def _on_close(self, conn: Connection) -> None:
        conn_id = self._conn_ids.pop(conn, None)
        if conn_id is None:
            return
        self._connections.pop(conn_id, None)
        if self.state is None:
            return
        removed: list[RemovedBroker] = self.state.routes.on_connection_closed(conn_id)
        for broker in removed:
            self.log.info(
                "broker channel destroyed, removed at once",
                broker_addr=broker.broker_addr,
                broker_name=broker.broker_name,
                broker_id=broker.broker_id,
                reason=conn.close_reason,
            )
        if removed:
            self._notify()

    # ------------------------------------------------------------------ observing

    def _notify(self) -> None:
        event, self._changed = self._changed, trio.Event()
        event.set()

    async def wait_until(self, predicate: Callable[[NamesrvState], bool]) -> None:
        """Return once ``predicate(state)`` holds; re-checked after every change of the tables.

        Bound it with ``trio.fail_after``.
        """
        while self.state is None or not predicate(self.state):
            await self._changed.wait()


async def serve(
    config: NamesrvConfig,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a NameServer until cancelled; ``task_status.started((host, port))`` once listening."""
    await NamesrvServer(config).serve(task_status=task_status)
