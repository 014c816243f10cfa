"""The dashboard's settings and named limits (frozen values; no I/O)."""

from __future__ import annotations

from typing import Final

import attrs

#: Default listening address and port: loopback only unless told otherwise.
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8088
#: Largest request body accepted (forms are small); larger ones get 413 before being read.
MAX_REQUEST_BYTES: Final = 16 * 1024
#: Largest header block Hypercorn keeps for one request.
MAX_HEADER_BYTES: Final = 16 * 1024
#: HTTP connections open at once; more are closed as they arrive.
MAX_CONNECTIONS: Final = 256
#: Sessions kept at once (the oldest goes first) and how long an idle one lives.
MAX_SESSIONS: Final = 256
SESSION_IDLE_S: Final = 8 * 3600.0
#: Live (server-sent events) streams served at once, and their refresh period.
MAX_LIVE_STREAMS: Final = 32
LIVE_INTERVAL_S: Final = 1.0
#: Logins being checked against the cluster at once (each opens a client); more wait.
MAX_CONCURRENT_LOGINS: Final = 4
#: One admin call's deadline, and a whole page's.
CALL_TIMEOUT_S: Final = 3.0
PAGE_TIMEOUT_S: Final = 10.0
#: Message bodies: bytes shown as text/JSON, and as hex.
MAX_BODY_SHOWN: Final = 64 * 1024
MAX_HEX_SHOWN: Final = 4 * 1024
#: Rows of a long list (topics, groups) laid out at once; the filter reaches the rest (a
#: browser takes ~0.2 s to lay out 1 000 table rows on a 2-core machine; hidden rows cost none).
TABLE_PAGE_ROWS: Final = 100
#: Messages listed by one query.
MAX_MESSAGES_LISTED: Final = 64
#: Chaos runs listed (newest first) and the largest result.json read.
MAX_CHAOS_RUNS: Final = 50
MAX_RESULT_BYTES: Final = 4 * 1024 * 1024
#: The producer group the dashboard resends DLQ messages with.
RESEND_GROUP: Final = "RMQ_DASHBOARD_PRODUCER"


@attrs.frozen
class ClusterRef:
    """One cluster the dashboard shows, known by its NameServer address list."""

    name: str
    namesrv_addr: str
    #: controller mode: the controllers (``h:p;h:p;h:p``) asked for SyncStateSets and epochs
    controller_addr: str | None = None


@attrs.frozen
class DashboardSettings:
    clusters: tuple[ClusterRef, ...]
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: every page needs a login with a cluster account (checked by signing admin calls)
    acl: bool = False
    #: where chaos runs (result.json, timeline.svg) are looked for
    chaos_dirs: tuple[str, ...] = ()
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_sessions: int = MAX_SESSIONS
    max_connections: int = MAX_CONNECTIONS
    session_idle_s: float = SESSION_IDLE_S
    max_live_streams: int = MAX_LIVE_STREAMS
    live_interval_s: float = LIVE_INTERVAL_S
    call_timeout_s: float = CALL_TIMEOUT_S
    #: our controllers serve only peers that know it (``$RMQ_CLUSTER_SECRET``; never shown)
    cluster_secret: str | None = attrs.field(default=None, repr=False)
