"""A controller-mode master that cannot renew with the controllers (all of them gone) fences
itself within its lease: sends answer NO_PERMISSION and its routes say read-only; once the
controllers are back and a heartbeat succeeds, it takes sends again (one loop, real sockets)."""

from __future__ import annotations

from pathlib import Path

import trio

from rmq_cluster.cluster.protocol.route import PermName, TopicRouteData
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.controller.controller_testlib import until, wait_for
from tests.integration.controller.test_controller_brokers import GROUP, TOPIC, group_of_two

#: group_of_two: controllerHeartBeatTimeoutMills=700, beats every 200 ms -> a 500 ms lease.
LEASE_S = 0.5


async def test_a_master_without_controllers_fences_itself_then_resumes(tmp_path: Path) -> None:
    async with group_of_two(tmp_path) as (ctl, replicas, caller):
        master = await wait_for(
            lambda: next((r for r in replicas if r.serving_as(True)), None), 15)
        slave = next(r for r in replicas if r is not master)
        await wait_for(lambda: master.manager.sync_state_set.broker_ids == {1, 2}, 15)
        assert master.manager.cm.lease_ms == 500
        caller.addr = master.addr
        r = await caller.send(TOPIC, b"before", queue_id=0)
        assert r.code == ResponseCode.SUCCESS, r.remark

        async def route_perm() -> int:
            resp = await caller.client.invoke(caller.ns_addr, RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 5)
            route = TopicRouteData.decode(bytes(resp.body))
            return next(q.perm for q in route.queue_datas if q.broker_name == GROUP)

        assert PermName.is_writeable(await route_perm())
        # every controller goes: nobody can renew the master's lease (nor elect anyone). The
        # lease is timed from the last renewal, which is before the last stop returned: the
        # clock starts there, not before three shutdowns a loaded machine may take long over
        for i in range(len(ctl.members)):
            await ctl.stop(i)
        t0 = trio.current_time()
        await wait_for(lambda: master.manager.fenced, 5)
        assert trio.current_time() - t0 < LEASE_S + 1.0
        r = await caller.send(TOPIC, b"fenced", queue_id=0)
        assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)

        async def read_only() -> bool:
            return not PermName.is_writeable(await route_perm())

        await until(read_only)
        assert master.serving_as(True) and slave.serving_as(False)  # nobody was elected
        # the controllers come back (their Raft log keeps the group): the lease is renewed
        for i in range(len(ctl.members)):
            await ctl.start(i)
        await wait_for(lambda: not master.manager.fenced, 15)
        assert master.manager.fences == 1 and master.serving_as(True)

        async def sends_again() -> bool:
            resp = await caller.send(TOPIC, b"after", queue_id=0)
            return resp.code == ResponseCode.SUCCESS

        await until(sends_again)
