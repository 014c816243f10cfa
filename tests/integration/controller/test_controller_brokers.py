"""Controller mode end to end in one Trio loop, real sockets and stores: a NameServer, three
controllers and one master/slave group (SYNC).  The master stops; the slave is elected (from
the SyncStateSet), keeps its log, serves every acknowledged message and takes brokerId 0 in the
routes.  The old master comes back with a tail the new master never had: it cuts it at the
new epoch's start (epoch file) and rejoins as a slave with an identical CommitLog prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from rmq_cluster.cluster.protocol.route import TopicRouteData
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.store.message_store import MessageStore
from tests.integration.controller.controller_testlib import (
    TOPIC,
    commitlog_bytes,
    group_of_two,
    read_all,
    send_every,
    start,
    stop,
    until,
    wait_for,
)
from tests.integration.ha.ha_testlib import append_many

GROUP = "broker-a"
#: 40 SYNC sends, each retried while a briefly fenced master refuses it (a loaded machine)
SENDS_WAIT_S = 30.0


@pytest.mark.slow
async def test_master_loss_election_and_old_master_rejoins_with_identical_prefix(
    tmp_path: Path,
) -> None:
    async with group_of_two(tmp_path) as (_ctl, replicas, caller):
        master = await wait_for(
            lambda: next((r for r in replicas if r.serving_as(True)), None), 15)
        slave = next(r for r in replicas if r is not master)
        await wait_for(lambda: slave.serving_as(False), 15)
        # SYNC: sends are acked once the slave replicates (and joins the SyncStateSet)
        await wait_for(lambda: master.manager.sync_state_set.broker_ids == {1, 2}, 15)
        # each send until it is acked: the 500 ms-lease master of a loaded machine fences itself
        # a moment and refuses some (CI saw 24 of 40 in the same group); what this test proves
        # is that every acked one survives the failover, and now all 40 are
        acked = await send_every(caller, master.addr, 40, 0, timeout=SENDS_WAIT_S)
        old_epoch = master.manager.epoch
        # the master goes away
        t0 = trio.current_time()
        await stop(master)
        await wait_for(lambda: slave.serving_as(True), 10)
        assert trio.current_time() - t0 < 5
        assert slave.manager.epoch == old_epoch + 1
        # every acknowledged message is on the new master
        got = await read_all(caller, slave.addr)
        assert set(acked) <= set(got)
        # routes name the new master as brokerId 0
        async def routed_to_new_master() -> bool:
            r = await caller.client.invoke(caller.ns_addr, RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 5)
            route = TopicRouteData.decode(bytes(r.body))
            addrs = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas}
            return addrs[GROUP].get(0) == slave.addr

        await until(routed_to_new_master)
        # the old master wrote a tail nobody else has (as a master that lost its role would)
        store = MessageStore.open(master.settings.store)  # type: ignore[attr-defined]
        try:
            append_many(store, 1000, 25, topic="Stray")
        finally:
            store.close()
        new_master_prefix = commitlog_bytes(slave.store_dir)
        # it comes back: truncated at the new epoch's start, a slave, identical prefix
        await start(caller.nursery, master)
        await wait_for(lambda: master.serving_as(False), 15)
        assert master.manager.truncated_bytes > 0
        mine = commitlog_bytes(master.store_dir)
        assert new_master_prefix.startswith(mine) or mine.startswith(new_master_prefix)
        # it catches up and rejoins the SyncStateSet; SYNC sends are acked again
        await wait_for(lambda: slave.manager.sync_state_set.broker_ids == {1, 2}, 15)
        await send_every(caller, slave.addr, 10, 100)
        await wait_for(lambda: commitlog_bytes(master.store_dir)
                       == commitlog_bytes(slave.store_dir), 10)
