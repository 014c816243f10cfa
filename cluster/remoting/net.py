"""Remoting, the public face: everything a node or a client imports to serve or call.

The pieces live in their own modules, pure cores below Trio shells:

* pure: ``codec`` (frames), ``dispatch`` (processors, ``Dispatcher``, ``Deferred``, ``HELD``),
  ``held`` (``HeldAnswers``), ``errors``, ``address``, ``input_budget`` (read-side memory
  budget), ``connection_state`` (one connection's state machine: calls, opaques, requests in
  flight, what to send);
* shells: ``sockets`` (non-blocking sockets with trio waits), ``connection`` (a connection's
  tasks), ``server`` (accept loop, limits), ``client_pool`` (one connection per address).
"""

from __future__ import annotations

from rmq_cluster.cluster.remoting.address import format_address, parse_address
from rmq_cluster.cluster.remoting.client_pool import (
    DEFAULT_CONNECT_TIMEOUT_S,
    RemotingClient,
    open_remoting_client,
    sole_exception,
)
from rmq_cluster.cluster.remoting.connection import (
    DEFAULT_CALL_TIMEOUT_S,
    LEND_IDLE_S,
    MAX_OUTBOUND_BUFFER_BYTES,
    WRITE_TIMEOUT_S,
    Connection,
)
from rmq_cluster.cluster.remoting.connection_state import (
    BUSY_LOG_EVERY,
    LEND_QUIET_S,
    MAX_IN_FLIGHT_REQUESTS,
)
from rmq_cluster.cluster.remoting.dispatch import (
    HELD,
    AsyncProcessor,
    Deferred,
    Dispatcher,
    Held,
    Processor,
    ProcessorCheck,
    SyncProcessor,
    checked,
)
from rmq_cluster.cluster.remoting.errors import (
    OVERLOAD_REMARK,
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
    RemotingUnsentError,
)
from rmq_cluster.cluster.remoting.held import HeldAnswers
from rmq_cluster.cluster.remoting.input_budget import (
    INPUT_RESERVE_BYTES,
    MIN_MAX_BUFFERED_INPUT_BYTES,
    READ_CHUNK_BYTES,
    SMALL_FRAME_BYTES,
)
from rmq_cluster.cluster.remoting.server import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_BUFFERED_INPUT_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_PARTIAL_FRAME_TIMEOUT_S,
    RemotingServer,
    serve_dispatcher,
)

__all__ = [
    "BUSY_LOG_EVERY", "DEFAULT_CALL_TIMEOUT_S", "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S", "DEFAULT_MAX_BUFFERED_INPUT_BYTES", "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_PARTIAL_FRAME_TIMEOUT_S", "HELD", "INPUT_RESERVE_BYTES", "LEND_IDLE_S",
    "LEND_QUIET_S", "MAX_IN_FLIGHT_REQUESTS", "MAX_OUTBOUND_BUFFER_BYTES",
    "MIN_MAX_BUFFERED_INPUT_BYTES", "OVERLOAD_REMARK", "READ_CHUNK_BYTES", "SMALL_FRAME_BYTES",
    "WRITE_TIMEOUT_S", "AsyncProcessor", "Connection", "Deferred", "Dispatcher", "Held",
    "HeldAnswers", "Processor", "ProcessorCheck", "RemotingClient", "RemotingClosedError",
    "RemotingConnectError", "RemotingError", "RemotingServer", "RemotingTimeoutError",
    "RemotingUnsentError", "SyncProcessor", "checked", "format_address", "open_remoting_client",
    "parse_address", "serve_dispatcher", "sole_exception",
]
