"""The client side of test_client_bombs.py, in a process of its own so that its peak RSS is its
own: ``python bomb_child.py pull|push|request NAMESRV TOPIC GROUP WANT``.

``pull``/``push``: a PullConsumer (assigned queue 0) or a PushConsumer consumes TOPIC from its
first offset until it got the message whose body is WANT, commits, and prints one JSON line:
the bodies delivered, the messages it skipped, its peak RSS growth (VmHWM now minus VmHWM
before the consumer started). ``request``: a Producer heartbeats, prints its client id, waits
for a line on stdin (the test pushes its forged replies meanwhile), sends a real request to
TOPIC and prints the reply's body and its peak RSS growth.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from rmq_cluster.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
)
from rmq_cluster.client.config import ClientConfig

WAIT_S = 30.0


def vm_hwm_bytes() -> int:
    """Peak resident set size of this process (``VmHWM``, /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def shown(body: bytes) -> str:
    """A body as the test compares it (a bomb delivered whole is shown by its size only)."""
    return body.decode() if len(body) <= 1024 else f"<{len(body)} bytes>"


def emit(obj: dict[str, object]) -> None:
    print(json.dumps(obj), flush=True)


def client_config(namesrv: str) -> ClientConfig:
    return ClientConfig(namesrv_addr=namesrv, client_ip="127.0.0.1", poll_namesrv_interval_s=0.5,
                        heartbeat_interval_s=1.0, persist_offset_interval_s=0.5,
                        rebalance_interval_s=1.0)


async def pull(cc: ClientConfig, topic: str, group: str, want: bytes) -> None:
    before = vm_hwm_bytes()
    bodies: list[str] = []
    async with PullConsumer(group, client_config=cc, consume_from=ConsumeFromWhere.FIRST_OFFSET,
                            suspend_s=1.0) as pc:
        broker = (await pc.fetch_queues(topic))[0].broker_name
        await pc.assign([MessageQueue(topic, broker, 0)])
        with trio.fail_after(WAIT_S):
            while want.decode() not in bodies:
                bodies += [shown(m.body) for m in await pc.poll(1.0)]
            # until the pull that met the bomb (main has no counter: nothing to wait for), then
            # once more: poll takes a skipped message as consumed when it reaches it
            while getattr(pc.pull_api, "skipped_messages", 1) < 1:
                bodies += [shown(m.body) for m in await pc.poll(1.0)]
            bodies += [shown(m.body) for m in await pc.poll(0.1)]
        await pc.commit()
        skipped = getattr(pc.pull_api, "skipped_messages", None)
    emit({"bodies": bodies, "skipped": skipped, "hwm_growth": vm_hwm_bytes() - before})


async def push(cc: ClientConfig, topic: str, group: str, want: bytes) -> None:
    before = vm_hwm_bytes()
    bodies: list[str] = []
    got = trio.Event()

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        bodies.extend(shown(m.body) for m in msgs)
        if any(m.body == want for m in msgs):
            got.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, client_config=cc, listener=listener,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    async with consumer:
        with trio.fail_after(WAIT_S):
            await got.wait()
        skipped = getattr(consumer.pull_api, "skipped_messages", None)
    emit({"bodies": bodies, "skipped": skipped, "hwm_growth": vm_hwm_bytes() - before})


async def request(cc: ClientConfig, topic: str, group: str, want: bytes) -> None:
    before = vm_hwm_bytes()
    async with Producer(group, client_config=cc) as producer:
        await producer.queues_for(topic)
        await producer.instance.send_heartbeat_to_all()
        emit({"client_id": producer.instance.client_id})
        with trio.fail_after(WAIT_S):
            line = await trio.to_thread.run_sync(sys.stdin.readline)
        assert line.strip() == "go", line
        reply = await producer.request(Message(topic, want), timeout=WAIT_S)
        waiting = len(producer.instance.request_futures)
    emit({"reply": shown(reply.body), "waiting": waiting,
          "hwm_growth": vm_hwm_bytes() - before})


MODES = {"pull": pull, "push": push, "request": request}


def main() -> None:
    mode, namesrv, topic, group, want = sys.argv[1:6]
    trio.run(MODES[mode], client_config(namesrv), topic, group, want.encode())


if __name__ == "__main__":
    main()
