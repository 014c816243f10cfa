"""Runs inside the venv of the unmodified rocketmq-python-client (5.x, from PyPI): a scenario
against an endpoint, one JSON line per event on stdout.

    probe.py ENDPOINT produce TOPIC FIFO_TOPIC DELAY_TOPIC
    probe.py ENDPOINT consume TOPIC GROUP COUNT DEADLINE_S
    probe.py ENDPOINT simple TOPIC GROUP DEADLINE_S
    probe.py ENDPOINT transaction TOPIC DEADLINE_S
    probe.py ENDPOINT push TOPIC GROUP CONSUMERS COUNT DEADLINE_S
    probe.py ENDPOINT push_fifo TOPIC GROUP CONSUMERS GROUPS PER_GROUP DEADLINE_S
    probe.py ENDPOINT try_send TOPIC          (one send per account of $PROBE_ACCOUNTS)
    probe.py ENDPOINT stream TOPIC GROUP STOP_FILE DEADLINE_S
    probe.py ENDPOINT many LANES_JSON     (several of the above at once: see ``many``)

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
import traceback

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


def printer(scenario=None):
    """The ``emit`` a scenario is given: each event one JSON line on stdout, tagged with
    SCENARIO when several run at once (``many``)."""

    def emit(**event):
        line = json.dumps(event if scenario is None else {"scenario": scenario, **event})
        with _OUT:  # listeners run on the SDK's threads
            print(line, flush=True)

    return emit


def _simple_consumer(config, topic, group):
    """A SimpleConsumer of GROUP on TOPIC (every tag), waiting 5 s at most for messages: the
    shortest long poll a proxy grants (``grpcClientConsumerMinLongPollingTimeoutMillis``); with
    the SDK's 3 s request timeout on top, its deadline leaves the proxy that (``await_duration``
    2, a 5 s deadline, is refused ILLEGAL_POLLING_TIME, by Apache's proxy as by ours)."""
    return SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5,
                          tls_enable=TLS)


def produce(emit, endpoint, topic, fifo_topic, delay_topic):
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


def consume(emit, endpoint, topic, group, count, deadline_s):
    """Receive COUNT messages: the first one is given 1 s more invisible time (and a new
    receipt handle), every one is acked; then one more receive finds nothing."""
    config = _config(endpoint)
    consumer = _simple_consumer(config, topic, group)
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


def simple(emit, endpoint, topic, group, deadline_s):
    """Three messages sent ("keep", "change", "expire"), then received with 3 s of invisible
    time: "keep" acked at once, "change" given 1 s instead, "expire" left to its 3 s; each of
    the two comes back (delivery attempt 2) and is acked then."""
    config = _config(endpoint)
    producer = Producer(config, (topic,), tls_enable=TLS)
    producer.startup()
    try:
        for body in ("keep", "change", "expire"):
            producer.send(_message(topic, body, "S"))
    finally:
        producer.shutdown()
    consumer = _simple_consumer(config, topic, group)
    consumer.startup()
    emit(event="started")
    done = set()
    deadline = time.monotonic() + float(deadline_s)
    try:
        while len(done) < 3 and time.monotonic() < deadline:
            try:
                msgs = consumer.receive(16, 3)
            except Exception:  # MESSAGE_NOT_FOUND surfaces as an exception
                continue
            for m in msgs:
                body, attempt = m.body.decode(), m.delivery_attempt
                emit(event="received", body=body, attempt=attempt, message_id=m.message_id)
                if attempt > 1 or body == "keep":
                    consumer.ack(m)
                    done.add(body)
                    emit(event="acked", body=body, attempt=attempt)
                elif body == "change":
                    consumer.change_invisible_duration(m, 1)
                    emit(event="changed", body=body)
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

    def __init__(self, emit):
        self.emit = emit
        self.checked = set()
        self.done = threading.Event()

    def check(self, message):
        body = message.body.decode()
        self.emit(event="checked", body=body, message_id=message.message_id, topic=message.topic)
        self.checked.add(body)
        if {"check-commit", "check-rollback"} <= self.checked:
            self.done.set()
        if body.endswith("commit"):
            return TransactionResolution.COMMIT
        return TransactionResolution.ROLLBACK


def transaction(emit, endpoint, topic, deadline_s):
    """Four half messages: one committed, one rolled back, two left to the broker's check
    (answered commit and rollback); then a SimpleConsumer reads what the topic holds."""
    checker = Checker(emit)
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
    consumer = _simple_consumer(config, topic, group)
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
    def __init__(self, emit, who, seen, lock):
        self.emit, self.who, self.seen, self.lock = emit, who, seen, lock

    def consume(self, message):
        with self.lock:
            self.seen.append((self.who, message.body.decode()))
        self.emit(event="consumed", who=self.who, body=message.body.decode(),
             attempt=message.delivery_attempt)
        return ConsumeResult.SUCCESS


def push(emit, endpoint, topic, group, consumers, count, deadline_s):
    """CONSUMERS push consumers of GROUP (QueryAssignment, then receive by POP), then COUNT
    messages sent: each consumed."""
    config = _config(endpoint)
    seen, lock = [], threading.Lock()
    started = []
    try:
        for i in range(int(consumers)):
            c = PushConsumer(config, group, Recorder(emit, f"c{i}", seen, lock),
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

    def __init__(self, emit, who, state):
        self.emit, self.who, self.state = emit, who, state

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
        self.emit(event="consumed", who=self.who, group=group, seq=int(seq), start=start, end=end,
             overlap=overlap, message_group=message.message_group,
             attempt=message.delivery_attempt)
        return ConsumeResult.SUCCESS


def push_fifo(emit, endpoint, topic, group, consumers, groups, per_group, deadline_s):
    """CONSUMERS push consumers of the orderly GROUP, then GROUPS message groups of PER_GROUP
    messages each (body "g<k>:<seq>"), the groups sent at once (a thread each): each message
    consumed, each group's in order."""
    config = _config(endpoint)
    state = {"lock": threading.Lock(), "busy": set(), "seen": set(), "unsent": {}}
    started = []
    try:
        for i in range(int(consumers)):
            c = PushConsumer(config, group, FifoRecorder(emit, f"c{i}", state),
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
                t = time.monotonic()
                try:
                    producer.send(msg)
                except Exception as e:  # the group's later messages would follow a gap: stop
                    emit(event="send_failed", group=f"g{k}", seq=seq, start=t,
                         end=time.monotonic(), error=f"{type(e).__name__}: {e}")
                    with state["lock"]:
                        state["unsent"][f"g{k}"] = int(per_group) - seq
                    return

        senders = [threading.Thread(target=send_group, args=(k,)) for k in range(int(groups))]
        try:
            for t in senders:
                t.start()
            for t in senders:
                t.join()
        finally:
            producer.shutdown()
        emit(event="sent", t=time.monotonic(), failed=len(state["unsent"]))
        # a group whose send failed stopped there: its later messages were never sent
        want = int(groups) * int(per_group) - sum(state["unsent"].values())
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


def try_send(emit, endpoint, topic):
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


def _stream_send(emit, producer, topic, stop_file, sent, lock):
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


def _stream_receive(emit, consumer, stop, want):
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


def stream(emit, endpoint, topic, group, stop_file, deadline_s):
    """A producer streaming numbered messages and a SimpleConsumer receiving and acking them
    at the same time (a master is killed meanwhile); once STOP_FILE exists, the consumer goes
    on until it received every acked message (or the deadline)."""
    config = _config(endpoint)
    producer = Producer(config, (topic,), tls_enable=TLS)
    consumer = _simple_consumer(config, topic, group)
    producer.startup()
    consumer.startup()
    emit(event="started")
    sent, lock, stop = set(), threading.Lock(), threading.Event()

    def want():
        with lock:
            return set(sent)

    reader = threading.Thread(target=_stream_receive, args=(emit, consumer, stop, want),
                              daemon=True)
    reader.start()
    try:
        _stream_send(emit, producer, topic, stop_file, sent, lock)
        stop.set()
        reader.join(float(deadline_s))
    finally:
        producer.shutdown()
        consumer.shutdown()
    emit(event="done")


SCENARIOS = {
    "produce": produce, "consume": consume, "simple": simple, "transaction": transaction,
    "push": push, "push_fifo": push_fifo, "try_send": try_send, "stream": stream,
}


def many(endpoint, lanes_json):
    """The scenarios of LANES_JSON (a list of lanes, a lane a list of [scenario, args...]) at
    once, one thread per lane running its scenarios one after the other, each event tagged
    with its scenario (a scenario at most once). A scenario that raises is reported
    ("failed", with its traceback) and ends its lane; then the exit is 1, without "done"."""
    lanes = json.loads(lanes_json)
    names = [step[0] for lane in lanes for step in lane]
    if len(set(names)) != len(names) or not set(names) <= set(SCENARIOS):
        sys.exit(f"many: each scenario at most once, of {sorted(SCENARIOS)}: {names}")
    failed = []

    def run(lane):
        for scenario, *args in lane:
            try:
                SCENARIOS[scenario](printer(scenario), endpoint, *args)
            except Exception:
                failed.append(scenario)
                printer(scenario)(event="failed", error=traceback.format_exc()[-3000:])
                return

    threads = [threading.Thread(target=run, args=(lane,)) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        sys.exit(f"many: {sorted(failed)} failed")
    printer()(event="done")


if __name__ == "__main__":
    endpoint, scenario, *rest = sys.argv[1:]
    if scenario == "many":
        many(endpoint, *rest)
    elif scenario in SCENARIOS:
        SCENARIOS[scenario](printer(), endpoint, *rest)
    else:
        sys.exit(f"unknown scenario {scenario}")
