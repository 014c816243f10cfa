"""Runs inside the venv of the unmodified rocketmq-python-client (5.x, from PyPI): a scenario
against an endpoint, one JSON line per event on stdout.

    probe.py ENDPOINT produce TOPIC FIFO_TOPIC DELAY_TOPIC
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def emit(**event):
    print(json.dumps(event), flush=True)


def produce(endpoint, topic, fifo_topic, delay_topic):
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic, fifo_topic, delay_topic))
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


if __name__ == "__main__":
    endpoint, scenario, *rest = sys.argv[1:]
    if scenario == "produce":
        produce(endpoint, *rest)
    else:
        sys.exit(f"unknown scenario {scenario}")
