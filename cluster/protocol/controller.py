"""Controller mode on the wire (RocketMQ 5.x RIP-44): request/response codes, headers, bodies.

Brokers (``broker/replicas_manager.py``), the controller (``controller/``) and the admin
commands use this module; broker never imports controller.  Pure: no trio, no I/O.

Codes are RocketMQ's: CONTROLLER_ALTER_SYNC_STATE_SET 1001, CONTROLLER_ELECT_MASTER 1002,
CONTROLLER_REGISTER_BROKER 1003, CONTROLLER_GET_REPLICA_INFO 1004, CONTROLLER_GET_METADATA_INFO
1005, CONTROLLER_GET_SYNC_STATE_DATA 1006, GET_BROKER_EPOCH_CACHE 1007 (served by a broker),
BROKER_HEARTBEAT 904; answers CONTROLLER_* 2000-2012.  Replicas are named by brokerId (5.1
style: ``masterBrokerId``), SyncStateSets are sets of brokerIds.

Bodies are JSON (orjson): ``SyncStateSet`` {"syncStateSet": [ids], "syncStateSetEpoch": n},
``BrokerReplicasInfo`` {"replicasInfoTable": {brokerName: ReplicasInfo}}, ``EpochEntryCache``
{"clusterName", "brokerName", "brokerId", "epochList": [{"epoch", "startOffset", "endOffset"}],
"maxOffset"}.  Every decoder checks every field (type, range, count) and raises
:class:`ControllerBodyError` naming the first bad one.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import orjson

from ..remoting.headers import CommandHeader, hfield

#: Most broker ids one SyncStateSet / one group may hold (input bound).
MAX_REPLICAS_PER_GROUP: Final = 64
#: Most epoch entries an EpochEntryCache body may hold (input bound).
MAX_EPOCH_ENTRIES: Final = 100_000
#: Most broker names one GET_SYNC_STATE_DATA may ask for.
MAX_GROUPS_PER_QUERY: Final = 1024
#: Largest controller body accepted (input bound).
MAX_CONTROLLER_BODY_BYTES: Final = 4 * 1024 * 1024
MAX_BROKER_ID: Final = 2**31 - 1
NO_MASTER: Final = -1


class ControllerRequestCode(enum.IntEnum):
    BROKER_HEARTBEAT = 904
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007


class ControllerResponseCode(enum.IntEnum):
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008


class ControllerBodyError(ValueError):
    """A controller body that does not decode or breaks a bound."""


# ----------------------------------------------------------------------------- headers


@attrs.frozen
class BrokerHeartbeatRequestHeader(CommandHeader):
    cluster_name: str = hfield("clusterName", required=True)
    broker_addr: str = hfield("brokerAddr", required=True)
    broker_name: str = hfield("brokerName", required=True)
    broker_id: int | None = hfield("brokerId", "long")
    epoch: int | None = hfield("epoch", "int")
    max_offset: int | None = hfield("maxOffset", "long")
    confirm_offset: int | None = hfield("confirmOffset", "long")
    heartbeat_timeout_mills: int | None = hfield("heartbeatTimeoutMills", "long")
    election_priority: int | None = hfield("electionPriority", "int")


@attrs.frozen
class RegisterBrokerToControllerRequestHeader(CommandHeader):
    cluster_name: str = hfield("clusterName", required=True)
    broker_name: str = hfield("brokerName", required=True)
    broker_id: int = hfield("brokerId", "long", required=True)
    broker_address: str = hfield("brokerAddress", required=True)
    invoke_time: int | None = hfield("invokeTime", "long")


@attrs.frozen
class ReplicaInfoResponseHeader(CommandHeader):
    """GET_REPLICA_INFO's, REGISTER_BROKER's and ELECT_MASTER's answer: who is master now."""

    master_broker_id: int | None = hfield("masterBrokerId", "long")
    master_address: str | None = hfield("masterAddress")
    master_epoch: int | None = hfield("masterEpoch", "int")
    sync_state_set_epoch: int | None = hfield("syncStateSetEpoch", "int")


@attrs.frozen
class GetReplicaInfoRequestHeader(CommandHeader):
    broker_name: str = hfield("brokerName", required=True)


@attrs.frozen
class AlterSyncStateSetRequestHeader(CommandHeader):
    broker_name: str = hfield("brokerName", required=True)
    master_broker_id: int = hfield("masterBrokerId", "long", required=True)
    master_epoch: int = hfield("masterEpoch", "int", required=True)
    invoke_time: int | None = hfield("invokeTime", "long")


@attrs.frozen
class ElectMasterRequestHeader(CommandHeader):
    cluster_name: str = hfield("clusterName", default="")
    broker_name: str = hfield("brokerName", required=True)
    broker_id: int | None = hfield("brokerId", "long")
    designate_elect: bool = hfield("designateElect", "bool", default=False)
    invoke_time: int | None = hfield("invokeTime", "long")


@attrs.frozen
class GetMetaDataResponseHeader(CommandHeader):
    group: str | None = hfield("group")
    controller_leader_id: str | None = hfield("controllerLeaderId")
    controller_leader_address: str | None = hfield("controllerLeaderAddress")
    is_leader: bool = hfield("isLeader", "bool", default=False)
    peers: str | None = hfield("peers")


@attrs.frozen
class GetBrokerEpochCacheRequestHeader(CommandHeader):
    """GET_BROKER_EPOCH_CACHE carries no fields (answered by the broker asked)."""


# ----------------------------------------------------------------------------- bodies


def _loads(data: bytes | bytearray | memoryview, what: str) -> Any:
    if len(data) > MAX_CONTROLLER_BODY_BYTES:
        raise ControllerBodyError(f"{what}: body of {len(data)} bytes is too large")
    try:
        return orjson.loads(bytes(data))
    except orjson.JSONDecodeError as exc:
        raise ControllerBodyError(f"{what}: not JSON ({exc})") from None


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise ControllerBodyError(f"{what}: {value!r} is not an integer in [{lo}, {hi}]")
    return value


def _str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise ControllerBodyError(f"{what}: {value!r} is not a string")
    return value


def _obj(value: Any, what: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise ControllerBodyError(f"{what}: not an object")
    return value


def broker_id_set(values: Any, what: str) -> frozenset[int]:
    if type(values) is not list or len(values) > MAX_REPLICAS_PER_GROUP:
        raise ControllerBodyError(f"{what}: not a list of at most {MAX_REPLICAS_PER_GROUP} ids")
    return frozenset(_int(v, what, 0, MAX_BROKER_ID) for v in values)


@attrs.frozen
class SyncStateSet:
    broker_ids: frozenset[int]
    epoch: int

    def encode(self) -> bytes:
        return orjson.dumps(
            {"syncStateSet": sorted(self.broker_ids), "syncStateSetEpoch": self.epoch}
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> SyncStateSet:
        obj = _obj(_loads(data, "SyncStateSet"), "SyncStateSet")
        ids = broker_id_set(obj.get("syncStateSet"), "syncStateSet")
        epoch = _int(obj.get("syncStateSetEpoch", 0), "syncStateSetEpoch", 0, 2**31 - 1)
        return cls(ids, epoch)


@attrs.frozen
class ReplicaView:
    broker_id: int
    address: str
    alive: bool

    def to_json(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "brokerAddress": self.address, "alive": self.alive}


@attrs.frozen
class ReplicasInfo:
    """One group as GET_SYNC_STATE_DATA reports it (RocketMQ's ``BrokerReplicasInfo``)."""

    master_broker_id: int
    master_address: str
    master_epoch: int
    sync_state_set_epoch: int
    in_sync: tuple[ReplicaView, ...]
    not_in_sync: tuple[ReplicaView, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "masterBrokerId": self.master_broker_id,
            "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch,
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "inSyncReplicas": [r.to_json() for r in self.in_sync],
            "notInSyncReplicas": [r.to_json() for r in self.not_in_sync],
        }

    @classmethod
    def from_json(cls, obj: Any) -> ReplicasInfo:
        o = _obj(obj, "ReplicasInfo")

        def views(key: str) -> tuple[ReplicaView, ...]:
            items = o.get(key, [])
            if type(items) is not list or len(items) > MAX_REPLICAS_PER_GROUP:
                raise ControllerBodyError(f"{key}: not a list of replicas")
            out = []
            for item in items:
                r = _obj(item, key)
                out.append(ReplicaView(
                    _int(r.get("brokerId"), "brokerId", 0, MAX_BROKER_ID),
                    _str(r.get("brokerAddress", ""), "brokerAddress"),
                    bool(r.get("alive", False)),
                ))
            return tuple(out)

        return cls(
            _int(o.get("masterBrokerId", NO_MASTER), "masterBrokerId", NO_MASTER, MAX_BROKER_ID),
            _str(o.get("masterAddress", ""), "masterAddress"),
            _int(o.get("masterEpoch", 0), "masterEpoch", 0, 2**31 - 1),
            _int(o.get("syncStateSetEpoch", 0), "syncStateSetEpoch", 0, 2**31 - 1),
            views("inSyncReplicas"),
            views("notInSyncReplicas"),
        )


def encode_replicas_table(table: Mapping[str, ReplicasInfo]) -> bytes:
    return orjson.dumps(
        {"replicasInfoTable": {name: info.to_json() for name, info in sorted(table.items())}}
    )


def decode_replicas_table(data: bytes | bytearray | memoryview) -> dict[str, ReplicasInfo]:
    obj = _obj(_loads(data, "BrokerReplicasInfo"), "BrokerReplicasInfo")
    table = _obj(obj.get("replicasInfoTable", {}), "replicasInfoTable")
    return {_str(k, "brokerName"): ReplicasInfo.from_json(v) for k, v in table.items()}


def encode_broker_names(names: Iterable[str]) -> bytes:
    return orjson.dumps(list(names))


def decode_broker_names(data: bytes | bytearray | memoryview) -> list[str]:
    obj = _loads(data, "brokerNames")
    if type(obj) is not list or len(obj) > MAX_GROUPS_PER_QUERY:
        raise ControllerBodyError(f"brokerNames: not a list of at most {MAX_GROUPS_PER_QUERY}")
    return [_str(v, "brokerName") for v in obj]


@attrs.frozen
class EpochEntry:
    """Epoch ``epoch`` started at CommitLog offset ``start_offset``; ``end_offset`` is the next
    entry's start (or the log's end for the last one)."""

    epoch: int
    start_offset: int
    end_offset: int = -1


@attrs.frozen
class EpochEntryCache:
    cluster_name: str
    broker_name: str
    broker_id: int
    entries: tuple[EpochEntry, ...]
    max_offset: int

    def encode(self) -> bytes:
        return orjson.dumps({
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "epochList": [
                {"epoch": e.epoch, "startOffset": e.start_offset, "endOffset": e.end_offset}
                for e in self.entries
            ],
            "maxOffset": self.max_offset,
        })

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> EpochEntryCache:
        obj = _obj(_loads(data, "EpochEntryCache"), "EpochEntryCache")
        items = obj.get("epochList", [])
        if type(items) is not list or len(items) > MAX_EPOCH_ENTRIES:
            raise ControllerBodyError("epochList: not a list of epoch entries")
        entries = []
        for item in items:
            e = _obj(item, "epochList")
            entries.append(EpochEntry(
                _int(e.get("epoch"), "epoch", 0, 2**31 - 1),
                _int(e.get("startOffset"), "startOffset", 0, 2**63 - 1),
                _int(e.get("endOffset", -1), "endOffset", -1, 2**63 - 1),
            ))
        for a, b in itertools.pairwise(entries):
            if b.epoch <= a.epoch or b.start_offset < a.start_offset:
                raise ControllerBodyError("epochList: epochs and offsets must increase")
        return cls(
            _str(obj.get("clusterName", ""), "clusterName"),
            _str(obj.get("brokerName", ""), "brokerName"),
            _int(obj.get("brokerId", 0), "brokerId", 0, MAX_BROKER_ID),
            tuple(entries),
            _int(obj.get("maxOffset", 0), "maxOffset", 0, 2**63 - 1),
        )
