"""``rmq-cluster produce | consume``: send and receive from the command line.

``cli/main.py`` wires these into its parser (``add_commands``); each command runs one
``trio.run``. ``--json`` prints JSON (one object per line for per-message output, then a
summary object); otherwise plain text. A progress line is drawn on a TTY only.

``consume --count N`` hands exactly N messages to its listener and commits only their offsets
(the push consumer's ``consume_limit``): the rest stay for the group's next consumer. Exit
status 1 when fewer than N came, the NameServer cannot be reached or the topic has no route.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import trio

from ..cluster.cli_args import non_negative, positive, seconds
from .admin import Admin
from .cli_common import (
    Progress,
    add_ns,
    client_config,
    fail,
    msg_row,
    msg_text,
    out,
    runner,
)
from .config import DEFAULT_MAX_MESSAGE_BYTES
from .consumer import PushConsumer
from .errors import MQClientError
from .model import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    ReceivedMessage,
    SendResult,
)
from .producer import Producer

#: produce: sends outstanding at once when not batching.
DEFAULT_PRODUCE_IN_FLIGHT = 64


# ====================================================================== produce


def _send_row(i: int, r: SendResult) -> dict[str, Any]:
    return {"i": i, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "status": r.status.value,
            "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
            "queueOffset": r.queue_offset}


def _body(args: argparse.Namespace, i: int) -> bytes:
    if args.body is not None:
        return args.body.replace("{i}", str(i)).encode("utf-8")
    if args.body_file is not None:
        return bytes(args.body_file)
    return (b"x" * args.size) if args.size > 0 else b"x"


async def _produce(args: argparse.Namespace) -> int:
    body_base = _body(args, 0)
    body_varies = args.body is not None and "{i}" in args.body
    progress = Progress("sent", args.count)
    sent = 0
    errors = 0
    first_error: list[str] = []
    start = time.monotonic()
    user_props: list[tuple[str, str]] = list(args.prop or ())

    def make(i: int) -> Message:
        # only "{i}" is replaced: a value may hold other braces (JSON, say)
        n = str(i)
        tags = args.tags.replace("{i}", n) if args.tags else None
        keys = args.keys.replace("{i}", n) if args.keys else None
        props = {k: v.replace("{i}", n) for k, v in user_props}
        body = _body(args, i) if body_varies else body_base
        return Message(args.topic, body, tags=tags, keys=keys, properties=props,
                       delay_level=args.delay, delay_ms=args.delay_ms,
                       deliver_time_ms=args.deliver_at)

    async with Producer(args.group, client_config=client_config(args)) as p:
        if args.batch and args.batch > 1:
            for first in range(0, args.count, args.batch):
                msgs = [make(i) for i in range(first, min(args.count, first + args.batch))]
                try:
                    r = await p.send_batch(msgs)
                except MQClientError as exc:
                    errors += len(msgs)
                    _report_error(args, first, exc, first_error)
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
                    _report_error(args, i, exc, first_error)
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
    if errors:
        fail(f"{errors} of {args.count} sends to {args.topic} failed; first: {first_error[0]}")
        return 1
    return 0


def _report_error(args: argparse.Namespace, i: int, exc: MQClientError,
                  first: list[str]) -> None:
    """A failed send: a JSON row with ``--json``; the first error is kept for the one line
    on stderr at the end."""
    if not first:
        first.append(f"send {i}: {exc}")
    if args.json:
        out({"i": i, "error": str(exc), "code": exc.code})


# ====================================================================== consume



async def _check_route(args: argparse.Namespace) -> None:
    """The topic has a route: the NameServer answers and knows it (else MQClientError, one
    line, exit 1 -- not "received 0 messages" after the idle timeout)."""
    async with Admin(client_config=client_config(args)) as admin:
        route = await admin.topic_route(args.topic)
    if not route.queue_datas or not route.broker_datas:
        raise MQClientError(f"topic {args.topic!r} has no queues on any broker")


async def _consume(args: argparse.Namespace) -> int:
    await _check_route(args)
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
            r = msg_row(m)
            if args.json:
                out(r)
            else:
                print(msg_text(r))
        progress.update(len(got))
        activity.set()
        activity = trio.Event()
        if args.count and len(got) >= args.count:
            enough.set()
        return ConsumeResult.SUCCESS

    start = time.monotonic()
    how = {"first": ConsumeFromWhere.FIRST_OFFSET, "last": ConsumeFromWhere.LAST_OFFSET}[args.start]
    # exactly --count messages reach the listener; only their offsets are committed
    consumer = PushConsumer(args.group, client_config=client_config(args), listener=listener,
                            consume_from=how, consume_limit=args.count)
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
    if args.count and len(got) < args.count:
        fail(f"received {len(got)} of {args.count} messages from {args.topic} "
             f"(none new for {args.timeout:g} s)")
        return 1
    return 0


# ====================================================================== wiring


def _epoch_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time in ms since the epoch: {text!r}") from None
    if not 0 <= value < 1 << 63:
        raise argparse.ArgumentTypeError(f"out of range: {text!r}")
    return value


def _prop(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"needs KEY=VALUE, got {text!r}")
    return name.strip(), value


def _body_file(path: str) -> bytes:
    """``--body-file F`` (``-``: stdin), at most the client's message size limit."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(DEFAULT_MAX_MESSAGE_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(DEFAULT_MAX_MESSAGE_BYTES + 1)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > DEFAULT_MAX_MESSAGE_BYTES:
        raise argparse.ArgumentTypeError(
            f"{path} is larger than a message may be ({DEFAULT_MAX_MESSAGE_BYTES} bytes)")
    return data


def add_commands(sub: Any) -> None:
    """Add produce and consume to ``sub`` (argparse subparsers); each parser gets
    ``func(args) -> exit code``."""
    p = sub.add_parser("produce", help="send messages through the client",
                       description="Send --count messages to a topic. The body is --body TEXT, "
                                   "--body-file F (- for stdin) or --size bytes of 'x'.")
    add_ns(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="rmq-cli-producer")
    p.add_argument("--count", type=positive, default=1)
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", metavar="TEXT", help="the body, as UTF-8 ({i} is the index)")
    body.add_argument("--body-file", type=_body_file, metavar="F",
                      help="the body, the bytes of file F (- reads stdin)")
    body.add_argument("--size", type=non_negative, default=128,
                      help="a body of this many bytes (default 128)")
    p.add_argument("--tags", help="tag ({i} is the message index)")
    p.add_argument("--keys", help="keys, space-separated ({i} is the message index)")
    p.add_argument("--prop", action="append", type=_prop, metavar="KEY=VALUE",
                   help="a user property, repeatable ({i} is the message index); "
                        "consumers select on them with --sql")
    p.add_argument("--delay", type=positive, default=0, metavar="LEVEL",
                   help="delay level (1s 5s 10s 30s 1m 2m ... by the broker's "
                        "messageDelayLevel; default: none)")
    timer = p.add_mutually_exclusive_group()
    timer.add_argument("--delay-ms", type=non_negative, default=None, metavar="MS",
                       help="a timer message: delivered MS after the broker stores it "
                            "(RocketMQ 5 TIMER_DELAY_MS; the broker's timerMaxDelaySec caps it)")
    timer.add_argument("--deliver-at", type=_epoch_ms, default=None, metavar="MS",
                       help="a timer message: delivered at MS, ms since the epoch "
                            "(RocketMQ 5 TIMER_DELIVER_MS)")
    p.add_argument("--batch", type=non_negative, default=0, help="send batches of K messages")
    p.add_argument("--in-flight", type=positive, default=DEFAULT_PRODUCE_IN_FLIGHT)
    p.set_defaults(func=runner(_produce))

    p = sub.add_parser("consume", help="receive messages with a push consumer",
                       description="Consume with a push consumer and print each message: ids, "
                                   "queue, keys, tags, properties and the body (UTF-8 text, or "
                                   "base64 with bodyEncoding=base64).")
    add_ns(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-s", "--subscription", default="*", help="tag expression, e.g. 'A || B'")
    p.add_argument("--sql", default=None, metavar="EXPR",
                   help="SQL92 selector on message properties instead of tags, e.g. "
                        "\"a BETWEEN 1 AND 5\" (the broker needs enablePropertyFilter=true)")
    p.add_argument("--count", type=non_negative, default=0,
                   help="consume exactly N messages and commit only those (0: no limit); "
                        "exit status 1 if fewer came")
    p.add_argument("--timeout", type=seconds, default=10.0,
                   help="stop after this many seconds without a new message")
    p.add_argument("--from", dest="start", choices=("first", "last"), default="first",
                   help="where a group without a committed offset starts")
    p.set_defaults(func=runner(_consume))
