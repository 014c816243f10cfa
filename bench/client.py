"""Client benchmark: produce and consume rates through ``cluster.client`` beside raw-frame rates
measured in the same run against the same broker.

    python3 bench/client.py [--seconds 3] [--body 1024] [--inflight 256] [--batch 32]

A NameServer and a broker run as child processes (``mqnamesrv`` / ``mqbroker``,
ASYNC_FLUSH, temp store) so the client and the broker each get a core. Cases:
  * sync send, 1 in flight: ``Producer.send`` vs pre-encoded SEND_MESSAGE_V2 frames
    (bench/produce.py's raw driver);
  * async send, ``--inflight`` in flight: that many tasks awaiting ``Producer.send`` vs the raw
    driver with as many frames outstanding;
  * batch: ``Producer.send_batch`` of ``--batch`` messages, ``--batch-inflight`` in flight vs
    raw SEND_BATCH_MESSAGE frames;
  * consume: a ``PushConsumer`` draining what was sent vs a bare PULL_MESSAGE loop over the
    remoting client (one request per queue in flight).
Sends also show ``remoting_api``: a pre-built request through ``Connection.invoke`` (the
remoting layer the client sits on, without any client work). Prints one JSON object;
``ratio`` = client / raw frames. Target (issue 6): ratio >= 0.8.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import _launch  # noqa: E402  (bench/_launch.py: the node processes)
import checkout  # noqa: E402, F401  (bench/checkout.py: this tree's rmq_cluster first)
import produce as produce_bench  # noqa: E402  (bench/produce.py: the raw-frame driver)

from rmq_cluster.client import (  # noqa: E402
    ClientConfig,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    frames,
)
from rmq_cluster.cluster.logging import configure_logging  # noqa: E402
from rmq_cluster.cluster.protocol.message import encode_batch  # noqa: E402
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode  # noqa: E402

QUEUES = produce_bench.QUEUES
#: Messages the consume cases drain.
CONSUME_MESSAGES = 20_000


def _start(store: str, procs: list[subprocess.Popen[str]]) -> tuple[str, int]:
    """NameServer and broker processes (appended to ``procs`` as they start, for the caller to
    stop even when a later start fails); the NameServer address and the broker port. A broker
    prints its boot line once registered with the NameServer (its port opens earlier, and a
    send before the registration finds no route)."""
    taken: set[int] = set()
    ns_port = _launch.free_port(taken=taken)
    ns_conf = Path(store) / "namesrv.properties"
    ns_conf.write_text(f"listenPort={ns_port}\nbindAddress=127.0.0.1\n"
                       f"kvConfigPath={store}/kv.json\n")
    procs.append(_launch.spawn([*_launch.NAMESRV, "-c", str(ns_conf)]))
    port = _launch.broker_port(taken)
    conf = _launch.broker_conf(Path(store) / "broker.properties", port=port,
                               store=f"{store}/data", queues=QUEUES,
                               namesrvAddr=f"127.0.0.1:{ns_port}")
    log = open(Path(store) / "broker.log", "wb")  # noqa: SIM115 - lives as long as the child
    procs.append(_launch.spawn([*_launch.BROKER, "-c", str(conf)], stderr=log))
    return f"127.0.0.1:{ns_port}", port


async def _drive_client(fn: Any, inflight: int, seconds: float, warmup: float
                        ) -> dict[str, float]:
    """``inflight`` tasks calling ``fn`` back to back; rate of completions after ``warmup``."""
    done = 0
    lat: list[float] = []
    clock = time.perf_counter
    start = clock()
    measure_from = start + warmup
    stop_at = measure_from + seconds
    per_call = 1

    async def worker() -> None:
        nonlocal done, per_call
        while True:
            t0 = clock()
            n = await fn()
            per_call = n
            t1 = clock()
            if t1 >= measure_from:
                done += n
                lat.append(t1 - t0)
            if t1 >= stop_at:
                return

    async with trio.open_nursery() as nursery:
        for _ in range(inflight):
            nursery.start_soon(worker)
    elapsed = clock() - measure_from
    lat.sort()

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6, 1) if lat else 0.0

    return {"msgs_per_s": round(done / elapsed), "p50_us": pct(0.5), "p99_us": pct(0.99)}


async def _rounds(rounds: int, *cases: Any) -> list[dict[str, Any]]:
    """Run the cases interleaved ``rounds`` times; each case's best round. On a shared machine
    the load changes from second to second: interleaving exposes every case to the same load,
    best-of keeps the rounds it did not spoil."""
    best: list[dict[str, Any]] = [{} for _ in cases]
    for _ in range(rounds):
        for i, case in enumerate(cases):
            row = await case()
            if row["msgs_per_s"] > best[i].get("msgs_per_s", -1):
                best[i] = row
    return best


def _ratio(client: dict[str, Any], raw: dict[str, Any]) -> float:
    return round(client["msgs_per_s"] / raw["msgs_per_s"], 3) if raw["msgs_per_s"] else 0.0


async def _bench(ns_addr: str, port: int, args: argparse.Namespace) -> dict[str, Any]:
    body = os.urandom(args.body)
    out: dict[str, Any] = {}
    cc = ClientConfig(namesrv_addr=ns_addr, client_ip="127.0.0.1")
    topic, batch_topic = "BenchClient", "BenchClientBatch"
    seg = args.seconds / args.rounds
    async with Producer("BenchClientPG", client_config=cc) as p:
        await p.send(Message(topic, body))  # creates the topic, loads the route
        await p.send_batch([Message(batch_topic, body)])
        # what a Java client sends per message: TAGS, WAIT and a UNIQ_KEY (which the broker
        # indexes -- real work per message that bench/produce.py's frames do not ask for)
        raw_frames = [
            encode(frames.send_message(
                group="BenchRawPG", topic=topic, queue_id=q, sys_flag=0,
                born_timestamp=int(time.time() * 1000), flag=0,
                properties=f"TAGS\x01TagA\x02WAIT\x01true\x02UNIQ_KEY\x01{q:032X}",
                body=body, broker_name="bench"), 1 + q)
            for q in range(QUEUES)
        ]
        msg = Message(topic, body, tags="TagA")

        async def send_one() -> int:
            await p.send(msg)
            return 1

        # the floor under any client: a pre-built request through Connection.invoke
        api_conn = await p.instance.remoting.connection(f"127.0.0.1:{port}")
        api_req = frames.send_message(
            group="BenchRawPG", topic=topic, queue_id=0, sys_flag=0,
            born_timestamp=int(time.time() * 1000), flag=0,
            properties="TAGS\x01TagA\x02WAIT\x01true\x02UNIQ_KEY\x01" + "0" * 32,
            body=body, broker_name="bench")

        async def api_send() -> int:
            resp = await api_conn.invoke(api_req, 30)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: {resp.code} {resp.remark}")
            return 1

        for name, inflight in (("sync_send_1_in_flight", 1),
                               (f"async_send_{args.inflight}_in_flight", args.inflight)):
            async def raw_case(inflight: int = inflight) -> dict[str, Any]:
                raw = await produce_bench._raw_case(port, raw_frames, inflight, seg, 0.2)
                return {"msgs_per_s": raw["req_per_s"], "p50_us": raw["p50_us"],
                        "p99_us": raw["p99_us"]}

            raw_row, api, client = await _rounds(
                args.rounds, raw_case,
                lambda inflight=inflight: _drive_client(api_send, inflight, seg, 0.2),
                lambda inflight=inflight: _drive_client(send_one, inflight, seg, 0.2))
            out[name] = {"raw_frames": raw_row, "remoting_api": api, "client": client,
                         "ratio": _ratio(client, raw_row),
                         "ratio_to_remoting_api": _ratio(client, api)}

        items = [(0, body, {"UNIQ_KEY": f"{i:032X}", "TAGS": "TagA", "WAIT": "true"})
                 for i in range(args.batch)]
        batch_body = encode_batch(items)
        batch_frames = [
            encode(RemotingCommand.request(
                RequestCode.SEND_BATCH_MESSAGE, produce_bench._send_ext(batch_topic, q, True),
                batch_body), 1 + q)
            for q in range(QUEUES)
        ]
        async def raw_batch_case() -> dict[str, Any]:
            raw = await produce_bench._raw_case(port, batch_frames, args.batch_inflight, seg, 0.2)
            return {"msgs_per_s": raw["req_per_s"] * args.batch, "p50_us": raw["p50_us"],
                    "p99_us": raw["p99_us"]}

        batch_msgs = [Message(batch_topic, body, tags="TagA") for _ in range(args.batch)]

        async def send_batch() -> int:
            await p.send_batch(batch_msgs)
            return args.batch

        api_batch = RemotingCommand.request(
            RequestCode.SEND_BATCH_MESSAGE, produce_bench._send_ext(batch_topic, 0, True),
            batch_body)

        async def api_send_batch() -> int:
            resp = await api_conn.invoke(api_batch, 30)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"batch send failed: {resp.code} {resp.remark}")
            return args.batch

        raw_row, api, client = await _rounds(
            args.rounds, raw_batch_case,
            lambda: _drive_client(api_send_batch, args.batch_inflight, seg, 0.2),
            lambda: _drive_client(send_batch, args.batch_inflight, seg, 0.2))
        out[f"batch_{args.batch}_send"] = {"in_flight": args.batch_inflight, "raw_frames": raw_row,
                                           "remoting_api": api, "client": client,
                                           "ratio": _ratio(client, raw_row),
                                           "ratio_to_remoting_api": _ratio(client, api)}

        # consume: CONSUME_MESSAGES fresh messages in a topic of their own
        ctopic = "BenchClientConsume"
        per = [Message(ctopic, body, tags="TagA") for _ in range(args.batch)]
        await p.send(Message(ctopic, body))
        for _ in range(CONSUME_MESSAGES // args.batch):
            await p.send_batch(per)
    total = (CONSUME_MESSAGES // args.batch) * args.batch + 1

    # raw pull: bare PULL_MESSAGE requests over the remoting client, one per queue in flight
    async with open_remoting_client(node="bench-raw-pull") as rc:
        conn = await rc.connection(f"127.0.0.1:{port}")
        pulled = 0
        start = time.perf_counter()

        async def drain(q: int) -> None:
            nonlocal pulled
            offset = 0
            while True:
                ext = {"consumerGroup": "BenchRawCG", "topic": ctopic, "queueId": str(q),
                       "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4",
                       "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                       "subVersion": "0"}
                resp = await conn.invoke(RemotingCommand.request(RequestCode.PULL_MESSAGE, ext),
                                         timeout=30)
                if resp.code != ResponseCode.SUCCESS:
                    return
                offset = int(resp.ext_fields["nextBeginOffset"])
                pulled += produce_bench._count_records(resp.body)

        async with trio.open_nursery() as n:
            for q in range(QUEUES):
                n.start_soon(drain, q)
        raw_elapsed = time.perf_counter() - start
    raw_pull = {"msgs_per_s": round(pulled / raw_elapsed), "messages": pulled}

    # the same pulls, decoding every record into a ReceivedMessage (what any consumer must do)
    async with open_remoting_client(node="bench-raw-pull-decode") as rc:
        conn = await rc.connection(f"127.0.0.1:{port}")
        decoded = 0
        start = time.perf_counter()

        async def drain_decode(q: int) -> None:
            nonlocal decoded
            offset = 0
            while True:
                ext = {"consumerGroup": "BenchRawCG", "topic": ctopic, "queueId": str(q),
                       "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4",
                       "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                       "subVersion": "0"}
                resp = await conn.invoke(RemotingCommand.request(RequestCode.PULL_MESSAGE, ext),
                                         timeout=30)
                if resp.code != ResponseCode.SUCCESS:
                    return
                offset = int(resp.ext_fields["nextBeginOffset"])
                decoded += len(ReceivedMessage.decode_all(resp.body, "bench"))

        async with trio.open_nursery() as n:
            for q in range(QUEUES):
                n.start_soon(drain_decode, q)
        dec_elapsed = time.perf_counter() - start
    raw_decode = {"msgs_per_s": round(decoded / dec_elapsed), "messages": decoded}

    async def push_consume(group: str, batch_size: int) -> dict[str, Any]:
        got = 0
        all_in = trio.Event()
        first_at: float | None = None

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            nonlocal got, first_at
            if first_at is None:
                first_at = time.perf_counter()
            got += len(msgs)
            if got >= total:
                all_in.set()
            return ConsumeResult.SUCCESS

        start = time.perf_counter()
        c = PushConsumer(group, client_config=cc, listener=listener,
                         consume_from=ConsumeFromWhere.FIRST_OFFSET,
                         consume_batch_size=batch_size)
        c.subscribe(ctopic)
        async with c:
            with trio.fail_after(120):
                await all_in.wait()
            end = time.perf_counter()
        return {"msgs_per_s": round(got / (end - (first_at or start))), "messages": got,
                "startup_s": round((first_at or start) - start, 3),
                "consume_batch_size": batch_size}

    client_pull = await push_consume("BenchClientCG", 32)
    client_pull_1 = await push_consume("BenchClientCG1", 1)
    out["consume"] = {"raw_frames": raw_pull, "raw_frames_decoded": raw_decode,
                      "client_push_consumer": client_pull,
                      "client_push_consumer_batch_1": client_pull_1,
                      "ratio": _ratio(client_pull, raw_pull),
                      "ratio_to_decoded": _ratio(client_pull, raw_decode),
                      "note": "raw_frames counts records without decoding them; client rate "
                              "from the first delivered message (startup_s is before it)"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batch-inflight", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds per send case (best round reported)")
    args = parser.parse_args()
    configure_logging("error")
    with tempfile.TemporaryDirectory(prefix="bench-client-") as store:
        procs: list[subprocess.Popen[str]] = []
        try:
            ns_addr, port = _start(store, procs)
            result = trio.run(_bench, ns_addr, port, args)
        except BaseException:
            sys.stderr.write((Path(store) / "broker.log").read_text()[-3000:])
            raise
        finally:
            for proc in reversed(procs):  # the broker first: it unregisters from the NameServer
                _launch.stop(proc)
    print(json.dumps({"bench": "client", "body_bytes": args.body, "seconds": args.seconds,
                      "rounds": args.rounds, "load_average": os.getloadavg(),
                      "target_ratio": 0.8, **result}, indent=2))


if __name__ == "__main__":
    main()
