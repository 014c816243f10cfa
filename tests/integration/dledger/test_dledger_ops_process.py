"""Operating DLedger groups of real processes (``rmq-cluster up``, issue 25 item 2):

* ``rmq-cluster dledger transfer`` under a producer's load: the named member leads, every
  acknowledged message is readable from it, it takes sends;
* ``preferredLeaderId``: the preferred member leads, and leads again after a ``kill -9`` and a
  restart, within a deadline; ``dledger transfer`` to another member says when the preferred
  one takes the leadership back;
* retention: small DLedger data files with ``fileReservedTime=0`` are deleted on every member,
  ConsumeQueue min offsets move up, a pull below answers with the next begin offset and every
  message above it is still readable.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster
from tests.integration.dledger.test_dledger_process import TOPIC, _leader, _produce

WAIT_S = 30.0
PREFERRED_RETURN_S = 15.0
GROUP = "broker-a"


def _profile(tmp_path: Path, **props: str) -> str:
    lines = ['base = "dledger"', "[broker_properties]"]
    lines += [f'{k} = "{v}"' for k, v in props.items()]
    path = tmp_path / "dledger-ops.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _wait_leader(cluster: RunningCluster, name: str, within_s: float) -> float:
    """Seconds until ``name`` is the ready leader (SYNC_MASTER) of its group."""
    started = time.monotonic()
    while True:
        nodes = {n["name"]: n for n in cluster.status()["nodes"] if n["kind"] == "broker"}
        node = nodes[name]
        if node.get("alive") and node.get("role") == "SYNC_MASTER":
            return time.monotonic() - started
        if time.monotonic() - started > within_s:
            raise AssertionError(
                f"{name} did not lead within {within_s} s: "
                f"{[(k, n.get('role'), n.get('leader'), n.get('term')) for k, n in nodes.items()]}"
            )
        time.sleep(0.2)


async def _pull(client: RemotingClient, addr: str, queue_id: int, offset: int) -> RemotingCommand:
    ext = {
        "consumerGroup": "CG", "topic": TOPIC, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "1000", "sysFlag": "4",
        "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
        "subVersion": "0",
    }
    return await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext))


async def _read_from(client: RemotingClient, addr: str, queue_id: int, offset: int) -> list[bytes]:
    out: list[bytes] = []
    while True:
        resp = await _pull(client, addr, queue_id, offset)
        if resp.code != ResponseCode.SUCCESS:
            return out
        out += [r.body for r in iter_records(bytes(resp.body))]
        offset = int(resp.ext_fields["nextBeginOffset"])


async def _all_acked_readable(addr: str, acked: list[bytes]) -> None:
    async with open_remoting_client(node="dl-ops-verify") as client:
        bodies: list[bytes] = []
        for q in range(8):
            bodies += await _read_from(client, addr, q, 0)
    missing = set(acked) - set(bodies)
    assert not missing, (len(missing), sorted(missing)[:5])


@pytest.mark.slow
def test_cli_transfer_under_load_loses_no_acked_message() -> None:
    with rmq_cluster("dledger") as cluster:
        old, _ = _leader(cluster)
        target = next(n for n in cluster.broker_addrs() if n != old)
        cc = ClientConfig(namesrv_addr=cluster.namesrv_addr, poll_namesrv_interval_s=0.2)
        acked: list[bytes] = []
        errors: list[str] = []
        outcome: dict[str, object] = {}

        async def run() -> None:
            async with Producer("PG", client_config=cc, send_timeout_s=15.0) as p:
                await _produce(p, "pre", acked, errors, trio.Event(), 300)
                stop = trio.Event()

                async def operator() -> None:
                    done = await trio.to_thread.run_sync(
                        cluster.cli, "dledger", "transfer", "--group", GROUP, "--to", target,
                        "--json",
                    )
                    outcome["rc"], outcome["out"] = done.returncode, done.stdout + done.stderr
                    mark = len(acked)
                    with trio.fail_after(WAIT_S):
                        while len(acked) < mark + 300:  # noqa: ASYNC110 - a count, no event
                            await trio.sleep(0.05)
                    stop.set()

                async with trio.open_nursery() as n:
                    n.start_soon(operator)
                    n.start_soon(_produce, p, "load", acked, errors, stop)

        trio.run(run)
        assert outcome["rc"] == 0, outcome["out"]
        report = json.loads(_json_part(str(outcome["out"])))
        assert report["ok"] and report["code"] == "SUCCESS"
        assert _leader(cluster)[0] == target
        leaders = cluster.cli("dledger", "leaders", "--json")
        assert leaders.returncode == 0, leaders.stderr
        rows = json.loads(leaders.stdout)
        assert [r["group"] for r in rows] == [GROUP]
        assert rows[0]["leader"] == cluster.node(target)["leader"]
        trio.run(_all_acked_readable, cluster.broker_addrs()[target], acked)
        print(f"acked={len(acked)} errors={len(errors)} transfer={report}")


def _json_part(text: str) -> str:
    """The JSON object printed on stdout (stderr may follow)."""
    start, end = text.index("{"), text.rindex("}")
    return text[start : end + 1]


@pytest.mark.slow
def test_preferred_leader_leads_again_after_restart(tmp_path: Path) -> None:
    profile = _profile(tmp_path, preferredLeaderId="n1")
    with rmq_cluster(profile) as cluster:
        preferred = next(n for n in cluster.broker_addrs() if n.endswith("-n1"))
        first = _wait_leader(cluster, preferred, PREFERRED_RETURN_S)
        returns = []
        for _ in range(2):
            killed = cluster.cli("kill", preferred, "--wait")
            assert killed.returncode == 0, killed.stderr
            other, _ = _leader(cluster)
            assert other != preferred
            restarted = cluster.cli("restart", preferred)
            assert restarted.returncode == 0, restarted.stderr
            returns.append(_wait_leader(cluster, preferred, PREFERRED_RETURN_S))
        # a transfer away from the preferred member succeeds, and the CLI says that the
        # preferred member took the leadership back (issue 38 item 9): exit 1, not a silent 0
        other = next(n for n in cluster.broker_addrs() if n.endswith("-n2"))
        moved = cluster.cli("dledger", "transfer", "--group", GROUP, "--to", other, "--json")
        assert moved.returncode == 1, moved.stdout + moved.stderr
        report = json.loads(moved.stdout)
        assert report["ok"] and report["to"] == "n2" and report["preferred_leader"] == "n1"
        assert report["taken_back"]["leader"] == "n1", report
        assert "preferredLeaderId=n1 took the leadership back" in moved.stderr
        print(f"preferred leader first={first:.2f}s returned_after_restart={returns} "
              f"taken_back={report['taken_back']}")


async def _check_member(
    client: RemotingClient, addr: str, acked: list[bytes], queues: list[int], *, is_leader: bool
) -> str:
    """A member after retention: each queue's min offset moved up, a pull below it is answered
    with the next begin offset (a slave keeps the requested one, as RocketMQ's without
    offsetCheckInSlave), every offset from the min to the max is readable and was acknowledged,
    and something is.  Else what is not there yet (a follower learns the topic
    by SlaveSynchronize and the last commit by the next heartbeat); "" when all is."""
    union: set[bytes] = set()
    total_max = 0
    for q in queues:
        req = RemotingCommand.request(
            RequestCode.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": str(q)}
        )
        got = await client.invoke(addr, req)
        if got.code != ResponseCode.SUCCESS:
            return f"queue {q}: GET_MIN_OFFSET {got.code} {got.remark}"
        min_off = int(got.ext_fields["offset"])
        if min_off == 0 and not is_leader:
            return f"queue {q}: min offset 0"
        assert min_off > 0, (addr, q)
        below = await _pull(client, addr, q, 0)
        assert below.code != ResponseCode.SUCCESS, (addr, q)
        next_begin = int(below.ext_fields["nextBeginOffset"])
        assert next_begin == min_off if is_leader else next_begin in (0, min_off), (
            addr, q, below.code, below.remark, next_begin, min_off)
        kept = await _read_from(client, addr, q, min_off)
        top = await client.invoke(addr, RemotingCommand.request(
            RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)}))
        max_off = int(top.ext_fields["offset"])
        total_max += max_off
        again = await client.invoke(addr, req)
        if again.code == ResponseCode.SUCCESS and int(again.ext_fields["offset"]) != min_off:
            # retention deletes a bounded number of files per round: a round ran meanwhile
            return f"queue {q}: min offset moved {min_off} -> {again.ext_fields['offset']}"
        # every offset from the new minimum up is readable: no holes (fileReservedTime=0 leaves
        # only the newest data file, which may hold nothing of this queue)
        assert len(kept) == max_off - min_off >= 0, (addr, q, len(kept), min_off, max_off)
        assert set(kept) <= set(acked)
        union.update(kept)
    if total_max < len(set(acked)):  # every acknowledged message got a queue offset here
        return f"queue offsets {total_max} < {len(set(acked))} acknowledged"
    return "" if union else "nothing readable yet"


async def _runtime(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    table = json.loads(bytes(resp.body))["table"]
    return {str(k): str(v) for k, v in table.items()}


@pytest.mark.slow
def test_retention_deletes_old_dledger_files_and_reads_go_on(tmp_path: Path) -> None:
    profile = _profile(
        tmp_path, mappedFileSizeCommitLog=str(256 * 1024), fileReservedTime="0",
        deleteWhen=";".join(f"{h:02d}" for h in range(24)), cleanResourceInterval="500",
    )
    with rmq_cluster(profile) as cluster:
        _leader(cluster)
        addrs = cluster.broker_addrs()
        cc = ClientConfig(namesrv_addr=cluster.namesrv_addr, poll_namesrv_interval_s=0.2)
        acked: list[bytes] = []
        errors: list[str] = []

        async def run() -> dict[str, dict[str, str]]:
            async with Producer("PG", client_config=cc, send_timeout_s=15.0) as p:
                pad = "." * 1000
                await _produce(p, pad, acked, errors, trio.Event(), 1500)
                queues = sorted(mq.queue_id for mq in await p.queues_for(TOPIC))
            async with open_remoting_client(node="dl-ret") as client:
                infos: dict[str, dict[str, str]] = {}
                with trio.fail_after(WAIT_S):
                    while True:
                        infos = {n: await _runtime(client, a) for n, a in addrs.items()}
                        if all(int(i.get("dLegerBeginIndex", "0")) > 0 for i in infos.values()):
                            break
                        await trio.sleep(0.2)
                leader = next(n for n, i in infos.items() if i.get("brokerRole") == "SYNC_MASTER")
                for name in (leader, *[n for n in addrs if n != leader]):
                    deadline = trio.current_time() + WAIT_S  # a follower catches up soon
                    while problem := await _check_member(
                        client, addrs[name], acked, queues, is_leader=name == leader
                    ):
                        assert trio.current_time() < deadline, (name, leader, problem)
                        await trio.sleep(0.5)
                return infos

        infos = trio.run(run)
        print({n: (i.get("dLegerBeginIndex"), i.get("dLegerEndIndex")) for n, i in infos.items()},
              f"acked={len(acked)} errors={len(errors)}")
