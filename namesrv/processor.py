"""NameServer request handling (RocketMQ's ``DefaultRequestProcessor``) as a pure function.

``process(state, request, ctx)`` takes the state, one request and its context (time, connection)
and returns a ``Reply``: the response plus what the shell must do afterwards (persist the KV
table, apply a new config). No trio, no I/O.

Bad headers and bodies are answered with SYSTEM_ERROR and a remark, as RocketMQ's remoting layer
answers a ``RemotingCommandException``; codes the NameServer does not serve get
REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs

from ..cluster.acl.secret_keys import mask_secrets
from ..cluster.config import (
    ConfigError,
    config_keys,
    format_value,
    load_config,
    parse_properties,
)
from ..cluster.protocol.crc import crc32
from ..cluster.protocol.names import check_request, validate_queue_nums
from ..cluster.protocol.route import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    DataVersion,
    RegisterBrokerBody,
    RouteDecodeError,
    TopicConfigSerializeWrapper,
)
from ..cluster.remoting.apache_options import APACHE_SERVER_OPTIONS
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import RequestCode, ResponseCode, Version
from ..cluster.remoting.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    HeaderError,
    KVConfigHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from .config import NamesrvConfig, restart_only_changes
from .kv_config import KVConfigManager
from .route_info import RouteInfoManager

#: RocketMQ's ``FAQUrl.APPLY_TOPIC_URL`` as ``FAQUrl.suggestTodo`` appends it.
APPLY_TOPIC_TIP: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

#: Every request code this NameServer serves.
NAMESRV_REQUEST_CODES: Final = frozenset(
    {
        RequestCode.PUT_KV_CONFIG,
        RequestCode.GET_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        RequestCode.GET_TOPICS_BY_CLUSTER,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.GET_NAMESRV_CONFIG,
        RequestCode.QUERY_DATA_VERSION,
    }
)


@attrs.define
class NamesrvState:
    """Everything a NameServer node knows; ``process`` mutates it."""

    config: NamesrvConfig
    routes: RouteInfoManager
    kv: KVConfigManager

    @classmethod
    def create(cls, config: NamesrvConfig, kv: KVConfigManager | None = None) -> NamesrvState:
        return cls(
            config=config,
            routes=RouteInfoManager(broker_expired_s=config.broker_expired_s),
            kv=kv if kv is not None else KVConfigManager(),
        )


@attrs.frozen
class RequestContext:
    """Where and when a request arrived: ``now`` in seconds of the node's monotonic clock."""

    now: float
    conn_id: int | None = None
    remote: str = ""


@attrs.frozen
class Reply:
    """A response and the effects the shell must carry out."""

    response: RemotingCommand
    kv_changed: bool = False
    config_changed: bool = False


class _BadRequest(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _header_remark(exc: HeaderError) -> str:
    if exc.problem == "is required":
        return f"RemotingCommandException: the custom field <{exc.field}> is null"
    return f"RemotingCommandException: {exc}"


def _ok(
    request: RemotingCommand, *, ext_fields: dict[str, str] | None = None, body: bytes = b""
) -> Reply:
    return Reply(request.response(ResponseCode.SUCCESS, ext_fields=ext_fields, body=body))


# --------------------------------------------------------------------------- KV config


def _put_kv(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = KVConfigHeader.from_ext_fields(request.ext_fields)
    if h.value is None:
        raise HeaderError("KVConfigHeader", "value", "is required")
    state.kv.put(h.namespace, h.key, h.value)
    return Reply(request.response(ResponseCode.SUCCESS), kv_changed=True)


def _get_kv(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = KVConfigHeader.from_ext_fields(request.ext_fields)
    value = state.kv.get(h.namespace, h.key)
    if value is None:
        return Reply(
            request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {h.namespace} Key: {h.key}",
            )
        )
    return _ok(request, ext_fields=GetKVConfigResponseHeader(value=value).to_ext_fields())


def _delete_kv(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = KVConfigHeader.from_ext_fields(request.ext_fields)
    state.kv.delete(h.namespace, h.key)
    return Reply(request.response(ResponseCode.SUCCESS), kv_changed=True)


def _get_kv_list(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = GetKVListByNamespaceHeader.from_ext_fields(request.ext_fields)
    table = state.kv.list_namespace(h.namespace)
    if table is None:
        remark = f"No config item, Namespace: {h.namespace}"
        return Reply(request.response(ResponseCode.QUERY_NOT_FOUND, remark))
    return _ok(request, body=table.encode())


# --------------------------------------------------------------------------- brokers


def _register_broker(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
    body = bytes(request.body)
    if h.body_crc32 != 0 and (crc32(body) & 0x7FFFFFFF) != h.body_crc32:
        return Reply(request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match"))
    filters: tuple[str, ...] | None
    try:
        if not body:
            wrapper = TopicConfigSerializeWrapper()
            filters = ()
        elif request.version >= Version.V3_0_11:
            decoded = RegisterBrokerBody.decode(body, h.compressed)
            wrapper = decoded.topic_config_serialize_wrapper
            filters = decoded.filter_server_list
        else:
            wrapper = TopicConfigSerializeWrapper.decode(body)
            filters = None
    except RouteDecodeError as exc:
        raise _BadRequest(
            ResponseCode.SYSTEM_ERROR,
            f"RemotingCommandException: Failed to decode RegisterBrokerBody: {exc}",
        ) from None
    for tc in wrapper.topic_config_table.values():
        too_many = validate_queue_nums(tc.read_queue_nums, tc.write_queue_nums)
        if too_many is not None:
            remark = f"topic[{tc.topic_name}] in RegisterBrokerBody: {too_many}"
            raise _BadRequest(ResponseCode.SYSTEM_ERROR, remark)
    result = state.routes.register_broker(
        h.cluster_name,
        h.broker_addr,
        h.broker_name,
        h.broker_id,
        h.ha_server_addr,
        wrapper,
        filters,
        ctx.conn_id,
        ctx.now,
    )
    ext = RegisterBrokerResponseHeader(
        ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
    ).to_ext_fields()
    table = (
        state.kv.list_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        if state.config.return_order_topic_config_to_broker
        else None
    )
    return _ok(request, ext_fields=ext, body=b"" if table is None else table.encode())


def _unregister_broker(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = UnregisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
    state.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
    return _ok(request)


def _query_data_version(
    state: NamesrvState, request: RemotingCommand, ctx: RequestContext
) -> Reply:
    h = QueryDataVersionRequestHeader.from_ext_fields(request.ext_fields)
    try:
        version = DataVersion.decode(bytes(request.body)) if request.body else DataVersion()
    except RouteDecodeError as exc:
        raise _BadRequest(
            ResponseCode.SYSTEM_ERROR, f"RemotingCommandException: bad DataVersion: {exc}"
        ) from None
    routes = state.routes
    changed = routes.is_broker_topic_config_changed(h.broker_addr, version)
    if not changed:
        routes.update_broker_info_update_timestamp(h.broker_addr, ctx.now)
    ns_version = routes.query_broker_topic_config(h.broker_addr)
    return _ok(
        request,
        ext_fields=QueryDataVersionResponseHeader(changed=changed).to_ext_fields(),
        body=b"" if ns_version is None else ns_version.encode(),
    )


def _get_route(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
    standard = request.version >= Version.V4_9_4 or bool(h.accept_standard_json_only)
    conf = (
        state.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, h.topic)
        if state.config.order_message_enable
        else None
    )
    body = state.routes.topic_route_json(h.topic, standard=standard, order_topic_conf=conf)
    if body is None:
        return Reply(
            request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {h.topic}{APPLY_TOPIC_TIP}",
            )
        )
    return _ok(request, body=body)


def _cluster_info(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    return _ok(request, body=state.routes.cluster_info_json())


def _wipe_perm(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = WipeWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields)
    count = state.routes.wipe_write_perm_of_broker(h.broker_name)
    ext = WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count).to_ext_fields()
    return _ok(request, ext_fields=ext)


def _add_perm(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = AddWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields)
    count = state.routes.add_write_perm_of_broker(h.broker_name)
    ext = AddWritePermOfBrokerResponseHeader(add_topic_count=count).to_ext_fields()
    return _ok(request, ext_fields=ext)


def _delete_topic(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(request.ext_fields)
    state.routes.delete_topic(h.topic, h.cluster_name or None)
    return _ok(request)


def _all_topics(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    return _ok(request, body=state.routes.all_topics().encode())


def _topics_by_cluster(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    h = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields)
    return _ok(request, body=state.routes.topics_by_cluster(h.cluster).encode())


def _system_topics(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    return _ok(request, body=state.routes.system_topics().encode())


def _unit_topics(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    return _ok(request, body=state.routes.unit_topics().encode())


def _has_unit_sub(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    return _ok(request, body=state.routes.has_unit_sub_topics().encode())


def _has_unit_sub_ununit(
    state: NamesrvState, request: RemotingCommand, ctx: RequestContext
) -> Reply:
    return _ok(request, body=state.routes.has_unit_sub_ununit_topics().encode())


# --------------------------------------------------------------------------- config


def own_properties(config: NamesrvConfig) -> dict[str, str]:
    """Every key of ours and its value as RocketMQ prints them (``key=value``)."""
    keys = config_keys(NamesrvConfig)
    return {key: format_value(getattr(config, name)) for name, key in keys.items()}


def config_properties(config: NamesrvConfig) -> dict[str, str]:
    """What the NameServer answers: its keys, and Apache's Netty server options it has no
    setting for, at their defaults (``apache_options``)."""
    return {**APACHE_SERVER_OPTIONS, **own_properties(config)}


def format_config(config: NamesrvConfig) -> str:
    """What GET_NAMESRV_CONFIG answers and ``mqnamesrv -p`` prints: secrets masked."""
    shown = mask_secrets(config_properties(config))
    return "".join(f"{k}={v}\n" for k, v in shown.items())


def _get_config(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    return _ok(request, body=format_config(state.config).encode())


def _update_config(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    if not request.body:
        return _ok(request)
    try:
        text = bytes(request.body).decode("utf-8")
    except UnicodeDecodeError:
        return Reply(request.response(ResponseCode.SYSTEM_ERROR, "string2Properties error"))
    props = parse_properties(text)
    refused = state.config.black_listed(props)
    if refused:
        return Reply(request.response(ResponseCode.NO_PERMISSION, (
            f"{', '.join(refused)} cannot be updated by a request (configBlackList): "
            "edit the config file and restart")))
    merged = own_properties(state.config)
    merged.update({k: v for k, v in props.items() if k in merged})
    try:
        new = load_config(NamesrvConfig, merged).config
    except ConfigError as exc:
        return Reply(request.response(ResponseCode.SYSTEM_ERROR, f"bad config: {exc}"))
    fixed = restart_only_changes(state.config, new)
    if fixed:
        return Reply(request.response(ResponseCode.SYSTEM_ERROR, (
            f"{', '.join(fixed)} cannot change while the NameServer runs (it needs a restart): "
            "edit its config file and restart it")))
    changed = new != state.config
    state.config = new
    state.routes.broker_expired_s = new.broker_expired_s
    return Reply(request.response(ResponseCode.SUCCESS), config_changed=changed)


# --------------------------------------------------------------------------- dispatch

Handler = Callable[[NamesrvState, RemotingCommand, RequestContext], Reply]

HANDLERS: Final[dict[int, Handler]] = {
    RequestCode.PUT_KV_CONFIG: _put_kv,
    RequestCode.GET_KV_CONFIG: _get_kv,
    RequestCode.DELETE_KV_CONFIG: _delete_kv,
    RequestCode.REGISTER_BROKER: _register_broker,
    RequestCode.UNREGISTER_BROKER: _unregister_broker,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _get_route,
    RequestCode.GET_BROKER_CLUSTER_INFO: _cluster_info,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: _wipe_perm,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: _add_perm,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _all_topics,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: _delete_topic,
    RequestCode.GET_KVLIST_BY_NAMESPACE: _get_kv_list,
    RequestCode.GET_TOPICS_BY_CLUSTER: _topics_by_cluster,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: _system_topics,
    RequestCode.GET_UNIT_TOPIC_LIST: _unit_topics,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: _has_unit_sub,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: _has_unit_sub_ununit,
    RequestCode.UPDATE_NAMESRV_CONFIG: _update_config,
    RequestCode.GET_NAMESRV_CONFIG: _get_config,
    RequestCode.QUERY_DATA_VERSION: _query_data_version,
}
assert set(HANDLERS) == NAMESRV_REQUEST_CODES


def process(state: NamesrvState, request: RemotingCommand, ctx: RequestContext) -> Reply:
    """Answer one NameServer request; never raises for bad input."""
    handler = HANDLERS.get(request.code)
    if handler is None:
        return Reply(
            request.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        )
    bad = check_request(request)  # every topic name on the wire, before anything uses it
    if bad is not None:
        return Reply(request.response(ResponseCode.SYSTEM_ERROR, bad))
    try:
        return handler(state, request, ctx)
    except HeaderError as exc:
        return Reply(request.response(ResponseCode.SYSTEM_ERROR, _header_remark(exc)))
    except _BadRequest as exc:
        return Reply(request.response(exc.code, exc.remark))
