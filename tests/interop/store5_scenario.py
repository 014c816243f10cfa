"""What a RocketMQ 5 broker leaves in its store, and how the broker booted on it must go on.

The writing half (``write_state``) runs on a live broker (Apache's 5.3.1 or ours) through raw
remoting requests as Apache's 5.x client sends them (``pop_scenario``): timer messages due in a
few tens of seconds and one due in hours; a POP group with four messages popped, two acked and
two not; a group whose pop ran out on the writer and was revived there once; an orderly pop in
flight with its first message acked. ``Written`` says what was promised when.

The reading half (``watch``) runs on the broker booted on that store: it pops, pulls and polls
until every promised event happened or its deadline passed, noting when each message showed up.
``check`` then says what went wrong: a timer early, late, twice or never; an un-acked POP
message back early or not at all, an acked one back at all; the orderly batch not held, or
held past its time; the revived message revived again.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.store.timer import layout
from rmq_cluster.store.timer.hook import slot_time
from tests.interop import pop_scenario as ps
from tests.interop import scenario

TOPIC: Final = "Cross5T"
EXPIRE_TOPIC: Final = "Cross5E"
FIFO_TOPIC: Final = "Cross5Fifo"
TIMER_TOPIC: Final = "Cross5Timer"
GROUP: Final = "Cross5G"
EXPIRE_GROUP: Final = "Cross5EG"
ORDER_GROUP: Final = "Cross5OG"
#: The invisible time of the pops left in flight for the reader (it outlives the writer).
INVISIBLE_MS: Final = 20_000
#: The pop that runs out (and is revived) on the writer.
SHORT_INVISIBLE_MS: Final = 2_000
#: Timers due this long after they are sent (the reader delivers them), and one due in hours.
TIMER_DELAYS_MS: Final = (15_000, 22_000)
FAR_DELAY_MS: Final = 3 * 3600 * 1000
#: How late a timer or a revived message may show up on the reader: a sanity bound, not the
#: precision (bench/timer.py measures that): a 2-core machine shared with other suites runs
#: at load averages of 20, and Apache revives in rounds of up to 3 s.
LATE_S: Final = 20.0
#: Once everything promised showed up, how long to go on looking for a second copy.
SETTLE_S: Final = 3.0
#: How long the writer may take to revive the short pop (Apache: ck through its timer, revive
#: rounds of a few seconds; ~10 s, more on a busy machine).
WRITER_REVIVE_S: Final = 45.0
POLL_S: Final = 0.5
#: timerPrecisionMs, both brokers' default
PRECISION_MS: Final = 1000
POP_NUMS: Final = 4


def _now_ms() -> int:
    return int(time.time() * 1000)


@attrs.define
class Written:
    """What the writer was told, and so what the reader owes."""

    invisible_ms: int = INVISIBLE_MS  # of the pops left in flight for the reader
    pop_time_ms: int = 0  # the main pop (GROUP)
    popped: list[str] = attrs.field(factory=list)  # bodies of the main pop
    acked: list[str] = attrs.field(factory=list)
    order_popped: list[str] = attrs.field(factory=list)
    order_acked: list[str] = attrs.field(factory=list)
    order_pop_ms: int = 0
    revived_on_writer: str = ""
    timers: dict[str, int] = attrs.field(factory=dict)  # UNIQ_KEY -> due ms
    far_timer: str = ""
    far_due_ms: int = 0


@attrs.define
class Seen:
    """What the reader showed, by body / UNIQ_KEY, with the first time seen (ms)."""

    ready_ms: int  # when the reader first answered (what was due before is late by its boot)

    pops: dict[str, int] = attrs.field(factory=dict)
    pop_counts: Counter[str] = attrs.field(factory=Counter)
    order_first: tuple[int, list[str], str] | None = None  # (ms, bodies, orderCountInfo)
    order_blocked_at_boot: bool = False
    timers: dict[str, list[tuple[int, dict[str, str]]]] = attrs.field(factory=dict)
    expire_retry_max: int = -1


async def _ok(client: Any, broker: str, code: int, ext: dict[str, str],
              body: bytes = b"") -> RemotingCommand:
    resp = await client.invoke(broker, RemotingCommand.request(code, ext, body), timeout=10)
    assert resp.code == 0, (code, resp.code, resp.remark)
    return resp


async def _setup(client: Any, broker: str) -> None:
    for topic, attributes in ((TOPIC, ""), (EXPIRE_TOPIC, ""),
                              (FIFO_TOPIC, "+message.type=FIFO"),
                              (TIMER_TOPIC, "+message.type=DELAY")):
        await _ok(client, broker, RC.UPDATE_AND_CREATE_TOPIC, ps.create_topic(topic, attributes))
    for group in (GROUP, EXPIRE_GROUP, ORDER_GROUP):
        await _ok(client, broker, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                  ps.group_body(group, 16))


async def _send(client: Any, broker: str, topic: str, n: int, body: str,
                extra: dict[str, str] | None = None) -> dict[str, str]:
    resp = await _ok(client, broker, RC.SEND_MESSAGE_V2,
                     scenario.send_v2(topic, 0, n, extra=extra), body.encode())
    return dict(resp.ext_fields)


async def _max_offset(client: Any, broker: str, topic: str) -> int:
    resp = await client.invoke(
        broker, RemotingCommand.request(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"}))
    return int(resp.ext_fields.get("offset", "-1")) if resp.code == 0 else -1


async def _until_offset(client: Any, broker: str, topic: str, n: int, within_s: float) -> None:
    with trio.fail_after(within_s):
        while True:
            if await _max_offset(client, broker, topic) >= n:
                return
            await trio.sleep(0.1)  # polling the broker, bounded by the deadline


async def _pop(client: Any, broker: str, group: str, topic: str, nums: int, invisible_ms: int,
               *, order: bool = False) -> tuple[RemotingCommand, list[str], ps.Ctx]:
    ext = ps.pop(group, topic, nums, invisible_ms, order=order)({})
    resp = await client.invoke(broker, RemotingCommand.request(RC.POP_MESSAGE, ext), timeout=10)
    ctx: ps.Ctx = {}
    if resp.code != 0 or not resp.body:
        return resp, [], ctx
    ps.save_pop("h")(ctx, resp)
    bodies = [rec.body.decode() for rec in iter_records(bytes(resp.body), check_crc=False)]
    return resp, bodies, ctx


async def _ack(client: Any, broker: str, group: str, topic: str, ctx: ps.Ctx, i: int) -> None:
    await _ok(client, broker, RC.ACK_MESSAGE, ps.ack(group, topic, "h", i)(ctx))


async def write_state(broker: str, lead_ms: int = 0) -> Written:
    """The writer's half (module docstring); returns once the state is in place. ``lead_ms``
    puts every due time that much later (a reader slow to boot)."""
    w = Written(invisible_ms=INVISIBLE_MS + lead_ms)
    async with open_remoting_client(node="cross5-writer") as client:
        await _setup(client, broker)
        # the pop that runs out on the writer first
        await _send(client, broker, EXPIRE_TOPIC, 1, "expire-0")
        for i in range(POP_NUMS):
            await _send(client, broker, TOPIC, 10 + i, f"pop-{i}")
        for i in range(3):
            await _send(client, broker, FIFO_TOPIC, 20 + i, f"order-{i}", {"__SHARDINGKEY": "g1"})
        await _until_offset(client, broker, EXPIRE_TOPIC, 1, 10)
        await _until_offset(client, broker, TOPIC, POP_NUMS, 10)
        await _until_offset(client, broker, FIFO_TOPIC, 3, 10)
        _, bodies, _ = await _pop(client, broker, EXPIRE_GROUP, EXPIRE_TOPIC, 1,
                                  SHORT_INVISIBLE_MS)
        assert bodies == ["expire-0"], bodies
        w.revived_on_writer = bodies[0]
        # ... revived by the writer itself (once) before the rest, so the time the writer
        # takes for it (tens of seconds on a busy machine) eats none of the invisible time
        await _until_offset(client, broker, f"%RETRY%{EXPIRE_GROUP}_{EXPIRE_TOPIC}", 1,
                            WRITER_REVIVE_S)
        # the main pop: four in flight, the first and third acked
        _, w.popped, ctx = await _pop(client, broker, GROUP, TOPIC, POP_NUMS, w.invisible_ms)
        assert len(w.popped) == POP_NUMS, w.popped
        for i in (0, 2):
            await _ack(client, broker, GROUP, TOPIC, ctx, i)
            w.acked.append(w.popped[i])
        # orderly: a batch of two in flight, its first acked
        _, w.order_popped, octx = await _pop(client, broker, ORDER_GROUP, FIFO_TOPIC, 2,
                                             w.invisible_ms, order=True)
        w.order_pop_ms = _now_ms()
        assert w.order_popped == ["order-0", "order-1"], w.order_popped
        await _ack(client, broker, ORDER_GROUP, FIFO_TOPIC, octx, 0)
        w.order_acked.append("order-0")
        w.pop_time_ms = int(ctx["h"][0]["extraInfo"].split(" ")[1])
        # timers
        now = _now_ms()
        for n, delay in enumerate((*TIMER_DELAYS_MS, FAR_DELAY_MS)):
            key = scenario.uniq(30 + n)
            due = now + delay + lead_ms
            await _send(client, broker, TIMER_TOPIC, 30 + n, f"timer-{n}",
                        {"TIMER_DELIVER_MS": str(due)})
            if delay == FAR_DELAY_MS:
                w.far_timer, w.far_due_ms = key, due
            else:
                w.timers[key] = due
        assert await _max_offset(client, broker, TIMER_TOPIC) == 0, "a timer fired early"
    return w


async def _pull_timers(client: Any, broker: str, seen: Seen) -> None:
    ext = scenario.pull(TIMER_TOPIC, 0, 0, max_nums=32)
    resp = await client.invoke(broker, RemotingCommand.request(RC.PULL_MESSAGE, ext))
    if resp.code != 0 or not resp.body:
        return
    found: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for rec in iter_records(bytes(resp.body), check_crc=False):
        key = rec.properties.get("UNIQ_KEY", "")
        found.setdefault(key, []).append((rec.store_timestamp, rec.properties))
    for key, copies in found.items():
        if key not in seen.timers or len(copies) > len(seen.timers[key]):
            seen.timers[key] = copies


def _all_seen(w: Written, seen: Seen) -> bool:
    return (all(k in seen.timers for k in w.timers)
            and all(b in seen.pops for b in w.popped if b not in w.acked)
            and seen.order_first is not None)


async def watch(broker: str, w: Written) -> Seen:
    """The reader's half: poll until every promised event happened (and SETTLE_S more, for a
    second copy to show), or until LATE_S after the last was due."""
    seen = Seen(ready_ms=_now_ms())
    last_due_ms = max([*w.timers.values(), w.pop_time_ms + w.invisible_ms,
                       w.order_pop_ms + w.invisible_ms, seen.ready_ms])
    end_ms = last_due_ms + int(LATE_S * 1000)
    async with open_remoting_client(node="cross5-reader") as client:
        resp, bodies, _ = await _pop(client, broker, ORDER_GROUP, FIFO_TOPIC, 2,
                                     10 * INVISIBLE_MS, order=True)
        seen.order_blocked_at_boot = not bodies
        if bodies:
            seen.order_first = (seen.ready_ms, bodies, resp.ext_fields.get("orderCountInfo", ""))
        while _now_ms() < end_ms:
            now = _now_ms()
            _, bodies, _ = await _pop(client, broker, GROUP, TOPIC, POP_NUMS, 10 * INVISIBLE_MS)
            for b in bodies:
                seen.pops.setdefault(b, now)
                seen.pop_counts[b] += 1
            if seen.order_first is None:
                resp, bodies, _ = await _pop(client, broker, ORDER_GROUP, FIFO_TOPIC, 2,
                                             10 * INVISIBLE_MS, order=True)
                if bodies:
                    seen.order_first = (now, bodies, resp.ext_fields.get("orderCountInfo", ""))
            await _pull_timers(client, broker, seen)
            if _all_seen(w, seen):
                end_ms = min(end_ms, now + int(SETTLE_S * 1000))
            await trio.sleep(POLL_S)  # polling the broker, bounded by the loop's deadline
        seen.expire_retry_max = await _max_offset(
            client, broker, f"%RETRY%{EXPIRE_GROUP}_{EXPIRE_TOPIC}")
    return seen


def far_timer_in_wheel(store: Path, w: Written) -> bool:
    """The timer due in hours still has its slot in the store's wheel (the reader kept it)."""
    wheel = (store / "timerwheel").read_bytes()
    slot = layout.read_slot(wheel, slot_time(w.far_due_ms, PRECISION_MS), PRECISION_MS)
    return slot.time_ms != -1 and slot.num >= 1


def check(w: Written, seen: Seen) -> list[str]:
    """Every broken promise, in words (empty: all kept)."""
    errors: list[str] = []
    for key, due in w.timers.items():
        copies = seen.timers.get(key, [])
        if len(copies) != 1:
            errors.append(f"timer {key} due {due}: delivered {len(copies)} times")
            continue
        stored = copies[0][0]
        if stored < due:
            errors.append(f"timer {key}: delivered {due - stored} ms early")
        elif stored > max(due, seen.ready_ms) + LATE_S * 1000:
            errors.append(f"timer {key}: delivered {stored - due} ms late")
    if w.far_timer in seen.timers:
        errors.append("the timer due in hours was delivered")
    unacked = [b for b in w.popped if b not in w.acked]
    for b in unacked:
        at = seen.pops.get(b)
        if at is None:
            errors.append(f"un-acked {b} never came back")
        elif at < w.pop_time_ms + w.invisible_ms:
            errors.append(f"un-acked {b} came back {w.pop_time_ms + w.invisible_ms - at} ms early")
        elif seen.pop_counts[b] != 1:
            errors.append(f"un-acked {b} came back {seen.pop_counts[b]} times")
    for b in w.acked:
        if b in seen.pops:
            errors.append(f"acked {b} came back")
    extra = set(seen.pops) - set(w.popped)
    if extra:
        errors.append(f"popped what the writer never popped: {sorted(extra)}")
    if not seen.order_blocked_at_boot and seen.ready_ms < w.order_pop_ms + w.invisible_ms - 1000:
        errors.append("the orderly batch in flight was not held at boot")
    if seen.order_first is None:
        errors.append("the orderly batch never came back")
    else:
        at, bodies, counts = seen.order_first
        if at < w.order_pop_ms + w.invisible_ms - 1000:
            errors.append(f"orderly batch back {w.order_pop_ms + w.invisible_ms - at} ms early")
        if bodies[:1] != ["order-1"]:
            errors.append(f"orderly batch back as {bodies} (order-0 was acked)")
        # order-1 (queue offset 1) was handed out once before
        if not any(c.endswith(" qo0%1 1") for c in counts.split(";")):
            errors.append(f"orderly re-pop lost its delivery count: {counts!r}")
    if seen.expire_retry_max != 1:
        errors.append(f"the pop revived by the writer is {seen.expire_retry_max} times in "
                      "its retry topic (once expected)")
    return errors
