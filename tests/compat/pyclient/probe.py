"""Runs inside the venv of the unmodified rocketmq-python-client (5.x, from PyPI): a scenario
against an endpoint, one JSON line per event on stdout.

    probe.py ENDPOINT produce TOPIC FIFO_TOPIC DELAY_TOPIC
    probe.py ENDPOINT consume TOPIC GROUP COUNT DEADLINE_S
    probe.py ENDPOINT transaction TOPIC DEADLINE_S
    probe.py ENDPOINT push TOPIC GROUP CONSUMERS COUNT DEADLINE_S
    probe.py ENDPOINT push_fifo TOPIC GROUP CONSUMERS GROUPS PER_GROUP DEADLINE_S
    probe.py ENDPOINT try_send TOPIC          (one send per account of $PROBE_ACCOUNTS)
    probe.py ENDPOINT stream TOPIC GROUP STOP_FILE DEADLINE_S

Configured as a user would: $PROBE_ACCESS_KEY / $PROBE_SECRET_KEY are the credentials (none
when unset); $PROBE_TLS=1 turns the SDK's TLS on (it then trusts the roots gRPC trusts:
$GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names the cluster's certificate).
"""

import contextlib
import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

_OUT = threading.Lock()
TLS = os.environ.get("PROBE_TLS") == "1"


def _config(endpoint, access_key=None, secret_key=None):
    credentials = Credentials(access_key or os.environ.get("PROBE_ACCESS_KEY", ""),
                              secret_key or os.environ.get("PROBE_SECRET_KEY", ""))
    return ClientConfiguration(endpoint, credentials)


def emit(**event):
    line = json.dumps(event)
    with _OUT:  # listeners run on the SDK's threads
        print(line, flush=True)


def produce(endpoint, topic, fifo_topic, delay_topic):
    config = _config(endpoint)
    producer = Producer(config, (topic, fifo_topic, delay_topic), tls_enable=TLS)
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
    config = _config(endpoint)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2,
                              tls_enable=TLS)
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


def _message(topic, body, tag):
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    msg.tag = tag
    return msg


class Checker(TransactionChecker):
    """Answers the proxy's check by the body: "check-commit" commits, and so does "commit"
    (the producer's own commit may still be on its way when a loaded broker checks), anything
    else rolls back. Every check is reported."""

    def __init__(self):
        self.checked = set()
        self.done = threading.Event()

    def check(self, message):
        body = message.body.decode()
        emit(event="checked", body=body, message_id=message.message_id, topic=message.topic)
        self.checked.add(body)
        if {"check-commit", "check-rollback"} <= self.checked:
            self.done.set()
        if body.endswith("commit"):
            return TransactionResolution.COMMIT
        return TransactionResolution.ROLLBACK


def transaction(endpoint, topic, deadline_s):
    """Four half messages: one committed, one rolled back, two left to the broker's check
    (answered commit and rollback); then a SimpleConsumer reads what the topic holds."""
    checker = Checker()
    config = _config(endpoint)
    producer = Producer(config, (topic,), checker, tls_enable=TLS)
    producer.startup()
    emit(event="started")
    try:
        for body, end in (("commit", "commit"), ("rollback", "rollback"),
                          ("check-commit", None), ("check-rollback", None)):
            tx = producer.begin_transaction()
            r = producer.send(_message(topic, body, "TX"), tx)
            emit(event="sent", body=body, message_id=r.message_id,
                 transaction_id=r.transaction_id)
            if end == "commit":
                tx.commit()
            elif end == "rollback":
                tx.rollback()
            if end:
                emit(event="ended", body=body, resolution=end)
        checker.done.wait(float(deadline_s))
        emit(event="checks", bodies=sorted(checker.checked))
        emit(event="visible", bodies=_receive_all(config, topic, f"{topic}_reader", 2,
                                                  float(deadline_s)))
    finally:
        producer.shutdown()
    emit(event="done")


def _receive_all(config, topic, group, want, deadline_s):
    """Receive and ack until WANT messages came (or the deadline): their bodies, sorted."""
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2,
                              tls_enable=TLS)
    consumer.startup()
    got = []
    deadline = time.monotonic() + deadline_s
    try:
        while len(got) < want and time.monotonic() < deadline:
            try:
                msgs = consumer.receive(16, 15)
            except Exception:  # MESSAGE_NOT_FOUND surfaces as an exception
                continue
            for m in msgs:
                got.append(m.body.decode())
                consumer.ack(m)
    finally:
        consumer.shutdown()
    return sorted(got)


class Recorder(MessageListener):
    def __init__(self, who, seen, lock):
        self.who, self.seen, self.lock = who, seen, lock

    def consume(self, message):
        with self.lock:
            self.seen.append((self.who, message.body.decode()))
        emit(event="consumed", who=self.who, body=message.body.decode(),
             attempt=message.delivery_attempt)
        return ConsumeResult.SUCCESS


def push(endpoint, topic, group, consumers, count, deadline_s):
    """CONSUMERS push consumers of GROUP (QueryAssignment, then receive by POP), then COUNT
    messages sent: each consumed."""
    config = _config(endpoint)
    seen, lock = [], threading.Lock()
    started = []
    try:
        for i in range(int(consumers)):
            c = PushConsumer(config, group, Recorder(f"c{i}", seen, lock),
                             {topic: FilterExpression("*")}, tls_enable=TLS)
            c.startup()
            started.append(c)
        emit(event="started", consumers=len(started))
        producer = Producer(config, (topic,), tls_enable=TLS)
        producer.startup()
        try:
            for i in range(int(count)):
                producer.send(_message(topic, f"push {i}", "P"))
        finally:
            producer.shutdown()
        want = {f"push {i}" for i in range(int(count))}
        deadline = time.monotonic() + float(deadline_s)
        while time.monotonic() < deadline:
            with lock:
                if want <= {body for _, body in seen}:
                    break
            time.sleep(0.1)
    finally:
        for c in started:
            c.shutdown()
    emit(event="done")


class FifoRecorder(MessageListener):
    """Records each message's consumption, with when it began and ended (the SDK acks a FIFO
    message right after its listener returns, before the group's next one), and whether
    another consumer was in the same message group meanwhile."""

    def __init__(self, who, state):
        self.who, self.state = who, state

    def consume(self, message):
        group, seq = message.body.decode().split(":")
        with self.state["lock"]:
            overlap = group in self.state["busy"]
            self.state["busy"].add(group)
        start = time.monotonic()
        time.sleep(0.003)  # a little work: consumers of one group at once would overlap
        end = time.monotonic()
        with self.state["lock"]:
            self.state["busy"].discard(group)
            self.state["seen"].add((group, int(seq)))
        emit(event="consumed", who=self.who, group=group, seq=int(seq), start=start, end=end,
             overlap=overlap, message_group=message.message_group,
             attempt=message.delivery_attempt)
        return ConsumeResult.SUCCESS


def push_fifo(endpoint, topic, group, consumers, groups, per_group, deadline_s):
    """CONSUMERS push consumers of the orderly GROUP, then GROUPS message groups of PER_GROUP
    messages each (body "g<k>:<seq>"), the groups sent at once (a thread each): each message
    consumed, each group's in order."""
    config = _config(endpoint)
    state = {"lock": threading.Lock(), "busy": set(), "seen": set()}
    started = []
    try:
        for i in range(int(consumers)):
            c = PushConsumer(config, group, FifoRecorder(f"c{i}", state),
                             {topic: FilterExpression("*")}, tls_enable=TLS)
            c.startup()
            started.append(c)
        emit(event="started", consumers=len(started), fifo=[c.fifo for c in started],
             t=time.monotonic())
        producer = Producer(config, (topic,), tls_enable=TLS)
        producer.startup()

        def send_group(k):  # one thread per message group: its sends one after the other
            for seq in range(int(per_group)):
                msg = _message(topic, f"g{k}:{seq}", "F")
                msg.message_group = f"g{k}"
                producer.send(msg)

        senders = [threading.Thread(target=send_group, args=(k,)) for k in range(int(groups))]
        try:
            for t in senders:
                t.start()
            for t in senders:
                t.join()
        finally:
            producer.shutdown()
        emit(event="sent", t=time.monotonic())
        want = int(groups) * int(per_group)
        deadline = time.monotonic() + float(deadline_s)
        while time.monotonic() < deadline:
            with state["lock"]:
                if len(state["seen"]) >= want:
                    break
            time.sleep(0.1)
        emit(event="consumed_all", t=time.monotonic())
    finally:
        for c in started:
            c.shutdown()
    emit(event="done")


def try_send(endpoint, topic):
    """One send per account of $PROBE_ACCOUNTS (a JSON list of [access key, secret key]):
    what the SDK says about each (sent, or its error), never a failed exit."""
    for access_key, secret_key in json.loads(os.environ["PROBE_ACCOUNTS"]):
        producer = Producer(_config(endpoint, access_key, secret_key), (topic,), tls_enable=TLS)
        try:
            producer.startup()
            r = producer.send(_message(topic, "try", "T"))
            emit(event="sent", who=access_key, message_id=r.message_id)
        except Exception as exc:
            emit(event="refused", who=access_key, error=str(exc)[:500])
        finally:
            with contextlib.suppress(Exception):
                producer.shutdown()
    emit(event="done")


def _stream_send(producer, topic, stop_file, sent, lock):
    """Numbered sends, one every 50 ms, until STOP_FILE exists: each acked one ("sent", its
    body added to SENT) or failed ("send_failed"), with the wall time."""
    i = 0
    while not os.path.exists(stop_file):
        body = f"stream {i}"
        try:
            r = producer.send(_message(topic, body, "S"))
            with lock:
                sent.add(body)
            emit(event="sent", body=body, message_id=r.message_id, t=time.time())
        except Exception as exc:
            emit(event="send_failed", body=body, error=str(exc)[:200], t=time.time())
        i += 1
        time.sleep(0.05)


def _stream_receive(consumer, stop, want):
    """Receive (5 s invisible) and ack until STOP is set and WANT() is empty."""
    got = set()
    while not (stop.is_set() and not want() - got):
        try:
            msgs = consumer.receive(16, 5)
        except Exception as exc:  # MESSAGE_NOT_FOUND, or the proxy's error while failing over
            emit(event="receive_error", error=str(exc)[:200], t=time.time())
            continue
        for m in msgs:
            body = m.body.decode()
            got.add(body)
            emit(event="received", body=body, message_id=m.message_id,
                 attempt=m.delivery_attempt, t=time.time())
            try:
                consumer.ack(m)
            except Exception as exc:  # acked on a master that went: delivered again later
                emit(event="ack_failed", body=body, error=str(exc)[:200], t=time.time())


def stream(endpoint, topic, group, stop_file, deadline_s):
    """A producer streaming numbered messages and a SimpleConsumer receiving and acking them
    at the same time (a master is killed meanwhile); once STOP_FILE exists, the consumer goes
    on until it received every acked message (or the deadline)."""
    config = _config(endpoint)
    producer = Producer(config, (topic,), tls_enable=TLS)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2,
                              tls_enable=TLS)
    producer.startup()
    consumer.startup()
    emit(event="started")
    sent, lock, stop = set(), threading.Lock(), threading.Event()

    def want():
        with lock:
            return set(sent)

    reader = threading.Thread(target=_stream_receive, args=(consumer, stop, want), daemon=True)
    reader.start()
    try:
        _stream_send(producer, topic, stop_file, sent, lock)
        stop.set()
        reader.join(float(deadline_s))
    finally:
        producer.shutdown()
        consumer.shutdown()
    emit(event="done")


if __name__ == "__main__":
    endpoint, scenario, *rest = sys.argv[1:]
    if scenario == "produce":
        produce(endpoint, *rest)
    elif scenario == "consume":
        consume(endpoint, *rest)
    elif scenario == "transaction":
        transaction(endpoint, *rest)
    elif scenario == "push":
        push(endpoint, *rest)
    elif scenario == "push_fifo":
        push_fifo(endpoint, *rest)
    elif scenario == "try_send":
        try_send(endpoint, *rest)
    elif scenario == "stream":
        stream(endpoint, *rest)
    else:
        sys.exit(f"unknown scenario {scenario}")
