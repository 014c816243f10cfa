"""Typed views of ``extFields`` (RocketMQ's ``CommandCustomHeader`` classes).

Each header is a frozen attrs class whose fields carry their wire name, their kind and whether
they are required (Java's ``@CFNotNull``). ``from_ext_fields`` validates and names the bad field;
``to_ext_fields`` writes every non-None value as a string, as Java's reflection does.

Booleans: Java parses only "true" (any case) as true, but the C++ client 2.0 sends "0"/"1"
(docs/protocol/remoting.md, "extFields are strings"). We accept "1" as true and "0" as false so a
C++ batch send (``m="1"``) is stored as a batch, not as one message holding the batch blob.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, Self

import attrs

from .codec import ext_value_to_str

Kind = Literal["str", "int", "long", "bool"]

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class HeaderError(ValueError):
    """A required field is missing or a field does not parse; ``field`` names it (wire name)."""

    def __init__(self, header: str, field: str, problem: str) -> None:
        super().__init__(f"{header}: field {field!r} {problem}")
        self.header = header
        self.field = field
        self.problem = problem


def hfield(wire: str, kind: Kind = "str", *, required: bool = False, default: Any = None) -> Any:
    """Declare a header field: its wire name, its kind, and whether the peer must send it."""
    meta = {"wire": wire, "kind": kind, "required": required}
    return attrs.field(default=default, kw_only=True, metadata=meta)


_BOOLS = {"true": True, "false": False, "1": True, "0": False}


def _spec(cls: type) -> tuple[tuple[str, str, str, bool, Any], ...]:
    """(attribute, wire name, kind, required, default) per field, computed once per class."""
    spec = cls.__dict__.get("_wire_spec")
    if spec is None:
        spec = tuple(
            (f.name, f.metadata["wire"], f.metadata["kind"], f.metadata["required"], f.default)
            for f in attrs.fields(cls)
        )
        type.__setattr__(cls, "_wire_spec", spec)
    return spec


def _parse_slow(header: str, wire: str, kind: str, raw: Any) -> Any:
    """The careful path: coercion from JSON numbers/booleans, odd spellings, named errors."""
    text = ext_value_to_str(raw)
    if kind == "str":
        return text
    if kind == "bool":
        low = text.strip().lower()
        if low in _BOOLS:
            return _BOOLS[low]
        if low == "":
            return False
        raise HeaderError(header, wire, f"is not a boolean: {text!r}")
    lo, hi = _INT32 if kind == "int" else _INT64
    try:
        value = int(text.strip())
    except ValueError:
        raise HeaderError(header, wire, f"is not an integer: {text!r}") from None
    if not lo <= value <= hi:
        raise HeaderError(header, wire, f"is out of range for {kind}: {value}")
    return value


def _field_setter(cls: type, name: str) -> Any:
    """How the generated parser sets field ``name`` of a frozen ``cls``: its slot descriptor's
    ``__set__`` (one C call; ``object.__setattr__`` looks the name up each time), else
    ``object.__setattr__`` bound to the name."""
    for klass in cls.__mro__:
        slot = klass.__dict__.get(name)
        if slot is not None:
            if type(slot).__name__ == "member_descriptor":
                return slot.__set__
            break
    return lambda self, value: object.__setattr__(self, name, value)


def _field_lines(i: int, wire: str, kind: str, required: bool) -> list[str]:
    """The careful parser's lines for field ``i`` (its value in ``v``, set through ``_s{i}``)."""
    absent = "v is None" if kind == "str" else "v is None or v == ''"
    lines = [f"    if {absent}:"]
    if required:
        lines.append(f"        raise _missing(cls.__name__, {wire!r}, 'is required')")
    else:
        lines.append(f"        _s{i}(self, _d{i})")
    lines.append("    else:")
    if kind == "str":
        slow = f"_slow(cls.__name__, {wire!r}, 'str', v)"
        lines.append(f"        _s{i}(self, v if type(v) is str else {slow})")
    elif kind == "bool":
        lines.append("        b = _BOOLS.get(v) if type(v) is str else None")
        slow = f"_slow(cls.__name__, {wire!r}, 'bool', v)"
        lines.append(f"        _s{i}(self, b if b is not None else {slow})")
    else:
        lo, hi = _INT32 if kind == "int" else _INT64
        lines.append("        try:")
        lines.append("            x = int(v) if type(v) is str and v.isascii() else None")
        lines.append("        except ValueError:")
        lines.append("            x = None")
        lines.append(f"        if x is None or not {lo} <= x <= {hi}:")
        lines.append(f"            x = _slow(cls.__name__, {wire!r}, {kind!r}, v)")
        lines.append(f"        _s{i}(self, x)")
    return lines


def _compile_parser(cls: type, wires: tuple[str, ...] | None = None) -> Any:
    """Generate ``parse(ext) -> cls`` for one header class (what attrs does for ``__init__``):
    one straight-line function per class instead of a loop over field specs. ``wires`` reads the
    same fields under other wire names (SEND_MESSAGE_V2's letters into the long-name class).

    Two functions: the careful one checks and sets field after field and names the bad one;
    the one returned reads the required strings and integers in bulk (their presence with one
    ``try``, their types with one ``str.join`` each, the integers' ASCII with one
    ``isascii``) and hands anything unusual to the careful one, so both give the same header
    or the same error (tests/unit/remoting/test_header_parse_fastpath.py)."""
    spec = _spec(cls)
    names = wires or tuple(wire for _n, wire, _k, _r, _d in spec)
    env: dict[str, Any] = {
        "_new": object.__new__,
        "cls": cls,
        "_slow": _parse_slow,
        "_missing": HeaderError,
        "_BOOLS": _BOOLS,
    }
    careful = ["def careful(ext):", "    get = ext.get", "    self = _new(cls)"]
    for i, ((name, _wire, kind, required, default), wire) in enumerate(
        zip(spec, names, strict=True)
    ):
        env[f"_d{i}"] = default
        env[f"_s{i}"] = _field_setter(cls, name)
        careful.append(f"    v = get({wire!r})")
        careful += _field_lines(i, wire, kind, required)
    careful.append("    return self")
    exec("\n".join(careful), env)  # code generated from the class's own field specs
    exec("\n".join(_fast_lines(spec, names)), env)  # (the same: falls back to ``careful``)
    return env["parse"]


def _fast_lines(
    spec: tuple[tuple[str, str, str, bool, Any], ...], names: tuple[str, ...]
) -> list[str]:
    """``parse``'s lines: required strings (``r{i}``) and integers (``n{i}``) read in bulk, any
    other field as the careful parser reads it; whatever is unusual goes to ``careful``."""
    fields = list(enumerate(zip(spec, names, strict=True)))
    strs = [(i, w) for i, ((_n, _w, k, r, _d), w) in fields if r and k == "str"]
    ints = [(i, w, k) for i, ((_n, _w, k, r, _d), w) in fields if r and k in ("int", "long")]
    bulk = {i for i, _w in strs} | {i for i, _w, _k in ints}
    lines = ["def parse(ext):"]
    if strs or ints:
        lines.append("    try:")
        lines += [f"        r{i} = ext[{w!r}]" for i, w in strs]
        lines += [f"        n{i} = ext[{w!r}]" for i, w, _k in ints]
        lines += ["    except KeyError:", "        return careful(ext)", "    try:"]
        if strs:
            lines.append("        ''.join((" + "".join(f"r{i}, " for i, _w in strs) + "))")
        if ints:
            lines.append("        if not ''.join((" + "".join(f"n{i}, " for i, _w, _k in ints)
                         + ")).isascii():")
            lines.append("            return careful(ext)")
            lines += [f"        x{i} = int(n{i})" for i, _w, _k in ints]
        lines += ["    except (TypeError, ValueError):", "        return careful(ext)"]
    for kind, (lo, hi) in (("int", _INT32), ("long", _INT64)):  # (each kind's range at once)
        xs = ", ".join(f"x{i}" for i, _w, k in ints if k == kind)
        if "," in xs:
            lines += [f"    if not ({lo} <= min({xs}) and max({xs}) <= {hi}):",
                      "        return careful(ext)"]  # fmt: skip
        elif xs:
            lines += [f"    if not {lo} <= {xs} <= {hi}:", "        return careful(ext)"]
    lines += ["    get = ext.get", "    self = _new(cls)"]
    for i, ((_n, _w, kind, required, _d), wire) in fields:
        if i in bulk:
            lines.append(f"    _s{i}(self, {'r' if kind == 'str' else 'x'}{i})")
            continue
        lines.append(f"    v = get({wire!r})")
        lines += _field_lines(i, wire, kind, required)
    lines.append("    return self")
    return lines


def _compile_dumper(cls: type) -> Any:
    """Generate ``dump(self) -> dict[str, str]`` for one header class."""
    lines = ["def dump(self):", "    out = {}"]
    for name, wire, kind, _required, _default in _spec(cls):
        lines.append(f"    v = self.{name}")
        lines.append("    if v is not None:")
        if kind == "str":
            lines.append(f"        out[{wire!r}] = v if type(v) is str else str(v)")
        elif kind == "bool":
            lines.append(f"        out[{wire!r}] = 'true' if v else 'false'")
        else:
            lines.append(f"        out[{wire!r}] = str(v)")
    lines.append("    return out")
    env: dict[str, Any] = {}
    exec("\n".join(lines), env)  # code generated from the class's own field specs
    return env["dump"]


class CommandHeader:
    """Base of every typed header; subclasses are ``@attrs.frozen`` and use ``hfield``."""

    __slots__ = ()

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, Any]) -> Self:
        parse = cls.__dict__.get("_wire_parse")
        if parse is None:
            parse = _compile_parser(cls)
            type.__setattr__(cls, "_wire_parse", parse)
        return parse(ext)

    def to_ext_fields(self) -> dict[str, str]:
        cls = type(self)
        dump = cls.__dict__.get("_wire_dump")
        if dump is None:
            dump = _compile_dumper(cls)
            type.__setattr__(cls, "_wire_dump", dump)
        return dump(self)


# =========================================================================== NameServer


@attrs.frozen
class KVConfigHeader(CommandHeader):
    """PUT_KV_CONFIG / GET_KV_CONFIG / DELETE_KV_CONFIG (value only for PUT)."""

    namespace: str = hfield("namespace", required=True)
    key: str = hfield("key", required=True)
    value: str | None = hfield("value")


@attrs.frozen
class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = hfield("value")


@attrs.frozen
class GetKVListByNamespaceHeader(CommandHeader):
    namespace: str = hfield("namespace", required=True)


@attrs.frozen
class RegisterBrokerRequestHeader(CommandHeader):
    broker_name: str = hfield("brokerName", required=True)
    broker_addr: str = hfield("brokerAddr", required=True)
    cluster_name: str = hfield("clusterName", required=True)
    ha_server_addr: str = hfield("haServerAddr", required=True)
    broker_id: int = hfield("brokerId", "long", required=True)
    compressed: bool = hfield("compressed", "bool", default=False)
    body_crc32: int = hfield("bodyCrc32", "int", default=0)


@attrs.frozen
class RegisterBrokerResponseHeader(CommandHeader):
    ha_server_addr: str | None = hfield("haServerAddr")
    master_addr: str | None = hfield("masterAddr")


@attrs.frozen
class UnregisterBrokerRequestHeader(CommandHeader):
    broker_name: str = hfield("brokerName", required=True)
    broker_addr: str = hfield("brokerAddr", required=True)
    cluster_name: str = hfield("clusterName", required=True)
    broker_id: int = hfield("brokerId", "long", required=True)


@attrs.frozen
class QueryDataVersionRequestHeader(CommandHeader):
    broker_name: str = hfield("brokerName", required=True)
    broker_addr: str = hfield("brokerAddr", required=True)
    cluster_name: str = hfield("clusterName", required=True)
    broker_id: int = hfield("brokerId", "long", required=True)


@attrs.frozen
class QueryDataVersionResponseHeader(CommandHeader):
    changed: bool = hfield("changed", "bool", required=True)


@attrs.frozen
class GetRouteInfoRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)
    accept_standard_json_only: bool | None = hfield("acceptStandardJsonOnly", "bool")


@attrs.frozen
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str = hfield("brokerName", required=True)


@attrs.frozen
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipe_topic_count: int = hfield("wipeTopicCount", "int", required=True)


@attrs.frozen
class AddWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str = hfield("brokerName", required=True)


@attrs.frozen
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    add_topic_count: int = hfield("addTopicCount", "int", required=True)


@attrs.frozen
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)
    cluster_name: str | None = hfield("clusterName")


@attrs.frozen
class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: str = hfield("cluster", required=True)


# =========================================================================== producer


@attrs.frozen
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10) with long names; SEND_MESSAGE_V2/SEND_BATCH_MESSAGE use the letters."""

    producer_group: str = hfield("producerGroup", required=True)
    topic: str = hfield("topic", required=True)
    default_topic: str = hfield("defaultTopic", required=True)
    default_topic_queue_nums: int = hfield("defaultTopicQueueNums", "int", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    sys_flag: int = hfield("sysFlag", "int", required=True)
    born_timestamp: int = hfield("bornTimestamp", "long", required=True)
    flag: int = hfield("flag", "int", required=True)
    properties: str | None = hfield("properties")
    reconsume_times: int | None = hfield("reconsumeTimes", "int")
    unit_mode: bool | None = hfield("unitMode", "bool")
    max_reconsume_times: int | None = hfield("maxReconsumeTimes", "int")
    batch: bool | None = hfield("batch", "bool")
    broker_name: str | None = hfield("brokerName")

    def to_v2(self) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2(**attrs.asdict(self, recurse=False))


#: SEND_MESSAGE_V2's one-letter header (SEND_BATCH_MESSAGE's and SEND_REPLY_MESSAGE_V2's too):
#: the letter of each SendMessageRequestHeader wire name. The one table of the letters: the
#: V2 header class, the client's request, the broker's fast parse and the name table read it.
SEND_V2_LETTER: Final[Mapping[str, str]] = MappingProxyType({
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "brokerName": "n",  # 4.9.5+ Java
})
_V2: Final = SEND_V2_LETTER


@attrs.frozen
class SendMessageRequestHeaderV2(CommandHeader):
    """The same fields under SEND_MESSAGE_V2's one-letter names (``SEND_V2_LETTER``)."""

    producer_group: str = hfield(_V2["producerGroup"], required=True)
    topic: str = hfield(_V2["topic"], required=True)
    default_topic: str = hfield(_V2["defaultTopic"], required=True)
    default_topic_queue_nums: int = hfield(_V2["defaultTopicQueueNums"], "int", required=True)
    queue_id: int = hfield(_V2["queueId"], "int", required=True)
    sys_flag: int = hfield(_V2["sysFlag"], "int", required=True)
    born_timestamp: int = hfield(_V2["bornTimestamp"], "long", required=True)
    flag: int = hfield(_V2["flag"], "int", required=True)
    properties: str | None = hfield(_V2["properties"])
    reconsume_times: int | None = hfield(_V2["reconsumeTimes"], "int")
    unit_mode: bool | None = hfield(_V2["unitMode"], "bool")
    max_reconsume_times: int | None = hfield(_V2["maxReconsumeTimes"], "int")
    batch: bool | None = hfield(_V2["batch"], "bool")
    broker_name: str | None = hfield(_V2["brokerName"])

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(**attrs.asdict(self, recurse=False))


def parse_send_header(code: int, ext: Mapping[str, Any]) -> SendMessageRequestHeader:
    """Read a send request's header whichever way it came (10 long names; 310/320/325 letters)."""
    from .codes import RequestCode

    if code in (
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    ):
        parse = SendMessageRequestHeader.__dict__.get("_wire_parse_v2")
        if parse is None:
            letters = tuple(f.metadata["wire"] for f in attrs.fields(SendMessageRequestHeaderV2))
            parse = _compile_parser(SendMessageRequestHeader, letters)
            type.__setattr__(SendMessageRequestHeader, "_wire_parse_v2", parse)
        return parse(ext)
    return SendMessageRequestHeader.from_ext_fields(ext)


@attrs.frozen
class SendMessageResponseHeader(CommandHeader):
    msg_id: str = hfield("msgId", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    queue_offset: int = hfield("queueOffset", "long", required=True)
    transaction_id: str | None = hfield("transactionId")
    batch_uniq_id: str | None = hfield("batchUniqId")


@attrs.frozen
class EndTransactionRequestHeader(CommandHeader):
    producer_group: str = hfield("producerGroup", required=True)
    tran_state_table_offset: int = hfield("tranStateTableOffset", "long", required=True)
    commit_log_offset: int = hfield("commitLogOffset", "long", required=True)
    commit_or_rollback: int = hfield("commitOrRollback", "int", required=True)
    from_transaction_check: bool = hfield("fromTransactionCheck", "bool", default=False)
    msg_id: str = hfield("msgId", required=True)
    transaction_id: str | None = hfield("transactionId")


# =========================================================================== consumer


@attrs.frozen
class PullMessageRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    queue_offset: int = hfield("queueOffset", "long", required=True)
    max_msg_nums: int = hfield("maxMsgNums", "int", required=True)
    sys_flag: int = hfield("sysFlag", "int", required=True)
    commit_offset: int = hfield("commitOffset", "long", required=True)
    suspend_timeout_millis: int = hfield("suspendTimeoutMillis", "long", required=True)
    subscription: str | None = hfield("subscription")
    sub_version: int = hfield("subVersion", "long", required=True)
    expression_type: str | None = hfield("expressionType")
    bname: str | None = hfield("bname")


@attrs.frozen
class PullMessageResponseHeader(CommandHeader):
    suggest_which_broker_id: int = hfield("suggestWhichBrokerId", "long", required=True)
    next_begin_offset: int = hfield("nextBeginOffset", "long", required=True)
    min_offset: int = hfield("minOffset", "long", required=True)
    max_offset: int = hfield("maxOffset", "long", required=True)


@attrs.frozen
class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)


@attrs.frozen
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    commit_offset: int = hfield("commitOffset", "long", required=True)


@attrs.frozen
class OffsetResponseHeader(CommandHeader):
    """QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP answers."""

    offset: int = hfield("offset", "long", required=True)


@attrs.frozen
class TopicQueueRequestHeader(CommandHeader):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)


@attrs.frozen
class SearchOffsetRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    timestamp: int = hfield("timestamp", "long", required=True)


@attrs.frozen
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: int = hfield("timestamp", "long", required=True)


@attrs.frozen
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    offset: int = hfield("offset", "long", required=True)
    group: str = hfield("group", required=True)
    delay_level: int = hfield("delayLevel", "int", required=True)
    origin_msg_id: str | None = hfield("originMsgId")
    origin_topic: str | None = hfield("originTopic")
    unit_mode: bool = hfield("unitMode", "bool", default=False)
    max_reconsume_times: int | None = hfield("maxReconsumeTimes", "int")


@attrs.frozen
class UnregisterClientRequestHeader(CommandHeader):
    client_id: str = hfield("clientID", required=True)
    producer_group: str | None = hfield("producerGroup")
    consumer_group: str | None = hfield("consumerGroup")


@attrs.frozen
class GetConsumerListByGroupRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)


@attrs.frozen
class QueryMessageRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)
    key: str = hfield("key", required=True)
    max_num: int = hfield("maxNum", "int", required=True)
    begin_timestamp: int = hfield("beginTimestamp", "long", required=True)
    end_timestamp: int = hfield("endTimestamp", "long", required=True)


@attrs.frozen
class QueryMessageResponseHeader(CommandHeader):
    index_last_update_timestamp: int = hfield("indexLastUpdateTimestamp", "long", required=True)
    index_last_update_phyoffset: int = hfield("indexLastUpdatePhyoffset", "long", required=True)


@attrs.frozen
class ViewMessageRequestHeader(CommandHeader):
    offset: int = hfield("offset", "long", required=True)


# =========================================================================== broker -> client


@attrs.frozen
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)


@attrs.frozen
class CheckTransactionStateRequestHeader(CommandHeader):
    tran_state_table_offset: int = hfield("tranStateTableOffset", "long", required=True)
    commit_log_offset: int = hfield("commitLogOffset", "long", required=True)
    msg_id: str | None = hfield("msgId")
    transaction_id: str | None = hfield("transactionId")
    offset_msg_id: str | None = hfield("offsetMsgId")


@attrs.frozen
class ResetOffsetRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)
    group: str = hfield("group", required=True)
    timestamp: int = hfield("timestamp", "long", required=True)
    is_force: bool = hfield("isForce", "bool", required=True)


@attrs.frozen
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    client_id: str = hfield("clientId", required=True)
    jstack_enable: bool = hfield("jstackEnable", "bool", default=False)


@attrs.frozen
class ConsumeMessageDirectlyResultRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    client_id: str | None = hfield("clientId")
    msg_id: str | None = hfield("msgId")
    broker_name: str | None = hfield("brokerName")


@attrs.frozen
class ReplyMessageRequestHeader(CommandHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326): the reply's send header plus where it came from
    (``bornHost``/``storeHost`` as Java's ``InetSocketAddress.toString()``, ``/ip:port``)."""

    producer_group: str = hfield("producerGroup", required=True)
    topic: str = hfield("topic", required=True)
    default_topic: str = hfield("defaultTopic", required=True)
    default_topic_queue_nums: int = hfield("defaultTopicQueueNums", "int", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    sys_flag: int = hfield("sysFlag", "int", required=True)
    born_timestamp: int = hfield("bornTimestamp", "long", required=True)
    flag: int = hfield("flag", "int", required=True)
    properties: str | None = hfield("properties")
    reconsume_times: int | None = hfield("reconsumeTimes", "int")
    unit_mode: bool | None = hfield("unitMode", "bool")
    born_host: str = hfield("bornHost", required=True)
    store_host: str = hfield("storeHost", required=True)
    store_timestamp: int = hfield("storeTimestamp", "long", required=True)


# =========================================================================== admin


@attrs.frozen
class CreateTopicRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)
    default_topic: str = hfield("defaultTopic", required=True)
    read_queue_nums: int = hfield("readQueueNums", "int", required=True)
    write_queue_nums: int = hfield("writeQueueNums", "int", required=True)
    perm: int = hfield("perm", "int", required=True)
    topic_filter_type: str = hfield("topicFilterType", required=True)
    topic_sys_flag: int | None = hfield("topicSysFlag", "int")
    order: bool = hfield("order", "bool", default=False)
    #: RocketMQ 5: "+message.type=FIFO,..." (cluster/protocol/topic_attributes.py)
    attributes: str | None = hfield("attributes")


@attrs.frozen
class DeleteTopicRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)


@attrs.frozen
class GetConsumerConnectionListRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)


@attrs.frozen
class GetConsumeStatsRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str | None = hfield("topic")


@attrs.frozen
class QueryConsumeTimeSpanRequestHeader(CommandHeader):
    topic: str = hfield("topic", required=True)
    group: str = hfield("group", required=True)


#: Every header class, for tests and tooling that want to walk them.
ALL_HEADERS: tuple[type[CommandHeader], ...] = tuple(
    obj
    for obj in list(globals().values())
    if isinstance(obj, type) and issubclass(obj, CommandHeader) and obj is not CommandHeader
)
