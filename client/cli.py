"""``rmq-cluster produce | consume``: send and receive from the command line.

``deploy/cli.py`` wires these into its parser (``add_commands``); each command runs one
``trio.run``. ``--json`` prints JSON (one object per line for per-message output, then a
summary object); otherwise plain text. A progress line is drawn on a TTY only.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import trio

from rmq_cluster.client.cli_common import Progress, add_ns, client_config, msg_row, out, runner
from rmq_cluster.client.consumer import PushConsumer
from rmq_cluster.client.errors import MQClientError
from rmq_cluster.client.model import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    ReceivedMessage,
    SendResult,
)
from rmq_cluster.client.producer import Producer

#: produce: sends outstanding at once when not batching.
DEFAULT_PRODUCE_IN_FLIGHT = 64


# ====================================================================== produce


def _send_row(i: int, r: SendResult) -> dict[str, Any]:
    return {"i": i, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "status": r.status.value,
            "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
            "queueOffset": r.queue_offset}


async def _produce(args: argparse.Namespace) -> int:
    body_base = (b"x" * args.size) if args.size > 0 else b"x"
    progress = Progress("sent", args.count)
    sent = 0
    errors = 0
    start = time.monotonic()

    user_props: list[tuple[str, str]] = []
    for item in args.prop or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise MQClientError(f"--prop needs KEY=VALUE, got {item!r}")
        user_props.append((name, value))

    def make(i: int) -> Message:
        tags = args.tags.format(i=i) if args.tags else None
        keys = args.keys.format(i=i) if args.keys else None
        props = {k: v.format(i=i) for k, v in user_props}
        return Message(args.topic, body_base, tags=tags, keys=keys, properties=props)

    async with Producer(args.group, client_config=client_config(args)) as p:
        if args.batch and args.batch > 1:
            for first in range(0, args.count, args.batch):
                msgs = [make(i) for i in range(first, min(args.count, first + args.batch))]
                try:
                    r = await p.send_batch(msgs)
                except MQClientError as exc:
                    errors += len(msgs)
                    _report_error(args, first, exc)
                    continue
                for j, mid in enumerate(r.msg_id.split(",")):
                    if args.json:
                        row = _send_row(first + j, r)
                        row["msgId"] = mid
                        row["queueOffset"] = r.queue_offset + j
                        row["offsetMsgId"] = [*r.offset_msg_id.split(","), ""][j]
                        out(row)
                sent += len(msgs)
                progress.update(sent)
        else:
            limit = trio.Semaphore(max(1, args.in_flight))
            rows: dict[int, dict[str, Any]] = {}

            async def one(i: int) -> None:
                nonlocal sent, errors
                try:
                    r = await p.send(make(i))
                    rows[i] = _send_row(i, r)
                    sent += 1
                    progress.update(sent)
                except MQClientError as exc:
                    errors += 1
                    _report_error(args, i, exc)
                finally:
                    limit.release()

            async with trio.open_nursery() as n:
                for i in range(args.count):
                    await limit.acquire()
                    n.start_soon(one, i)
            if args.json:
                for i in sorted(rows):
                    out(rows[i])
    progress.update(sent, force=True)
    progress.finish()
    elapsed = time.monotonic() - start
    summary = {"topic": args.topic, "sent": sent, "errors": errors,
               "seconds": round(elapsed, 3), "msgsPerSec": round(sent / elapsed, 1) if elapsed
               else 0.0, "bodyBytes": len(body_base), "batch": args.batch or 1}
    if args.json:
        out({"summary": summary})
    else:
        print(f"sent {sent} messages to {args.topic} in {elapsed:.2f}s "
              f"({summary['msgsPerSec']} msg/s), {errors} errors")
    return 0 if errors == 0 else 1


def _report_error(args: argparse.Namespace, i: int, exc: MQClientError) -> None:
    if args.json:
        out({"i": i, "error": str(exc), "code": exc.code})
    else:
        print(f"send {i} failed: {exc}", file=sys.stderr)


# ====================================================================== consume



async def _consume(args: argparse.Namespace) -> int:
    got: dict[str, ReceivedMessage] = {}
    enough = trio.Event()
    activity = trio.Event()
    progress = Progress("received", args.count)

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        nonlocal activity
        for m in msgs:
            if m.msg_id in got:
                continue
            got[m.msg_id] = m
            if args.json:
                out(msg_row(m))
            else:
                r = msg_row(m)
                print(f"{r['msgId']} q={r['brokerName']}:{r['queueId']} off={r['queueOffset']} "
                      f"keys={r['keys']} tags={r['tags']} crc={r['bodyCrc']}")
        progress.update(len(got))
        activity.set()
        activity = trio.Event()
        if args.count and len(got) >= args.count:
            enough.set()
        return ConsumeResult.SUCCESS

    start = time.monotonic()
    how = {"first": ConsumeFromWhere.FIRST_OFFSET, "last": ConsumeFromWhere.LAST_OFFSET}[args.start]
    consumer = PushConsumer(args.group, client_config=client_config(args), listener=listener,
                            consume_from=how)
    if args.sql is not None:
        consumer.subscribe(args.topic, args.sql, expression_type="SQL92")
    else:
        consumer.subscribe(args.topic, args.subscription)
    async with consumer:
        while not enough.is_set():
            # stop after --timeout seconds without a new message
            with trio.move_on_after(args.timeout) as idle:
                async with trio.open_nursery() as n:
                    async def stop_when_enough() -> None:
                        await enough.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(stop_when_enough)
                    await activity.wait()
                    n.cancel_scope.cancel()
            if idle.cancelled_caught:
                break
    progress.finish()
    elapsed = time.monotonic() - start
    summary = {"topic": args.topic, "group": args.group, "received": len(got),
               "seconds": round(elapsed, 3)}
    if args.json:
        out({"summary": summary})
    else:
        print(f"received {len(got)} messages from {args.topic} in {elapsed:.2f}s")
    return 0 if not args.count or len(got) >= args.count else 1



# ====================================================================== wiring


def add_commands(sub: Any) -> None:
    """Add produce and consume to ``sub`` (argparse subparsers); each parser gets
    ``func(args) -> exit code``."""
    p = sub.add_parser("produce", help="send messages through the client")
    add_ns(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="rmq-cli-producer")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--size", type=int, default=128, help="body bytes")
    p.add_argument("--tags", help="tag ({i} is the message index)")
    p.add_argument("--keys", help="keys ({i} is the message index)")
    p.add_argument("--prop", action="append", metavar="KEY=VALUE",
                   help="a user property, repeatable ({i} is the message index); "
                        "consumers select on them with --sql")
    p.add_argument("--batch", type=int, default=0, help="send batches of K messages")
    p.add_argument("--in-flight", type=int, default=DEFAULT_PRODUCE_IN_FLIGHT)
    p.set_defaults(func=runner(_produce))

    p = sub.add_parser("consume", help="receive messages with a push consumer")
    add_ns(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-s", "--subscription", default="*", help="tag expression, e.g. 'A || B'")
    p.add_argument("--sql", default=None, metavar="EXPR",
                   help="SQL92 selector on message properties instead of tags, e.g. "
                        "\"a BETWEEN 1 AND 5\" (the broker needs enablePropertyFilter=true)")
    p.add_argument("--count", type=int, default=0, help="stop after N messages (0: no limit)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="stop after this many seconds without a new message")
    p.add_argument("--from", dest="start", choices=("first", "last"), default="first",
                   help="where a group without a committed offset starts")
    p.set_defaults(func=runner(_consume))
