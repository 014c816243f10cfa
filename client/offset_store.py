"""Consumer offset stores (Java ``RemoteBrokerOffsetStore`` / ``LocalFileOffsetStore``).

Remote (clustering): offsets live on the broker; the client caches them and commits every
``persist_offset_interval_s`` with oneway UPDATE_CONSUMER_OFFSET (synchronously on shutdown).
Local (broadcasting): a JSON file per group in Java's shape
(``{"offsetTable":{{"brokerName":..,"queueId":..,"topic":..}:offset}}``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import trio

from ..cluster.remoting.codes import ResponseCode
from . import frames
from .errors import MQBrokerError, MQClientError
from .instance import ClientInstance, object_key_map, parse_offset_table
from .model import MessageQueue

#: Java: readOffset answers -1 when the broker has no offset, -2 on other errors.
OFFSET_NOT_FOUND = -1


class OffsetStore(Protocol):
    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None: ...

    def read(self, mq: MessageQueue) -> int | None: ...

    async def read_from_store(self, mq: MessageQueue) -> int: ...

    async def persist(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...


class RemoteOffsetStore:
    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.table: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def read(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def _addr(self, mq: MessageQueue) -> str | None:
        found = self.instance.find_broker_addr(mq.broker_name)
        return found[0] if found else None

    async def read_from_store(self, mq: MessageQueue) -> int:
        """The broker's offset (-1 if it has none); raises on other failures."""
        addr = self._addr(mq)
        if addr is None:
            await self.instance.update_route(mq.topic)
            addr = self._addr(mq)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        resp = await self.instance.invoke(addr, frames.query_consumer_offset(self.group, mq))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return OFFSET_NOT_FOUND
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        offset = int(resp.ext_fields.get("offset", OFFSET_NOT_FOUND))
        self.update(mq, offset)
        self._persisted[mq] = offset
        return offset

    async def persist(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        for mq in list(mqs):
            offset = self.table.get(mq)
            if offset is None or offset < 0:
                continue
            if not sync and self._persisted.get(mq) == offset:
                continue
            addr = self._addr(mq)
            if addr is None:
                continue
            try:
                if sync:
                    cmd = frames.update_consumer_offset(self.group, mq, offset, oneway=False)
                    await self.instance.invoke(addr, cmd)
                else:
                    cmd = frames.update_consumer_offset(self.group, mq, offset)
                    await self.instance.invoke_oneway(addr, cmd)
                self._persisted[mq] = offset
            except MQClientError as exc:
                self.instance.log.info("offset commit failed", queue=str(mq), error=str(exc))

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self._persisted.pop(mq, None)


def default_local_offset_dir() -> Path:
    """Java's default: ``~/.rocketmq_offsets``."""
    return Path.home() / ".rocketmq_offsets"


class LocalOffsetStore:
    """Broadcasting: every member keeps its own offsets in ``<dir>/<group>/offsets.json``."""

    def __init__(self, directory: Path, group: str) -> None:
        self.path = Path(directory) / group / "offsets.json"
        self.table: dict[MessageQueue, int] = {}
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        self.table.update(parse_offset_table(data))

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def read(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    async def read_from_store(self, mq: MessageQueue) -> int:
        await trio.to_thread.run_sync(self._load)
        return self.table.get(mq, OFFSET_NOT_FOUND)

    def _write(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    async def persist(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        mqs = list(mqs)
        if not mqs and not self.table:
            return
        pairs = [(mq.to_json_obj(), off) for mq, off in sorted(self.table.items()) if off >= 0]
        body = b'{"offsetTable":' + object_key_map(pairs) + b"}"
        await trio.to_thread.run_sync(self._write, body)

    def remove(self, mq: MessageQueue) -> None:
        pass  # broadcasting keeps every queue's offset
