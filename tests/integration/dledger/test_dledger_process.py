"""Real processes: ``rmq-cluster up dledger`` (3 brokers in one DLedger group + 2 NameServers),
produce with acks recorded, ``kill -9`` the leader, a new leader is elected and routes follow it,
the producer resumes, the old leader restarts and catches up (any divergent tail it had is
truncated), and every acknowledged message is readable from every member."""

from __future__ import annotations

import time

import pytest
import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.model import Message
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster
from rmq_cluster.dledger.log_storage import FileLogStorage

TOPIC = "DlProcTopic"
IN_FLIGHT = 32
AFTER_KILL = 300
WAIT_S = 30.0
SLAVE_SYNC_WAIT_S = 15.0
LAST_PULL: dict[str, object] = {}


def _leader(cluster: RunningCluster) -> tuple[str, dict[str, object]]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for n in cluster.status()["nodes"]:
            if n["kind"] == "broker" and n.get("alive") and n.get("role") == "SYNC_MASTER":
                return str(n["name"]), n
        time.sleep(0.2)
    raise AssertionError("no DLedger leader")


async def _produce(
    producer: Producer, prefix: str, acked: list[bytes], errors: list[str],
    stop: trio.Event, count: int | None = None,
) -> None:
    counter = iter(range(count if count is not None else 10**9))

    async def worker() -> None:
        for i in counter:
            if stop.is_set():
                return
            body = f"{prefix}-{i:06d}".encode()
            try:
                await producer.send(Message(TOPIC, body), timeout=15.0)
            except Exception as exc:  # an unacked send: allowed, recorded
                errors.append(repr(exc))
                continue
            acked.append(body)

    async with trio.open_nursery() as n:
        for _ in range(IN_FLIGHT):
            n.start_soon(worker)


async def _read_queue(client: RemotingClient, addr: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        ext = {
            "consumerGroup": "CG", "topic": TOPIC, "queueId": str(queue_id),
            "queueOffset": str(offset), "maxMsgNums": "1000", "sysFlag": "4",
            "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "0",
        }
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext))
        if resp.code != ResponseCode.SUCCESS:
            LAST_PULL[addr] = (resp.code, resp.remark)
            return out
        out += [r.body for r in iter_records(bytes(resp.body))]
        offset = int(resp.ext_fields["nextBeginOffset"])


@pytest.mark.slow
def test_kill_leader_failover_catch_up_no_acked_loss() -> None:
    with rmq_cluster("dledger") as cluster:
        addrs = cluster.broker_addrs()
        cc = ClientConfig(namesrv_addr=cluster.namesrv_addr, poll_namesrv_interval_s=0.2)
        acked: list[bytes] = []
        errors: list[str] = []
        old_name, _ = _leader(cluster)

        timeline: dict[str, float] = {}

        async def phase1() -> None:
            async with Producer("PG", client_config=cc, send_timeout_s=15.0) as p:
                await _produce(p, "a", acked, errors, trio.Event(), 600)
                stop = trio.Event()

                async def killer() -> None:
                    await trio.sleep(0.3)  # kill with sends in flight
                    await trio.to_thread.run_sync(cluster.cli, "kill", old_name)
                    timeline["killed"] = trio.current_time()
                    mark = len(acked)
                    with trio.fail_after(WAIT_S):
                        while len(acked) < mark + AFTER_KILL:
                            await trio.sleep(0.01)
                            if "resumed" not in timeline and len(acked) > mark:
                                timeline["resumed"] = trio.current_time()
                    stop.set()

                async with trio.open_nursery() as n:
                    n.start_soon(killer)
                    n.start_soon(_produce, p, "b", acked, errors, stop)

        trio.run(phase1)
        new_name, _new = _leader(cluster)
        assert new_name != old_name
        assert "resumed" in timeline  # the producer resumed after the kill
        # the dead leader's log as it was (recovered offline: the process is gone)
        dl_dirs = [d for d in cluster.dir.rglob("dledger-*") if old_name in str(d)]
        assert len(dl_dirs) == 1, dl_dirs
        before = FileLogStorage(dl_dirs[0], fsync=False)
        old_log = {i: before.term_at(i) for i in range(before.last_index() + 1)}
        before.close()

        done = cluster.cli("restart", old_name)
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + WAIT_S
        while True:
            nodes = {n["name"]: n for n in cluster.status()["nodes"] if n["kind"] == "broker"}
            commits = {n["commit_index"] for n in nodes.values()}
            leaders = {n["leader"] for n in nodes.values()}
            if len(commits) == 1 and len(leaders) == 1 and None not in commits:
                break
            assert time.monotonic() < deadline, [
                (k, n["role"], n["term"], n["leader"], n["commit_index"])
                for k, n in nodes.items()
            ]
            time.sleep(0.2)

        async def verify() -> None:
            async with open_remoting_client(node="dl-verify") as client:
                for name, addr in addrs.items():
                    # followers learn the topic from the master (SlaveSynchronize, every 10 s)
                    with trio.move_on_after(SLAVE_SYNC_WAIT_S):
                        while True:
                            bodies: list[bytes] = []
                            for q in range(8):
                                bodies += await _read_queue(client, addr, q)
                            missing = set(acked) - set(bodies)
                            if not missing:
                                break
                            await trio.sleep(0.5)
                    assert not missing, (name, len(missing), sorted(missing)[:5], LAST_PULL[addr])
                    assert len(bodies) == len(set(bodies)) or len(bodies) >= len(acked)

        try:
            trio.run(verify)
        except AssertionError:
            for f in cluster.dir.rglob("topics.json"):
                print(f, f.read_text()[:2000])
            print([(n["name"], n.get("role"), n.get("leader")) for n in cluster.status()["nodes"]])
            for f in cluster.dir.rglob("broker-a-n*.log"):
                print(f, [ln[:200] for ln in f.read_text().splitlines() if "role follows" in ln
                          or "slave sync" in ln][-8:])
            raise
        after = FileLogStorage(dl_dirs[0], fsync=False)
        truncated = sum(
            1 for i, t in old_log.items() if i > after.last_index() or after.term_at(i) != t
        )
        after.close()
        failover = timeline["resumed"] - timeline["killed"]
        print(f"acked={len(acked)} errors={len(errors)} old_leader_entries_replaced={truncated}"
              f" failover_s={failover:.2f}"
              f" final={[(k, n['role'], n['term'], n['leader']) for k, n in nodes.items()]}")
