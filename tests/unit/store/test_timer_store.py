"""The timer store's pure parts on a real store in a tmp dir, with a fake clock: the put rule
(RocketMQ 5 HookUtils), the byte layouts, delivery in time order, rolls, and the no-duplicate
recoveries (a restart, a kill -9 between a delivery and its checkpoint, a promoted slave with no
timer files, a stale master's files)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rmq_cluster.cluster.protocol.message import Message, MessageConst
from rmq_cluster.store.config import TIMER_TOPIC
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from rmq_cluster.store.timer import layout as L
from rmq_cluster.store.timer.hook import TimerRefusal, slot_time, timer_precision, timer_put
from rmq_cluster.store.timer.timer_store import TimerStore

from .store_testlib import small_config

T0 = 1_700_000_000_000  # a whole second
HOST = ("127.0.0.1", 10911)


def put_rule(props: dict[str, str], now: int = T0 + 300, **kw: object):  # type: ignore[no-untyped-def]
    args = dict(enabled=True, max_delay_sec=3 * 86400, precision_ms=1000)
    args.update(kw)
    return timer_put(props, "T", 3, 0, now, **args)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the put rule


def test_put_rule_as_rocketmq_5() -> None:
    topic, qid, props = put_rule({"TIMER_DELAY_MS": "2500", "a": "b"})  # type: ignore[misc]
    assert (topic, qid) == (TIMER_TOPIC, 0)
    assert props["TIMER_OUT_MS"] == str(T0 + 2000)  # 2800 rounded down to the second
    assert props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "3" and props["a"] == "b"
    # an exact multiple goes one precision earlier: the slot is delivered when it is over
    assert put_rule({"TIMER_DELIVER_MS": str(T0 + 5000)})[2]["TIMER_OUT_MS"] == str(T0 + 4000)
    # seconds first, then ms, then the absolute time
    both = {"TIMER_DELAY_SEC": "10", "TIMER_DELAY_MS": "1", "TIMER_DELIVER_MS": "1"}
    assert put_rule(both)[2]["TIMER_OUT_MS"] == str(T0 + 10_000)
    # not ahead: an ordinary message; a delay level wins and drops the timer properties
    assert put_rule({"TIMER_DELAY_MS": "-1"}) == ("T", 3, {"TIMER_DELAY_MS": "-1"})
    assert put_rule({"DELAY": "2", "TIMER_DELAY_SEC": "9"}) == ("T", 3, {"DELAY": "2"})
    # already a delivered timer message, or no timer property: untouched
    assert put_rule({"TIMER_OUT_MS": "1", "TIMER_DELAY_SEC": "9"})[0] == "T"
    assert put_rule({"x": "y"}) == ("T", 3, {"x": "y"})
    # transaction half messages wait for their commit
    half = timer_put({"TIMER_DELAY_SEC": "9"}, "T", 0, 0x4, T0, enabled=True,
                     max_delay_sec=60, precision_ms=1000)
    assert half[0] == "T"  # type: ignore[index]


@pytest.mark.parametrize("value", ["x", "1.5", " 1", "1_0", "9" * 20, "0x1", "１", "+", "-"])
def test_put_rule_refuses_what_java_cannot_parse(value: str) -> None:
    for key in ("TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS"):
        assert put_rule({key: value}) is TimerRefusal.ILLEGAL


def test_put_rule_limits() -> None:
    assert put_rule({"TIMER_DELAY_SEC": "61"}, max_delay_sec=60) is TimerRefusal.ILLEGAL
    assert put_rule({"TIMER_DELAY_SEC": "60"}, max_delay_sec=60)[0] == TIMER_TOPIC
    assert put_rule({"TIMER_DELAY_SEC": "5"}, enabled=False) is TimerRefusal.NOT_ENABLED
    assert put_rule({"TIMER_DELAY_MS": "-5", "TIMER_DEL_UNIQKEY": "k"}) is TimerRefusal.ILLEGAL
    assert [timer_precision(v) for v in (1, 100, 199, 250, 999, 1000, 5000)] == [
        100, 100, 100, 200, 500, 1000, 1000]
    assert slot_time(T0 + 150, 100) == T0 + 100 and slot_time(T0 + 200, 100) == T0 + 100


def test_layouts_are_rocketmqs() -> None:
    assert (L.SLOT_SIZE, L.UNIT_SIZE, L.MIN_BLANK_BYTES) == (32, 52, 16)
    assert L.WHEEL_BYTES == 7 * 86400 * 2 * 32
    assert L.BLANK_MAGIC == -875286124  # 0xBBCCDDEE ^ (1880681586 + 8) as a Java int
    page = memoryview(bytearray(4096))
    cp = L.Checkpoint(T0, 52, 7, 7, 1, 2, 3, -1, 99)
    L.encode_checkpoint_into(page, cp)
    assert bytes(page[:8]) == T0.to_bytes(8, "big") and bytes(page[16:24]) == (7).to_bytes(8, "big")
    assert L.decode_checkpoint(page) == cp
    assert L.decode_checkpoint(bytes(64) + bytes(4032)).delivering_from_phys == -1  # Apache's


# ------------------------------------------------------------------ the store


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


def send(store: MessageStore, clock: Clock, body: bytes, delay_ms: int, qid: int = 0) -> None:
    props = {"TIMER_DELAY_MS": str(delay_ms), MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX:
             f"U-{body.decode()}"}
    topic, queue_id, p = timer_put(props, "Real", qid, 0, clock(), enabled=True,
                                   max_delay_sec=10 * 86400, precision_ms=1000)  # type: ignore[misc]
    put = store.append_message(Message(topic, body, queue_id, properties=p, store_host=HOST))
    assert put.status.stored
    store.dispatch_all()


def delivered(store: MessageStore, qid: int = 0) -> list[tuple[bytes, dict[str, str]]]:
    store.dispatch_all()
    res = store.get_message("Real", qid, 0, 10_000)
    if res.status is not GetMessageStatus.FOUND:
        return []
    from rmq_cluster.cluster.protocol.message import decode_record

    out = [(r.body, r.properties) for r in (decode_record(v, check_crc=False) for v in res.buffers)]
    res.release()
    return out


def bodies(store: MessageStore, qid: int = 0) -> list[bytes]:
    return [b for b, _ in delivered(store, qid)]


def opened(tmp: Path, clock: Clock, **cfg: object) -> tuple[MessageStore, TimerStore]:
    config = small_config(tmp, mapped_file_size_commit_log=1 << 20,
                          mapped_file_size_timer_log=52 * 20 + 16, **cfg)
    store = MessageStore.open(config, clock_ms=clock)
    timer = TimerStore(store, config, HOST, clock)
    timer.open()
    return store, timer


def run(timer: TimerStore) -> int | None:
    timer.enqueue()
    return timer.deliver_due()


def test_delivery_in_time_order_with_5x_properties(tmp_path: Path) -> None:
    clock = Clock()
    store, timer = opened(tmp_path, clock)
    for body, delay in ((b"c", 3500), (b"a", 1200), (b"b", 1700), (b"now", -1)):
        send(store, clock, body, delay)
    assert bodies(store) == [b"now"]  # not ahead: stored as it is
    assert run(timer) == T0 + 2000  # the first slot (T0+1000) is delivered when it is over
    clock.ms = T0 + 1999
    assert run(timer) == T0 + 2000 and bodies(store) == [b"now"]
    clock.ms = T0 + 2000
    assert run(timer) == T0 + 4000
    assert bodies(store) == [b"now", b"a", b"b"]  # one slot, in arrival order
    clock.ms = T0 + 4000
    assert run(timer) is None and bodies(store) == [b"now", b"a", b"b", b"c"]
    (_, props) = delivered(store)[1]
    assert props["TIMER_OUT_MS"] == str(T0 + 1000) and props["TIMER_ENQUEUE_MS"]
    assert props["TIMER_DEQUEUE_MS"] == str(T0 + 2000)
    # kept, as Apache 5.3.1 keeps them (tests/interop/test_pop_differential.py: pop_timer)
    assert props["REAL_TOPIC"] == "Real" and props["REAL_QID"] == "0"
    timer.close()
    store.close()
    # the files are where and as RocketMQ 5 has them
    assert os.path.getsize(tmp_path / "timerwheel") == L.WHEEL_BYTES
    assert os.listdir(tmp_path / "timerlog") == ["00000000000000000000"]
    assert os.path.getsize(tmp_path / "config" / "timercheck") == 4096


def test_delivered_through_follows_the_timer(tmp_path: Path) -> None:
    """Up to when every timer message is delivered (POP's revive waits on it for the acks
    Apache's broker sends through the timer): nothing unindexed, the first pending slot, a
    message indexed after its time was read (it waits in a later slot than its own)."""
    clock = Clock()
    store, timer = opened(tmp_path, clock)
    send(store, clock, b"a", 1200)  # slot T0+1000
    send(store, clock, b"b", 3500)  # slot T0+3000
    assert timer.delivered_through_ms(clock()) is None  # not indexed: times unknown
    assert run(timer) == T0 + 2000
    assert timer.delivered_through_ms(clock()) == T0
    clock.ms = T0 + 2000
    run(timer)
    assert bodies(store) == [b"a"] and timer.delivered_through_ms(clock()) == T0 + 2000
    late = {"TIMER_OUT_MS": str(T0 + 500), "REAL_TOPIC": "Real", "REAL_QID": "0",
            MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "U-late"}
    assert store.append_message(
        Message(TIMER_TOPIC, b"late", 0, properties=late, store_host=HOST)).status.stored
    store.dispatch_all()
    timer.enqueue()  # into the slot being read (T0+2000), later than its own
    assert timer.delivered_through_ms(clock()) == T0 + 499
    clock.ms = T0 + 3000
    run(timer)
    assert bodies(store) == [b"a", b"late"]
    assert timer.delivered_through_ms(clock()) == T0 + 2999  # b's slot
    clock.ms = T0 + 4000
    assert run(timer) is None and timer.delivered_through_ms(clock()) == T0 + 4000
    timer.close()
    store.close()


def test_many_slots_across_timer_log_files_and_a_roll(tmp_path: Path) -> None:
    clock = Clock()
    store, timer = opened(tmp_path, clock, timer_roll_window_slot=10)
    for i in range(45):  # 20 units a TimerLog file: three files
        send(store, clock, f"m{i}".encode(), 1000 + 1000 * (i % 5))
    send(store, clock, b"far", 25_000)  # past the 10-slot window: parked, rolled, delivered
    timer.enqueue()
    assert len(os.listdir(tmp_path / "timerlog")) == 3
    for step in range(1, 30):
        clock.ms = T0 + 1000 * step
        run(timer)
        run(timer)  # a roll re-enters the timer topic: the next round indexes it
    got = bodies(store)
    assert sorted(got) == sorted([f"m{i}".encode() for i in range(45)] + [b"far"])
    assert timer.rolled >= 1
    far = next(p for b, p in delivered(store) if b == b"far")
    assert int(far["TIMER_ROLL_TIMES"]) >= 1 and int(far["TIMER_DEQUEUE_MS"]) >= T0 + 25_000
    timer.close()
    store.close()


def test_restart_keeps_pending_timers_and_delivers_nothing_twice(tmp_path: Path) -> None:
    clock = Clock()
    store, timer = opened(tmp_path, clock)
    send(store, clock, b"a", 1500)
    send(store, clock, b"b", 5500)
    clock.ms = T0 + 2000
    run(timer)
    timer.close()  # a clean stop
    timer = TimerStore(store, store.config, HOST, clock)
    timer.open()
    send(store, clock, b"c", 1000)
    clock.ms = T0 + 7000
    run(timer)
    run(timer)
    assert bodies(store) == [b"a", b"c", b"b"]  # c is due at T0+3s, b at T0+5.5s
    timer.close()
    store.close()


def test_kill9_between_deliveries_and_their_checkpoint_delivers_once(tmp_path: Path) -> None:
    clock = Clock()
    store, timer = opened(tmp_path, clock)
    for i in range(5):
        send(store, clock, f"s{i}".encode(), 1500)
    send(store, clock, b"later", 4500)
    timer.enqueue()
    cp_path = tmp_path / "config" / "timercheck"
    before = cp_path.read_bytes()  # the checkpoint as it was before the slot's deliveries
    # deliver part of the slot, then "die": the checkpoint never recorded the slot's end
    original = timer._deliver_unit
    calls = []

    def dying(unit):  # type: ignore[no-untyped-def]
        if len(calls) == 3:
            raise SystemExit("kill -9")
        calls.append(unit)
        return original(unit)

    timer._deliver_unit = dying  # type: ignore[method-assign]
    clock.ms = T0 + 2000
    with pytest.raises(SystemExit):
        run(timer)
    assert bodies(store) == [b"s0", b"s1", b"s2"]
    # the mark written when the slot began is what a kill -9 leaves; drop the later writes
    mark = L.decode_checkpoint(cp_path.read_bytes())
    assert mark.last_read_time_ms < T0 + 2000
    page = bytearray(before)
    L.encode_checkpoint_into(memoryview(page), mark)
    cp_path.write_bytes(bytes(page))
    again = TimerStore(store, store.config, HOST, clock)
    again.open()
    run(again)
    assert bodies(store) == [b"s0", b"s1", b"s2", b"s3", b"s4"]
    clock.ms = T0 + 5000
    run(again)
    assert bodies(store)[-1] == b"later" and len(bodies(store)) == 6
    again.close()
    store.close()


def test_promoted_slave_without_timer_files_delivers_the_rest_once(tmp_path: Path) -> None:
    clock = Clock()
    store, timer = opened(tmp_path, clock)
    for i in range(4):
        send(store, clock, f"e{i}".encode(), 1000 + 2000 * i)  # slots T0+1s, 3s, 5s, 7s
    clock.ms = T0 + 4000
    run(timer)
    assert bodies(store) == [b"e0", b"e1"]
    timer.close()
    # the new master has the replicated CommitLog but none of the timer files
    shutil.rmtree(tmp_path / "timerlog")
    os.remove(tmp_path / "timerwheel")
    os.remove(tmp_path / "config" / "timercheck")
    clock.ms = T0 + 6000
    fresh = TimerStore(store, store.config, HOST, clock)
    fresh.open()
    run(fresh)
    assert bodies(store) == [b"e0", b"e1", b"e2"]
    clock.ms = T0 + 9000
    run(fresh)
    assert bodies(store) == [b"e0", b"e1", b"e2", b"e3"]
    fresh.close()
    store.close()


def test_apaches_stale_checkpoint_after_its_kill9_delivers_nothing_twice(tmp_path: Path) -> None:
    """Apache 5.3.1 killed -9 left its timercheck as it wrote it at boot (read time days back,
    queue offset 0, no delivery mark of ours: tests/interop/test_store_crossing5.py); what it
    had delivered since is in the consume queues, and is not delivered again."""
    clock = Clock()
    store, timer = opened(tmp_path, clock)
    for i in range(4):
        send(store, clock, f"e{i}".encode(), 1000 + 2000 * i)  # slots T0+1s, 3s, 5s, 7s
    clock.ms = T0 + 4000
    run(timer)
    assert bodies(store) == [b"e0", b"e1"]
    timer.close()
    page = bytearray(L.CHECKPOINT_PAGE_BYTES)
    L.CHECKPOINT.pack_into(page, 0, T0 - 3 * 86_400_000, 0, 0, 0, 0, T0, 1)
    (tmp_path / "config" / "timercheck").write_bytes(bytes(page))
    clock.ms = T0 + 6000
    again = TimerStore(store, store.config, HOST, clock)
    again.open()
    run(again)
    assert bodies(store) == [b"e0", b"e1", b"e2"]
    clock.ms = T0 + 9000
    run(again)
    assert bodies(store) == [b"e0", b"e1", b"e2", b"e3"]
    again.close()
    store.close()


def test_hostile_timer_records_are_skipped(tmp_path: Path) -> None:
    clock = Clock()
    store, timer = opened(tmp_path, clock)
    bad = [
        {"TIMER_OUT_MS": "soon", "REAL_TOPIC": "Real", "REAL_QID": "0"},
        {"TIMER_OUT_MS": str(T0), "REAL_TOPIC": "../x", "REAL_QID": "0"},
        {"TIMER_OUT_MS": str(T0), "REAL_TOPIC": "Real", "REAL_QID": "99999"},
        {"TIMER_OUT_MS": str(T0), "REAL_TOPIC": "Real", "REAL_QID": "-1"},
        {"TIMER_OUT_MS": str(2**62), "REAL_TOPIC": "Real", "REAL_QID": "0"},  # parked, rolled
    ]
    for props in bad:
        store.append_message(Message(TIMER_TOPIC, b"x", 0, properties=props, store_host=HOST))
    past = {"TIMER_OUT_MS": str(-(2**62)), "REAL_TOPIC": "Real", "REAL_QID": "0"}
    store.append_message(Message(TIMER_TOPIC, b"past", 0, properties=past, store_host=HOST))
    send(store, clock, b"good", 1000)
    clock.ms = T0 + 3000
    for _ in range(3):
        run(timer)
    assert bodies(store) == [b"past", b"good"]  # a time long gone is due at once
    timer.close()
    store.close()
