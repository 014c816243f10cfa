"""Stateful model test: puts, batches, reads, clean restarts and crashes (a CommitLog tail cut
at any byte past the last flush) in any order. After every step the store answers exactly what
the model says: queue contents, offsets without gaps, lookups by offset and key."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rmq_cluster.cluster.protocol.message import Message, decode_record, encode_batch
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import crash, small_config

HOST = ("127.0.0.1", 10911)
QUEUES = 3


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="rmq-stateful-")
        self.cfg = small_config(self.root, mapped_file_size_commit_log=16 * 1024,
                                max_hash_slot_num=32, max_index_num=64)
        self.store: MessageStore | None = MessageStore.open(self.cfg)
        # per queue: (phys, size, body, key) in queue-offset order
        self.model: dict[int, list[tuple[int, int, bytes, str]]] = {q: [] for q in range(QUEUES)}
        self.durable = 0
        self.n = 0

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def s(self) -> MessageStore:
        assert self.store is not None
        return self.store

    def _body(self, size: int) -> bytes:
        self.n += 1
        return bytes([self.n % 250 + 1]) * size

    @rule(size=st.integers(0, 3000), q=st.integers(0, QUEUES - 1))
    def put(self, size: int, q: int) -> None:
        body = self._body(size)
        key = f"K{self.n}"
        res = self.s.append_message(
            Message(topic="T", body=body, queue_id=q, store_host=HOST, properties={"KEYS": key})
        )
        assert res.ok and res.result is not None
        assert res.result.logics_offset == len(self.model[q])
        self.model[q].append((res.result.wrote_offset, res.result.wrote_bytes, body, key))

    @rule(count=st.integers(1, 5), q=st.integers(0, QUEUES - 1))
    def batch(self, count: int, q: int) -> None:
        items: list[tuple[int, bytes, dict[str, str]]] = []
        for _ in range(count):
            items.append((0, self._body(200), {"KEYS": f"K{self.n}"}))
        res = self.s.append_messages(
            Message(topic="T", body=encode_batch(items), queue_id=q, store_host=HOST)
        )
        assert res.ok and res.result is not None
        ends = (*res.result.offsets[1:], res.result.end_offset)
        for (_, body, props), off, end in zip(items, res.result.offsets, ends, strict=True):
            self.model[q].append((off, end - off, body, props["KEYS"]))

    @rule()
    def dispatch(self) -> None:
        self.s.dispatch_all()

    @rule()
    def checkpoint(self) -> None:
        s = self.s
        s.dispatch_all()
        s.flush_commitlog_sync()
        s.flush_logics_sync()
        assert s.checkpoint is not None
        s.checkpoint.flush()
        self.durable = s.max_phys_offset

    @rule()
    def restart(self) -> None:
        self.s.close()
        self.store = MessageStore.open(self.cfg)
        assert self.s.recovery is not None and not self.s.recovery.abnormal

    @rule(frac=st.floats(0, 1))
    def crash_and_recover(self, frac: float) -> None:
        end = self.s.max_phys_offset
        crash(self.s)
        cut = self.durable + int((end - self.durable) * frac)
        size = self.cfg.mapped_file_size_commit_log
        for name in sorted(os.listdir(self.cfg.commit_log_dir)):
            start = int(name)
            if start + size <= cut:
                continue
            with open(os.path.join(self.cfg.commit_log_dir, name), "r+b") as f:
                f.seek(max(0, cut - start))
                f.write(bytes(size - max(0, cut - start)))
        for q in range(QUEUES):
            self.model[q] = [e for e in self.model[q] if e[0] + e[1] <= cut]
        self.store = MessageStore.open(self.cfg)
        assert self.s.recovery is not None and self.s.recovery.abnormal

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def lookup_by_key(self, data: Any) -> None:
        q = data.draw(st.sampled_from([q for q in range(QUEUES) if self.model[q]]))
        phys, _size, body, key = data.draw(st.sampled_from(self.model[q]))
        self.s.dispatch_all()
        found = self.s.query_message("T", key, 4, 0, 2**62)
        assert [decode_record(b).commitlog_offset for b in found.buffers] == [phys]
        found.copy_body()
        rec = self.s.lookup_message_by_offset(phys)
        assert rec is not None and rec.body == body

    @invariant()
    def queues_match_model(self) -> None:
        if self.store is None:
            return
        self.s.dispatch_all()
        for q in range(QUEUES):
            assert self.s.get_max_offset_in_queue("T", q) == len(self.model[q])
            got: list[tuple[int, bytes]] = []
            offset = 0
            while offset < len(self.model[q]):
                r = self.s.get_message("T", q, offset, 64, max_bytes=1 << 20)
                recs = [decode_record(b) for b in r.buffers]
                r.release()
                got += [(m.commitlog_offset, m.body) for m in recs]
                assert [m.queue_offset for m in recs] == list(range(offset, offset + len(recs)))
                offset = r.next_begin_offset
            assert got == [(e[0], e[2]) for e in self.model[q]]


StoreMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_store_state_machine = StoreMachine.TestCase
