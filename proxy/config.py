"""The proxy's settings: its port, its NameServers and the named limits of its gRPC port."""

from __future__ import annotations

from typing import Final

import attrs

from .renewal import RENEW_POLICY_MS

#: Apache's Proxy listens for gRPC on 8081 (``grpcServerPort``).
DEFAULT_GRPC_PORT: Final = 8081
#: the largest message body a client may send (RocketMQ's ``maxMessageSize``, 4 MiB); told to
#: the SDKs in Settings.publishing.max_body_size.
DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024
#: the remoting port's defaults (cluster/remoting/server.py), mirrored on the gRPC port
DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
DEFAULT_PARTIAL_FRAME_TIMEOUT_S: Final = 30.0
#: a signature older or newer than this is refused (both SDKs sign the time of the call)
DEFAULT_MAX_SIGNATURE_SKEW_S: Final = 15 * 60.0
#: a receive's long poll, at least and at most (Apache's proxy's
#: ``grpcClientConsumerMinLongPollingTimeoutMillis`` and ``...MaxLongPollingTimeoutMillis``)
DEFAULT_MIN_LONG_POLLING_MS: Final = 5_000
DEFAULT_MAX_LONG_POLLING_MS: Final = 20_000
#: a received message's invisible time (Apache's proxy's ``defaultInvisibleTimeMills``,
#: ``minInvisibleTimeMillsForRecv`` and ``maxInvisibleTimeMills``): what a receive asking
#: ``auto_renew`` gets, the least a receive may ask for and the most any request may
DEFAULT_INVISIBLE_TIME_MS: Final = 60_000
DEFAULT_MIN_INVISIBLE_TIME_MS_FOR_RECV: Final = 10_000
DEFAULT_MAX_INVISIBLE_TIME_MS: Final = 12 * 3600 * 1000

#: the command-line flags of the invisible-time settings (``mqproxy``'s; ``rmq-cluster up``
#: takes each with ``--proxy-`` before it): flag -> (setting, its default, help naming Apache's
#: setting). A negative value is refused, as is a default invisible time of 0.
INVISIBLE_FLAGS: Final = {
    "--min-invisible-time-ms-for-recv": (
        "min_invisible_time_ms_for_recv", DEFAULT_MIN_INVISIBLE_TIME_MS_FOR_RECV,
        "the least invisible time a receive may ask for (minInvisibleTimeMillsForRecv)"),
    "--max-invisible-time-ms": (
        "max_invisible_time_ms", DEFAULT_MAX_INVISIBLE_TIME_MS,
        "the most a receive or a change of invisible time may ask for, 0: no bound "
        "(maxInvisibleTimeMills)"),
    "--default-invisible-time-ms": (
        "default_invisible_time_ms", DEFAULT_INVISIBLE_TIME_MS,
        "the invisible time of a receive asking auto_renew, as PushConsumers do "
        "(defaultInvisibleTimeMills)"),
}


@attrs.frozen
class ProxyConfig:
    namesrv_addr: str = "127.0.0.1:9876"
    bind_address: str = "0.0.0.0"
    grpc_port: int = DEFAULT_GRPC_PORT
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: one gRPC message (a request's protobuf): a SendMessage may carry a few bodies
    max_grpc_message_bytes: int = 2 * DEFAULT_MAX_BODY_BYTES + 64 * 1024
    #: HTTP/2 frames larger than this are a connection error (16 KiB is HTTP/2's floor)
    max_frame_bytes: int = 16 * 1024
    #: HTTP/2 header block (HPACK-decoded) per request
    max_header_list_bytes: int = 16 * 1024
    max_streams_per_connection: int = 100
    #: request bytes buffered per connection across all its streams before it is closed
    #: (room for two of the largest requests at once)
    max_connection_input_bytes: int = 24 * 1024 * 1024
    #: request bytes buffered across every connection together (the remoting port's
    #: ``serverMaxBufferedInputBytes`` on a broker); the connection that passes it is closed
    max_total_input_bytes: int = 256 * 1024 * 1024
    #: open connections (``serverMaxConnections``); once reached, a newcomer from an address
    #: holding at least two fewer than the address holding the most takes the place of that
    #: address's connection idle longest (as on the remoting port), else it is closed at once
    max_connections: int = 1024
    #: connections from one peer address (a tenth of ``max_connections``, as the remoting
    #: port's ``serverMaxConnectionsPerAddress``): one address cannot fill the proxy; a
    #: newcomer over it is closed at once
    max_connections_per_address: int = 102
    #: telemetry commands queued on one stream before the stream is reset
    max_telemetry_backlog: int = 16
    #: a connection must finish its TLS handshake, and then send HTTP/2's preface, within
    #: this long (each)
    handshake_timeout_s: float = 10.0
    #: a connection with no call open and none started for this long is closed (GOAWAY
    #: NO_ERROR): the remoting port's ``serverChannelMaxIdleTimeSeconds`` (an SDK heartbeats
    #: every 10 s and keeps its Telemetry stream open, so only a deserted connection goes)
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    #: an HTTP/2 frame, a header block or a request (its gRPC message, and a unary call's end)
    #: started must be complete within this long, else the connection is closed: the remoting
    #: port's ``serverPartialFrameTimeoutSeconds`` (a slow sender holds input budget no longer)
    partial_frame_timeout_s: float = DEFAULT_PARTIAL_FRAME_TIMEOUT_S
    #: the remoting side's call timeout (NameServer and broker)
    call_timeout_s: float = 5.0
    #: TLS on the gRPC port: a PEM certificate (chain) and its key; both None: plain text
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: plain_acl.yml: when set, every RPC must carry a 5.x signature of one of its accounts
    #: (proxy/auth.py) and the proxy signs its remoting calls with ``acl_account``'s keys
    acl_file: str | None = None
    #: the account the proxy itself uses toward NameServers and brokers (None: the file's
    #: first admin account)
    acl_account: str | None = None
    #: how far a signed request's ``x-mq-date-time`` may lie from the proxy's clock
    max_signature_skew_s: float = DEFAULT_MAX_SIGNATURE_SKEW_S
    #: a receive long-polls at least this long (``grpcClientConsumerMinLongPollingTimeoutMillis``):
    #: one whose client's deadline leaves less is refused (ILLEGAL_POLLING_TIME)
    grpc_client_consumer_min_long_polling_timeout_ms: int = DEFAULT_MIN_LONG_POLLING_MS
    #: and at most this long (``grpcClientConsumerMaxLongPollingTimeoutMillis``), also the long
    #: poll a consumer's Settings answer names
    grpc_client_consumer_max_long_polling_timeout_ms: int = DEFAULT_MAX_LONG_POLLING_MS
    #: the invisible time of what a receive asking ``auto_renew`` pops, whatever it asked
    #: (``defaultInvisibleTimeMills``; the SDKs' PushConsumers ask auto_renew)
    default_invisible_time_ms: int = DEFAULT_INVISIBLE_TIME_MS
    #: a receive not asking ``auto_renew`` must ask at least this invisible time
    #: (``minInvisibleTimeMillsForRecv``), else it is refused (ILLEGAL_INVISIBLE_TIME)
    min_invisible_time_ms_for_recv: int = DEFAULT_MIN_INVISIBLE_TIME_MS_FOR_RECV
    #: and at most this (``maxInvisibleTimeMills``), as must a ChangeInvisibleDuration (whose
    #: least is 0); 0 or less: no bound
    max_invisible_time_ms: int = DEFAULT_MAX_INVISIBLE_TIME_MS

    #: a receive asking ``auto_renew`` has its messages' invisible time renewed by the proxy
    #: until they are acked (``enableProxyAutoRenew``; proxy/renewal.py); off: such a receive
    #: must ask an invisible time within the limits, as any other
    enable_proxy_auto_renew: bool = True
    #: a kept handle is renewed once its invisible time ends within this long
    #: (``renewAheadTimeMillis``), on a scan every ``renew_schedule_period_ms``
    #: (``renewSchedulePeriodMillis``), until this long after its pop (``renewMaxTimeMillis``:
    #: then given back with the group's retry delay)
    renew_ahead_time_ms: int = 10_000
    renew_schedule_period_ms: int = 5_000
    renew_max_time_ms: int = 3 * 3600 * 1000
    #: a renewal that fails is tried again at the next scans up to this often in a row
    #: (``maxRenewRetryTimes``)
    max_renew_retry_times: int = 3
    #: the invisible time the kept handles of a client gone are given back with
    #: (``invisibleTimeMillisWhenClear``)
    invisible_time_millis_when_clear: int = 1_000
    #: a client that neither heartbeats nor receives for this long is gone
    #: (``channelExpiredTimeout``): its kept handles are given back
    channel_expired_timeout_ms: int = 120_000
    #: the invisible time of a handle's first, second, ... renewal (Apache's fixed
    #: ``RenewStrategyPolicy``: 1 m, 3 m, 5 m, 10 m, 30 m, then 1 h)
    renew_policy_ms: tuple[int, ...] = RENEW_POLICY_MS
    #: receipt handles kept for renewal at most (one per message handed out to an auto_renew
    #: receive and not yet acked); past it a message is not renewed (its 60 s hold)
    max_renewed_handles: int = 100_000
    #: renewals under way at most (``renewThreadPoolQueueCapacity``), of which this many
    #: call the broker at once (``renewMaxThreadPoolNums``)
    max_renewals_in_flight: int = 300
    renew_concurrency: int = 4

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None
