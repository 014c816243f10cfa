"""Route and registration records shared by the NameServer, the broker and the client.

Frozen attrs values for RocketMQ's ``TopicRouteData``, ``QueueData``, ``BrokerData``,
``ClusterInfo``, ``TopicConfig``, ``DataVersion``, ``TopicConfigSerializeWrapper``,
``RegisterBrokerBody``, ``TopicList`` and ``KVTable``, with JSON in RocketMQ's shapes
(docs/protocol/remoting.md, "Route and cluster JSON"):

* ``encode`` writes what a Java node writes (fastjson: compact, sorted keys, nulls omitted, integer
  map keys unquoted unless ``standard=True``);
* ``decode`` reads leniently, like fastjson: quoted or unquoted integer keys, numbers given as
  strings, unknown keys ignored. A malformed body raises ``RouteDecodeError``.

``RegisterBrokerBody`` also has RocketMQ's compressed form (zlib stream of length-prefixed parts).
Mapping fields hold plain dicts: treat them as read-only.

Pure: no I/O, no trio.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from . import fastjson

#: ``MixAll.MASTER_ID``: the broker id of a group's master.
MASTER_ID: Final = 0
#: Default queue counts of a ``TopicConfig`` (``defaultReadQueueNums``/``defaultWriteQueueNums``).
DEFAULT_TOPIC_QUEUE_NUMS: Final = 16
#: Largest decompressed RegisterBrokerBody we accept (~100k topics stay far below it).
MAX_REGISTER_BODY_BYTES: Final = 64 * 1024 * 1024
#: KV namespace of ordered-topic configs (``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``).
NAMESPACE_ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"

_INT32 = struct.Struct(">i")
TOPIC_FILTER_TYPES: Final = ("SINGLE_TAG", "MULTI_TAG")


class RouteDecodeError(ValueError):
    """A body that does not have the shape RocketMQ gives it."""


class PermName:
    """Topic / broker permission bits (``PermName``)."""

    PERM_PRIORITY: Final = 0x1 << 3
    PERM_READ: Final = 0x1 << 2
    PERM_WRITE: Final = 0x1 << 1
    PERM_INHERIT: Final = 0x1 << 0
    #: read + write: a normal topic, and what ADD_WRITE_PERM_OF_BROKER sets.
    PERM_RW: Final = PERM_READ | PERM_WRITE

    @staticmethod
    def is_readable(perm: int) -> bool:
        return bool(perm & PermName.PERM_READ)

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return bool(perm & PermName.PERM_WRITE)

    @staticmethod
    def is_inherited(perm: int) -> bool:
        return bool(perm & PermName.PERM_INHERIT)

    @staticmethod
    def perm_to_string(perm: int) -> str:
        """``RWX``-style text as RocketMQ's admin tools print it (e.g. ``RW-``)."""
        return (
            ("R" if perm & PermName.PERM_READ else "-")
            + ("W" if perm & PermName.PERM_WRITE else "-")
            + ("X" if perm & PermName.PERM_INHERIT else "-")
        )


class TopicSysFlag:
    """``TopicSysFlag`` bits carried in QueueData/TopicConfig ``topicSysFlag``."""

    FLAG_UNIT: Final = 0x1 << 0
    FLAG_UNIT_SUB: Final = 0x1 << 1

    @staticmethod
    def has_unit_flag(flag: int) -> bool:
        return bool(flag & TopicSysFlag.FLAG_UNIT)

    @staticmethod
    def has_unit_sub_flag(flag: int) -> bool:
        return bool(flag & TopicSysFlag.FLAG_UNIT_SUB)


# --------------------------------------------------------------------------- lenient field readers


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RouteDecodeError(f"{what} must be a JSON object")
    return value


def _int(value: Any, what: str, default: int | None = None) -> int:
    if value is None:
        if default is None:
            raise RouteDecodeError(f"{what} is missing")
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise RouteDecodeError(f"{what} is not an integer: {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise RouteDecodeError(f"{what} is not an integer: {value!r}")


def _str(value: Any, what: str, default: str | None = None) -> str:
    if value is None:
        if default is None:
            raise RouteDecodeError(f"{what} is missing")
        return default
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise RouteDecodeError(f"{what} is not a string: {value!r}")


def _bool(value: Any, what: str, default: bool = False) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() == "true"
    if isinstance(value, int):
        return value != 0
    raise RouteDecodeError(f"{what} is not a boolean: {value!r}")


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RouteDecodeError(f"{what} must be a JSON array")
    return tuple(_str(v, what) for v in value)


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _queue_tuple(values: Iterable[QueueData]) -> tuple[QueueData, ...]:
    return tuple(values)


def _broker_tuple(values: Iterable[BrokerData]) -> tuple[BrokerData, ...]:
    return tuple(values)


def _load(data: bytes | bytearray | memoryview | str, what: str) -> Mapping[str, Any]:
    try:
        return _obj(fastjson.loads(data), what)
    except fastjson.FastjsonError as exc:
        raise RouteDecodeError(f"{what}: {exc}") from None


# --------------------------------------------------------------------------- records


@attrs.frozen
class DataVersion:
    """A broker's topic-config version: changes whenever its topic table changes."""

    timestamp: int = 0
    counter: int = 0

    def next_version(self, now_ms: int) -> DataVersion:
        return DataVersion(timestamp=now_ms, counter=self.counter + 1)

    def to_json_obj(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json_obj(cls, obj: Any) -> DataVersion:
        o = _obj(obj, "DataVersion")
        return cls(
            timestamp=_int(o.get("timestamp"), "DataVersion.timestamp", 0),
            counter=_int(o.get("counter"), "DataVersion.counter", 0),
        )

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json_obj())

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> DataVersion:
        return cls.from_json_obj(_load(data, "DataVersion"))


@attrs.frozen
class TopicConfig:
    topic_name: str
    read_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    perm: int = PermName.PERM_RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5 topic attributes (``message.type`` ...; cluster/protocol/topic_attributes.py)
    #: as sorted (key, value) pairs; written to JSON only when there are some, so a 4.x topic
    #: encodes byte for byte as a 4.x broker's
    attributes: tuple[tuple[str, str], ...] = ()

    @property
    def attribute_map(self) -> dict[str, str]:
        return dict(self.attributes)

    def to_json_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }
        if self.attributes:
            obj["attributes"] = dict(self.attributes)
        return obj

    @classmethod
    def from_json_obj(cls, obj: Any, name: str | None = None) -> TopicConfig:
        o = _obj(obj, "TopicConfig")
        filter_type = o.get("topicFilterType", "SINGLE_TAG")
        if isinstance(filter_type, int) and not isinstance(filter_type, bool):
            if not 0 <= filter_type < len(TOPIC_FILTER_TYPES):
                raise RouteDecodeError(f"TopicConfig.topicFilterType ordinal {filter_type}")
            filter_type = TOPIC_FILTER_TYPES[filter_type]
        filter_type = _str(filter_type, "TopicConfig.topicFilterType")
        if filter_type not in TOPIC_FILTER_TYPES:
            raise RouteDecodeError(f"TopicConfig.topicFilterType {filter_type!r}")
        return cls(
            topic_name=_str(o.get("topicName", name), "TopicConfig.topicName"),
            read_queue_nums=_int(o.get("readQueueNums"), "readQueueNums", DEFAULT_TOPIC_QUEUE_NUMS),
            write_queue_nums=_int(
                o.get("writeQueueNums"), "writeQueueNums", DEFAULT_TOPIC_QUEUE_NUMS
            ),
            perm=_int(o.get("perm"), "perm", PermName.PERM_RW),
            topic_filter_type=filter_type,
            topic_sys_flag=_int(o.get("topicSysFlag"), "topicSysFlag", 0),
            order=_bool(o.get("order"), "order"),
            attributes=_attributes(o.get("attributes")),
        )

    def encode_compact(self) -> str:
        """``TopicConfig.encode()`` for the compressed body:
        ``"<topic> <readQ> <writeQ> <perm> <filterType>"``."""
        return (
            f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} "
            f"{self.perm} {self.topic_filter_type}"
        )

    @classmethod
    def decode_compact(cls, text: str) -> TopicConfig:
        parts = text.split(" ")
        if len(parts) < 5:
            raise RouteDecodeError(f"compact TopicConfig {text!r} has fewer than 5 fields")
        if parts[4] not in TOPIC_FILTER_TYPES:
            raise RouteDecodeError(f"compact TopicConfig filter type {parts[4]!r}")
        return cls(
            topic_name=parts[0],
            read_queue_nums=_int(parts[1], "readQueueNums"),
            write_queue_nums=_int(parts[2], "writeQueueNums"),
            perm=_int(parts[3], "perm"),
            topic_filter_type=parts[4],
        )


#: Attributes one topic config may carry, and the longest key or value read.
MAX_TOPIC_ATTRIBUTES: Final = 16
MAX_ATTRIBUTE_CHARS: Final = 256


def _attributes(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    table = _obj(value, "TopicConfig.attributes")
    if len(table) > MAX_TOPIC_ATTRIBUTES:
        raise RouteDecodeError(f"TopicConfig.attributes has more than {MAX_TOPIC_ATTRIBUTES}")
    out = []
    for k, v in table.items():
        if not isinstance(v, str) or len(k) > MAX_ATTRIBUTE_CHARS or len(v) > MAX_ATTRIBUTE_CHARS:
            raise RouteDecodeError("TopicConfig.attributes holds a bad entry")
        out.append((str(k), v))
    return tuple(sorted(out))


def _topic_table(value: Any) -> dict[str, TopicConfig]:
    if value is None:
        return {}
    table = _obj(value, "topicConfigTable")
    return {str(k): TopicConfig.from_json_obj(v, str(k)) for k, v in table.items()}


@attrs.frozen
class TopicConfigSerializeWrapper:
    """A broker's topic table and DataVersion (GET_ALL_TOPIC_CONFIG body; in RegisterBrokerBody)."""

    topic_config_table: Mapping[str, TopicConfig] = attrs.field(factory=dict)
    data_version: DataVersion = attrs.field(factory=DataVersion)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json_obj(),
            "topicConfigTable": {k: v.to_json_obj() for k, v in self.topic_config_table.items()},
        }

    @classmethod
    def from_json_obj(cls, obj: Any) -> TopicConfigSerializeWrapper:
        o = _obj(obj, "TopicConfigSerializeWrapper")
        dv = o.get("dataVersion")
        return cls(
            topic_config_table=_topic_table(o.get("topicConfigTable")),
            data_version=DataVersion() if dv is None else DataVersion.from_json_obj(dv),
        )

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json_obj())

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> TopicConfigSerializeWrapper:
        return cls.from_json_obj(_load(data, "TopicConfigSerializeWrapper"))


def _inflate(data: bytes | bytearray | memoryview) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(bytes(data), MAX_REGISTER_BODY_BYTES)
    except zlib.error as exc:
        raise RouteDecodeError(f"compressed RegisterBrokerBody: {exc}") from None
    if inflater.unconsumed_tail:
        raise RouteDecodeError(
            f"compressed RegisterBrokerBody inflates past {MAX_REGISTER_BODY_BYTES} bytes"
        )
    return out


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise RouteDecodeError("compressed RegisterBrokerBody truncated")
        (value,) = _INT32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def chunk(self) -> bytes:
        size = self.int32()
        if size < 0 or self.pos + size > len(self.data):
            raise RouteDecodeError(f"compressed RegisterBrokerBody part of {size} bytes overruns")
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out


@attrs.frozen
class RegisterBrokerBody:
    """REGISTER_BROKER request body: the broker's topic table and its filter servers."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = attrs.field(
        factory=TopicConfigSerializeWrapper
    )
    filter_server_list: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_json_obj(),
        }

    def encode(self, compress: bool = False) -> bytes:
        if not compress:
            return fastjson.dumps(self.to_json_obj())
        wrapper = self.topic_config_serialize_wrapper
        parts: list[bytes] = []

        def put(chunk: bytes) -> None:
            parts.append(_INT32.pack(len(chunk)))
            parts.append(chunk)

        put(wrapper.data_version.encode())
        parts.append(_INT32.pack(len(wrapper.topic_config_table)))
        for config in wrapper.topic_config_table.values():
            put(config.encode_compact().encode())
        put(fastjson.dumps(list(self.filter_server_list)))
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(
        cls, data: bytes | bytearray | memoryview, compressed: bool = False
    ) -> RegisterBrokerBody:
        if not compressed:
            o = _load(data, "RegisterBrokerBody")
            wrapper = o.get("topicConfigSerializeWrapper")
            return cls(
                topic_config_serialize_wrapper=TopicConfigSerializeWrapper()
                if wrapper is None
                else TopicConfigSerializeWrapper.from_json_obj(wrapper),
                filter_server_list=_str_list(o.get("filterServerList"), "filterServerList"),
            )
        reader = _Reader(_inflate(data))
        data_version = DataVersion.decode(reader.chunk())
        count = reader.int32()
        if count < 0 or count * 4 > len(reader.data) - reader.pos:
            raise RouteDecodeError(f"compressed RegisterBrokerBody: impossible topic count {count}")
        table: dict[str, TopicConfig] = {}
        for _ in range(count):
            try:
                text = reader.chunk().decode("utf-8")
            except UnicodeDecodeError:
                raise RouteDecodeError("compressed TopicConfig is not UTF-8") from None
            config = TopicConfig.decode_compact(text)
            table[config.topic_name] = config
        try:
            filters = fastjson.loads(reader.chunk())
        except fastjson.FastjsonError as exc:
            raise RouteDecodeError(f"filter server list: {exc}") from None
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper(table, data_version),
            filter_server_list=_str_list(filters, "filterServerList"),
        )


@attrs.frozen
class QueueData:
    """One broker group's queues of a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @classmethod
    def from_topic_config(cls, broker_name: str, config: TopicConfig) -> QueueData:
        return cls(
            broker_name=broker_name,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_sys_flag=config.topic_sys_flag,
        )

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_obj(cls, obj: Any) -> QueueData:
        o = _obj(obj, "QueueData")
        flag = o.get("topicSysFlag", o.get("topicSynFlag"))  # key before 4.9.0: topicSynFlag
        return cls(
            broker_name=_str(o.get("brokerName"), "QueueData.brokerName"),
            read_queue_nums=_int(o.get("readQueueNums"), "QueueData.readQueueNums", 0),
            write_queue_nums=_int(o.get("writeQueueNums"), "QueueData.writeQueueNums", 0),
            perm=_int(o.get("perm"), "QueueData.perm", 0),
            topic_sys_flag=_int(flag, "QueueData.topicSysFlag", 0),
        )


def _addrs(value: Any) -> dict[int, str]:
    if value is None:
        return {}
    table = _obj(value, "brokerAddrs")
    return {_int(k, "brokerAddrs key"): _str(v, "brokerAddrs value") for k, v in table.items()}


@attrs.frozen
class BrokerData:
    """A broker group: its cluster, its name, and the address of each broker id (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = attrs.field(factory=dict)

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_broker_addr(self) -> str | None:
        """The master's address, else the lowest id's (RocketMQ picks a random slave)."""
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        return self.broker_addrs[min(self.broker_addrs)] if self.broker_addrs else None

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "brokerAddrs": dict(self.broker_addrs),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json_obj(cls, obj: Any) -> BrokerData:
        o = _obj(obj, "BrokerData")
        return cls(
            cluster=_str(o.get("cluster"), "BrokerData.cluster", ""),
            broker_name=_str(o.get("brokerName"), "BrokerData.brokerName"),
            broker_addrs=_addrs(o.get("brokerAddrs")),
        )


@attrs.frozen
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC answer."""

    queue_datas: tuple[QueueData, ...] = attrs.field(default=(), converter=_queue_tuple)
    broker_datas: tuple[BrokerData, ...] = attrs.field(default=(), converter=_broker_tuple)
    filter_server_table: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    order_topic_conf: str | None = None

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "brokerDatas": [b.to_json_obj() for b in self.broker_datas],
            "filterServerTable": {k: list(v) for k, v in self.filter_server_table.items()},
            "orderTopicConf": self.order_topic_conf,
            "queueDatas": [q.to_json_obj() for q in self.queue_datas],
        }

    def encode(self, standard: bool = False) -> bytes:
        """Java's bytes; ``standard`` quotes the brokerAddrs ids (clients of version >= 401)."""
        return fastjson.dumps(self.to_json_obj(), standard=standard)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> TopicRouteData:
        o = _load(data, "TopicRouteData")
        queues = o.get("queueDatas")
        brokers = o.get("brokerDatas")
        queues = [] if queues is None else queues
        brokers = [] if brokers is None else brokers
        if not isinstance(queues, list) or not isinstance(brokers, list):
            raise RouteDecodeError("TopicRouteData queueDatas/brokerDatas must be arrays")
        filters = o.get("filterServerTable") or {}
        conf = o.get("orderTopicConf")
        return cls(
            queue_datas=tuple(QueueData.from_json_obj(q) for q in queues),
            broker_datas=tuple(BrokerData.from_json_obj(b) for b in brokers),
            filter_server_table={
                str(k): _str_list(v, "filterServerTable")
                for k, v in _obj(filters, "filterServerTable").items()
            },
            order_topic_conf=None if conf is None else _str(conf, "orderTopicConf"),
        )


@attrs.frozen
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO answer: every broker group, and the group names of each cluster."""

    broker_addr_table: Mapping[str, BrokerData] = attrs.field(factory=dict)
    cluster_addr_table: Mapping[str, frozenset[str]] = attrs.field(factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {k: v.to_json_obj() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
        }

    def encode(self, standard: bool = False) -> bytes:
        """Java always uses fastjson's default here: unquoted broker ids."""
        return fastjson.dumps(self.to_json_obj(), standard=standard)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> ClusterInfo:
        o = _load(data, "ClusterInfo")
        brokers = _obj(o.get("brokerAddrTable") or {}, "brokerAddrTable")
        clusters = _obj(o.get("clusterAddrTable") or {}, "clusterAddrTable")
        return cls(
            broker_addr_table={str(k): BrokerData.from_json_obj(v) for k, v in brokers.items()},
            cluster_addr_table={
                str(k): frozenset(_str_list(v, "clusterAddrTable")) for k, v in clusters.items()
            },
        )


@attrs.frozen
class TopicList:
    """Topic-list answers (206, 224, 304, 311-313)."""

    topic_list: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    broker_addr: str | None = None

    def encode(self) -> bytes:
        return fastjson.dumps({"brokerAddr": self.broker_addr, "topicList": list(self.topic_list)})

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> TopicList:
        o = _load(data, "TopicList")
        addr = o.get("brokerAddr")
        return cls(
            topic_list=_str_list(o.get("topicList"), "topicList"),
            broker_addr=None if addr is None else _str(addr, "brokerAddr"),
        )


@attrs.frozen
class KVTable:
    """``{"table":{"k":"v"}}``: one KV namespace (REGISTER_BROKER and GET_KVLIST answers)."""

    table: Mapping[str, str] = attrs.field(factory=dict)

    def encode(self) -> bytes:
        return fastjson.dumps({"table": dict(self.table)})

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> KVTable:
        o = _load(data, "KVTable")
        table = _obj(o.get("table") or {}, "table")
        return cls({str(k): _str(v, "table value") for k, v in table.items()})


@attrs.frozen
class RegisterBrokerResult:
    """What registration tells a broker: its master's HA and broker address (slaves only), and the
    ordered-topic KV namespace."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: KVTable | None = None


def broker_datas_by_name(datas: Iterable[BrokerData]) -> dict[str, BrokerData]:
    return {b.broker_name: b for b in datas}
