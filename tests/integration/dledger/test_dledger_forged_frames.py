"""Issue 31 item 2 with real processes: ``rmq-cluster up dledger --acl``, then forged oneway
PUSH frames on the dLegerPeers ports -- an APPEND in the next term whose entry 0 contradicts the
committed log.  On the old main one such frame made a member exit with ``AssertionError('...
conflict at committed index 0')`` and three frames (one per member) killed the group.  Now no
member exits (same pids), the group keeps taking sends, and every acknowledged message reads
back from the leader.  ``up`` gives the group a clusterSecret, so the gate closes such
connections unread (logged); the core's own refusal of the same push, for a peer that does know
the secret, is tested in tests/unit/dledger/test_dledger_core_hostile.py and by the fuzzer."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.dledger.messages import Entry, PushEntryRequest, PushType, encode
from rmq_cluster.dledger.node import DLedgerRequestCode
from tests.integration.dledger.dledger_process_testlib import (
    ProcCluster,
    process_cluster,
    produce,
    read_all,
    send_raw,
)

GROUP = "broker-a"


def forged_push(group: str, frm: str, to: str, term: int) -> RemotingCommand:
    """The issue's frame: 'frm' leads term+1 and entry 0 is its own (committed here in 1)."""
    msg = PushEntryRequest(group, frm, to, frm, term + 1, PushType.APPEND, -1, 0, 0,
                           (Entry(0, term + 1, b"forged"),))
    return RemotingCommand.request(int(DLedgerRequestCode.PUSH), {}, encode(msg), oneway=True)


def _attack(cluster: ProcCluster, targets: list[str]) -> None:
    nodes = cluster.brokers()
    addrs = cluster.dledger_addrs()
    for name in targets:
        self_id, addr = addrs[name]
        claimed = next(i for n, (i, _a) in addrs.items() if n != name)  # another member's id
        send_raw(addr, [forged_push(GROUP, claimed, self_id, int(nodes[name]["term"]))])


@pytest.mark.slow
def test_forged_push_frames_kill_no_member_under_acl(tmp_path: Path) -> None:
    with process_cluster(tmp_path, "--acl") as cluster:
        acked = produce(cluster, "before", 100)
        nodes = cluster.wait_settled()
        pids = {n: v["pid"] for n, v in nodes.items()}
        leader_id = next(iter(nodes.values()))["leader"]
        addrs = cluster.dledger_addrs()
        follower = next(n for n, (i, _a) in addrs.items() if i != leader_id)

        _attack(cluster, [follower])  # one frame
        acked += produce(cluster, "after-one", 100)  # (the frame was stepped long before)
        nodes = cluster.wait_settled()
        assert {n: v["pid"] for n, v in nodes.items()} == pids
        # up gives the group a clusterSecret: the gate closed the connection unread, and said so
        log = (cluster.dir / "logs" / f"{follower}.log").read_text()
        assert '"peer_auth_refused"' in log and "frame before peer authentication" in log

        _attack(cluster, list(addrs))  # one frame per member, the leader included
        acked += produce(cluster, "after-three", 100)
        nodes = cluster.wait_settled()
        assert {n: v["pid"] for n, v in nodes.items()} == pids
        leader = next(n for n, (i, _a) in addrs.items() if i == nodes[n]["leader"])
        got = read_all(cluster, nodes[leader]["addr"])
        assert sorted(got) == sorted(acked)  # every acked message, nothing forged
