"""In-process master/slave rigs for the HA tests: real MessageStores on tmp dirs, their
services, an HAService on 127.0.0.1:<ephemeral> and HAClients; every node can be stopped and
started again on the same directory (and the master on the same port)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio

from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.ha.client import HAClient
from rmq_cluster.ha.config import HAConfig
from rmq_cluster.ha.protocol import Frame, FrameDecoder, encode_offset_report
from rmq_cluster.ha.service import HAService
from rmq_cluster.store import flush as store_services
from rmq_cluster.store.config import BrokerRole, MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import small_config

HOST = ("127.0.0.1", 10911)
FILE_SIZE = 64 * 1024
#: Short intervals so heartbeats and housekeeping happen within a test.
FAST_HA = dict(
    ha_send_heartbeat_interval_ms=200,
    ha_housekeeping_interval_ms=3000,
    slave_timeout_ms=3000,
)


def store_config(root: Path, role: BrokerRole, **overrides: Any) -> MessageStoreConfig:
    return small_config(root, broker_role=role, mapped_file_size_commit_log=FILE_SIZE,
                        **overrides)


class _Node:
    def __init__(self, cfg: MessageStoreConfig) -> None:
        self.cfg = cfg
        self.store: MessageStore | None = None
        self.last_max_offset = -1  # the CommitLog end when the node last stopped
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()

    @property
    def s(self) -> MessageStore:
        assert self.store is not None
        return self.store

    async def stop(self) -> None:
        assert self._scope is not None
        self._scope.cancel()
        await self._done.wait()


class MasterNode(_Node):
    def __init__(self, root: Path, role: BrokerRole = BrokerRole.ASYNC_MASTER,
                 **ha_overrides: Any) -> None:
        super().__init__(store_config(root, role))
        self.ha_overrides = {**FAST_HA, **ha_overrides}
        self.ha: HAService | None = None
        self.port = 0

    @property
    def h(self) -> HAService:
        assert self.ha is not None
        return self.ha

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, nursery: trio.Nursery) -> None:
        self._done = trio.Event()
        self.store = MessageStore.open(self.cfg)
        self.ha = HAService(self.store, HAConfig(ha_listen_port=self.port, **self.ha_overrides),
                            host="127.0.0.1")
        self.port = await nursery.start(self._run)

    async def _run(self, *, task_status: trio.TaskStatus[int]) -> None:
        assert self.store is not None and self.ha is not None
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as n:
                    await n.start(store_services.run, self.store)
                    port = await n.start(self.ha.run)
                    task_status.started(port)
        finally:
            self.last_max_offset = self.store.max_phys_offset
            self.store.close()
            self._done.set()


class SlaveNode(_Node):
    """A SLAVE store with the broker-facing ``HAService`` (which runs the ``HAClient``)."""

    def __init__(self, root: Path, **ha_overrides: Any) -> None:
        super().__init__(store_config(root, BrokerRole.SLAVE))
        self.ha_overrides = {**FAST_HA, **ha_overrides}
        self.ha: HAService | None = None

    @property
    def h(self) -> HAService:
        assert self.ha is not None
        return self.ha

    @property
    def c(self) -> HAClient:
        assert self.ha is not None and self.ha.client is not None
        return self.ha.client

    async def start(self, nursery: trio.Nursery, master_addr: str | None) -> None:
        self._done = trio.Event()
        self.store = MessageStore.open(self.cfg)
        self.ha = HAService(
            self.store, HAConfig(ha_listen_port=0, **self.ha_overrides), host="127.0.0.1",
            master_address=master_addr, client_reconnect_min_backoff_s=0.05,
            client_reconnect_max_backoff_s=0.2,
        )
        await nursery.start(self._run)

    async def _run(self, *, task_status: trio.TaskStatus[None]) -> None:
        assert self.store is not None and self.ha is not None
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as n:
                    await n.start(store_services.run, self.store)
                    await n.start(self.ha.run)
                    task_status.started()
        finally:
            self.last_max_offset = self.store.max_phys_offset
            self.store.close()
            self._done.set()

    async def wait_offset(self, target: int) -> None:
        """Until this slave's CommitLog reaches ``target``."""
        await self.s.wait_appended_beyond(target - 1)


def message(i: int, topic: str = "T", queues: int = 4, **props: str) -> Message:
    size = 50 + (i * 131) % 3000
    return Message(topic=topic, body=bytes([i % 251 + 1]) * size, queue_id=i % queues,
                   store_host=HOST, properties={"KEYS": f"k{i}", **props})


def append_many(store: MessageStore, start: int, n: int, topic: str = "T") -> int:
    """Append ``n`` messages (no waiting); the end offset."""
    for i in range(start, start + n):
        r = store.append_message(message(i, topic))
        assert r.result is not None, r.status
    return store.max_phys_offset


def assert_commitlog_prefix(master_cfg: MessageStoreConfig, slave_cfg: MessageStoreConfig,
                            *, from_offset: int = 0) -> int:
    """Every master CommitLog file the slave should hold (start >= from_offset's file) is
    byte-identical in the slave's directory; returns the number of files compared."""
    mdir, sdir = master_cfg.commit_log_dir, slave_cfg.commit_log_dir
    first = from_offset - from_offset % FILE_SIZE
    slave_names = sorted(n for n in os.listdir(sdir) if len(n) == 20)
    compared = 0
    for name in slave_names:
        with open(os.path.join(sdir, name), "rb") as f:
            sdata = f.read()
        mpath = os.path.join(mdir, name)
        if not os.path.exists(mpath):
            assert not sdata.strip(b"\0"), f"slave file {name} has data the master lacks"
            continue
        with open(mpath, "rb") as f:
            mdata = f.read()
        assert sdata == mdata, f"CommitLog file {name} differs"
        compared += 1
    master_names = sorted(n for n in os.listdir(mdir) if len(n) == 20)
    for name in master_names:
        if int(name) >= first:
            with open(os.path.join(mdir, name), "rb") as f:
                has_data = bool(f.read().strip(b"\0"))
            if has_data:
                assert name in slave_names, f"slave lacks CommitLog file {name}"
    return compared


class FakeSlave:
    """A hand-driven slave socket: report offsets, read frames, see the master close."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, port: int) -> FakeSlave:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def report(self, offset: int) -> None:
        await self.stream.send_all(encode_offset_report(offset))

    async def next_frames(self) -> list[Frame]:
        """The next frames, or [] at EOF (the master closed)."""
        while True:
            data = await self.stream.receive_some(65536)
            if not data:
                return []
            frames = self.decoder.feed(data)
            if frames:
                return frames

    async def wait_closed(self) -> None:
        while await self.stream.receive_some(65536):
            pass

    async def aclose(self) -> None:
        await self.stream.aclose()
