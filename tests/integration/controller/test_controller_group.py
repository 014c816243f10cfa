"""Three controllers on the Raft core, real sockets: registration, heartbeats, election from the
SyncStateSet on master loss, epoch fencing, a controller leader kill, hostile requests."""

from __future__ import annotations

import contextlib
from pathlib import Path

import trio

from rmq_cluster.cluster.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ControllerRequestCode,
    ControllerResponseCode,
    SyncStateSet,
    decode_replicas_table,
    encode_broker_names,
)
from rmq_cluster.cluster.protocol.controller_client import ControllerClient
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.cluster.remoting.errors import RemotingError
from tests.integration.controller.controller_testlib import (
    heartbeat_request,
    register_request,
    replica_info,
    running_controllers,
    until,
    wait_for,
)

G = "broker-a"
A1, A2 = "127.0.0.1:20001", "127.0.0.1:20002"


def alter_request(master: int, epoch: int, ids: set[int], sse_epoch: int) -> RemotingCommand:
    h = AlterSyncStateSetRequestHeader(broker_name=G, master_broker_id=master, master_epoch=epoch)
    body = SyncStateSet(frozenset(ids), sse_epoch).encode()
    return RemotingCommand.request(ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                                   h.to_ext_fields(), body)


async def test_election_fencing_and_leader_failover(tmp_path: Path) -> None:
    async with running_controllers(tmp_path) as ctl, open_remoting_client() as client:
        await ctl.wait_leader()
        cc = ControllerClient(client, ctl.addrs)
        for bid, addr in ((1, A1), (2, A2)):
            r = await cc.call(register_request(G, bid, addr))
            assert r.code == ResponseCode.SUCCESS, r.remark
        beating = {1: True, 2: True}
        epoch = [0]  # what the replicas' epoch files say (the master's epoch once elected)

        async def beat() -> None:
            while True:
                for bid, addr in ((1, A1), (2, A2)):
                    if beating[bid]:
                        # a leader change fails a beat: the next round goes on
                        with contextlib.suppress(RemotingError):
                            await cc.call(heartbeat_request(G, bid, addr, 100, epoch[0]), 0.3)
                await trio.sleep(0.1)

        async with trio.open_nursery() as n:
            n.start_soon(beat)
            # the scan elects a first master
            async def first_master() -> bool:
                i, _s = await replica_info(cc, G)
                return i.master_broker_id not in (None, -1)

            await until(first_master)
            info, sss = await replica_info(cc, G)
            master = info.master_broker_id
            assert master in (1, 2) and info.master_epoch == 1
            slave = 3 - master
            assert sss.broker_ids == {master}
            # the master adds its slave once its heartbeats show it caught up at epoch 1
            epoch[0] = 1

            async def joined() -> bool:
                r = await cc.call(alter_request(master, 1, {1, 2}, sss.epoch))
                return r.code == ResponseCode.SUCCESS

            await until(joined)
            r = await cc.call(alter_request(master, 1, {1, 2}, sss.epoch + 1))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert SyncStateSet.decode(r.body).broker_ids == {1, 2}
            # a stale SyncStateSet epoch is refused
            r = await cc.call(alter_request(master, 1, {master}, sss.epoch))
            assert r.code == ControllerResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
            # kill the controller leader: the state survives on the new leader
            old = ctl.leader()
            assert old is not None
            stopped = ctl.members.index(old)
            await ctl.stop(stopped)
            await ctl.wait_leader()
            info2, sss2 = await replica_info(cc, G)
            assert (info2.master_broker_id, info2.master_epoch) == (master, 1)
            assert sss2.broker_ids == {1, 2}
            # it restarts from its Raft log and catches up with the new leader's state
            await ctl.start(stopped)
            leader = await ctl.wait_leader()
            again = ctl.members[stopped]
            await wait_for(lambda: again.node is not None
                           and again.node.state.groups == leader.node.state.groups)
            # master loss: the slave (in the SyncStateSet) is elected, epoch 2
            beating[master] = False
            t0 = trio.current_time()

            async def elected() -> bool:
                i, _s = await replica_info(cc, G)
                return i.master_broker_id == slave

            await until(elected)
            assert trio.current_time() - t0 < 5
            info3, sss3 = await replica_info(cc, G)
            assert info3.master_epoch == 2 and sss3.broker_ids == {slave}
            assert info3.master_address == (A1 if slave == 1 else A2)
            # the old master is fenced
            r = await cc.call(alter_request(master, 1, {1, 2}, sss3.epoch))
            assert r.code == ControllerResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
            # admin view
            r = await cc.call(RemotingCommand.request(
                ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
                encode_broker_names([G])))
            table = decode_replicas_table(r.body)
            assert table[G].master_broker_id == slave
            assert [v.broker_id for v in table[G].in_sync] == [slave]
            n.cancel_scope.cancel()


async def test_hostile_requests_get_codes_and_change_nothing(tmp_path: Path) -> None:
    async with running_controllers(tmp_path) as ctl, open_remoting_client() as client:
        await ctl.wait_leader()
        cc = ControllerClient(client, ctl.addrs)
        bad = [
            RemotingCommand.request(ControllerRequestCode.CONTROLLER_REGISTER_BROKER, {}),
            register_request("bad name", 1, A1),
            register_request(G, 1, "no-port"),
            RemotingCommand.request(ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                                    {"brokerName": G, "masterBrokerId": "1", "masterEpoch": "1"},
                                    b"{not json"),
            RemotingCommand.request(ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
                                    b'{"x":1}'),
            heartbeat_request(G, 1, A1),  # not registered
        ]
        for req in bad:
            r = await cc.call(req)
            assert r.code in (ControllerResponseCode.CONTROLLER_INVALID_REQUEST,
                              ControllerResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST), r.code
            assert r.remark
        leader = await wait_for(ctl.leader)
        assert leader.node.state.groups == {}
        # a follower points elsewhere
        follower = next(m for m in ctl.members if m is not leader)
        r = await client.invoke(follower.addr, register_request(G, 1, A1), 2)
        assert r.code == ControllerResponseCode.CONTROLLER_NOT_LEADER
