"""Runs inside the venv of the unmodified rocketmq-python-client (5.x, from PyPI): a scenario
against an endpoint, one JSON line per event on stdout.

    probe.py ENDPOINT produce TOPIC FIFO_TOPIC DELAY_TOPIC
    probe.py ENDPOINT consume TOPIC GROUP COUNT DEADLINE_S
    probe.py ENDPOINT try_send TOPIC          (one send per account of $PROBE_ACCOUNTS)

Configured as a user would: $PROBE_ACCESS_KEY / $PROBE_SECRET_KEY are the credentials (none
when unset); $PROBE_TLS=1 turns the SDK's TLS on (it then trusts the roots gRPC trusts:
$GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names the cluster's certificate).
"""

import contextlib
import json
import os
import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def emit(**event):
    print(json.dumps(event), flush=True)


def _config(endpoint):
    credentials = Credentials(os.environ.get("PROBE_ACCESS_KEY", ""),
                              os.environ.get("PROBE_SECRET_KEY", ""))
    return ClientConfiguration(endpoint, credentials)


TLS = os.environ.get("PROBE_TLS") == "1"


def produce(endpoint, topic, fifo_topic, delay_topic):
    producer = Producer(_config(endpoint), (topic, fifo_topic, delay_topic), tls_enable=TLS)
    producer.startup()
    emit(event="started")
    try:
        for i in range(3):
            msg = Message()
            msg.topic = topic
            msg.body = f"normal {i}".encode()
            msg.tag = "N"
            msg.keys = f"k{i}"
            msg.add_property("idx", str(i))
            r = producer.send(msg)
            emit(event="sent", kind="normal", idx=i, message_id=r.message_id, offset=r.offset)
        for i in range(4):
            msg = Message()
            msg.topic = fifo_topic
            msg.body = f"fifo {i}".encode()
            msg.tag = "F"
            msg.message_group = f"group-{i % 2}"
            r = producer.send(msg)
            emit(event="sent", kind="fifo", idx=i, group=msg.message_group,
                 message_id=r.message_id, offset=r.offset,
)
        msg = Message()
        msg.topic = delay_topic
        msg.body = b"delayed"
        msg.tag = "D"
        deliver_s = int(time.time()) + 3  # the SDK takes seconds since the epoch
        msg.delivery_timestamp = deliver_s
        r = producer.send(msg)
        emit(event="sent", kind="delay", idx=0, message_id=r.message_id, offset=r.offset,
             deliver_ms=deliver_s * 1000)
    finally:
        producer.shutdown()
    emit(event="done")


def consume(endpoint, topic, group, count, deadline_s):
    """Receive COUNT messages: the first one is given 1 s more invisible time (and a new
    receipt handle), every one is acked; then one more receive finds nothing."""
    consumer = SimpleConsumer(_config(endpoint), group, {topic: FilterExpression("*")},
                              await_duration=2, tls_enable=TLS)
    consumer.startup()
    emit(event="started")
    seen = set()
    deadline = time.monotonic() + float(deadline_s)
    changed = False
    try:
        while len(seen) < int(count) and time.monotonic() < deadline:
            try:
                msgs = consumer.receive(16, 15)
            except Exception as exc:  # MESSAGE_NOT_FOUND surfaces as an exception
                emit(event="receive_error", error=str(exc)[:200])
                continue
            for m in msgs:
                if not changed:
                    consumer.change_invisible_duration(m, 20)
                    changed = True
                    emit(event="changed", message_id=m.message_id)
                consumer.ack(m)
                seen.add(m.message_id)
                emit(event="acked", message_id=m.message_id, body=m.body.decode(),
                     tag=m.tag, attempt=m.delivery_attempt)
    finally:
        consumer.shutdown()
    emit(event="done")


def try_send(endpoint, topic):
    """One send per account of $PROBE_ACCOUNTS (a JSON list of [access key, secret key]):
    what the SDK says about each (sent, or its error), never a failed exit."""
    for access_key, secret_key in json.loads(os.environ["PROBE_ACCOUNTS"]):
        config = ClientConfiguration(endpoint, Credentials(access_key, secret_key))
        producer = Producer(config, (topic,), tls_enable=TLS)
        try:
            producer.startup()
            msg = Message()
            msg.topic = topic
            msg.body = b"try"
            r = producer.send(msg)
            emit(event="sent", who=access_key, message_id=r.message_id)
        except Exception as exc:
            emit(event="refused", who=access_key, error=str(exc)[:500])
        finally:
            with contextlib.suppress(Exception):
                producer.shutdown()
    emit(event="done")


if __name__ == "__main__":
    endpoint, scenario, *rest = sys.argv[1:]
    if scenario == "produce":
        produce(endpoint, *rest)
    elif scenario == "consume":
        consume(endpoint, *rest)
    elif scenario == "try_send":
        try_send(endpoint, *rest)
    else:
        sys.exit(f"unknown scenario {scenario}")
