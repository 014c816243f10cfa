"""HEART_BEAT of a brand-new consumer group: its ``%RETRY%group`` topic is created and registered
with the NameServers before the heartbeat is answered and before the group is told of its new
member (RocketMQ's ``createTopicInSendMessageBackMethod`` -> ``registerBrokerAll`` at once), so a
client that rebalances on either finds the retry topic's route."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from rmq_cluster.broker.node import TOPIC_REGISTER_WAIT_S
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection

from .conftest import WAIT_S, Cluster, ok, running_cluster
from .test_broker_clients import heartbeat_body


def ns_knows(cluster: Cluster, topic: str) -> bool:
    state = cluster.ns.state
    return state is not None and topic in state.routes.topic_queue_table


async def test_retry_topic_is_routable_when_the_heartbeat_is_answered(cluster: Cluster) -> None:
    seen_at_notify: list[bool] = []
    notified = trio.Event()

    def on_notify(conn: Connection, request: RemotingCommand) -> None:
        seen_at_notify.append(ns_knows(cluster, "%RETRY%NEWG"))
        notified.set()

    async with open_remoting_client({RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as c1:
        assert not ns_knows(cluster, "%RETRY%NEWG")
        hb = RemotingCommand.request(
            RequestCode.HEART_BEAT, None, heartbeat_body("c1", "NEWG", "T")
        )
        ok(await c1.invoke(cluster.addr, hb, WAIT_S))
        # no waiting: the NameServer already routes it (the next period is 30 s away)
        assert ns_knows(cluster, "%RETRY%NEWG")
        route = await cluster.client.invoke(
            cluster.ns_addr,
            RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%NEWG"}),
            WAIT_S,
        )
        assert route.code == ResponseCode.SUCCESS, route.remark
        with trio.fail_after(WAIT_S):
            await notified.wait()
        assert seen_at_notify == [True]
        # the group's next heartbeat creates nothing and is answered inline, as before
        ok(await c1.invoke(cluster.addr, hb, WAIT_S))
        assert cluster.broker.clients.consumer_group("NEWG").client_ids() == ["c1"]


async def _silent_namesrv(
    scope: trio.CancelScope, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Accepts connections and reads, never answers: a NameServer that hangs (until ``scope``
    is cancelled: then its connections close)."""

    async def handler(stream: trio.SocketStream) -> None:
        async with stream:
            while await stream.receive_some(65536):
                pass

    with scope:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(handler, listeners)


async def test_a_hung_namesrv_delays_the_heartbeat_answer_only_boundedly(tmp_path: Path) -> None:
    hung = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_silent_namesrv, hung)
        # the broker's own first registration waits at most registerBrokerTimeoutMills
        async with running_cluster(
            tmp_path, namesrvAddr=f"127.0.0.1:{port}", registerBrokerTimeoutMills="1500"
        ) as cluster:
            t0 = time.monotonic()
            resp = await cluster.call(
                RequestCode.HEART_BEAT, None, heartbeat_body("c1", "HUNG", "T"), timeout=WAIT_S
            )
            waited = time.monotonic() - t0
            assert resp.code == ResponseCode.SUCCESS
            assert waited < min(TOPIC_REGISTER_WAIT_S, 1.5) + 1.0, waited
            assert cluster.broker.topics.select("%RETRY%HUNG") is not None
            assert cluster.broker.clients.consumer_group("HUNG").client_ids() == ["c1"]
            hung.cancel()  # the broker's unregistration on the way out fails fast
        nursery.cancel_scope.cancel()


async def test_heartbeats_of_many_new_groups_share_registrations(cluster: Cluster) -> None:
    groups = [f"MANY{i}" for i in range(6)]
    before = cluster.broker.register_count

    async def beat(group: str) -> None:
        hb = RemotingCommand.request(
            RequestCode.HEART_BEAT, None, heartbeat_body(f"c-{group}", group, "T")
        )
        ok(await cluster.client.invoke(cluster.addr, hb, WAIT_S))
        assert ns_knows(cluster, f"%RETRY%{group}")  # routable when its own answer came

    async with trio.open_nursery() as nursery:
        for group in groups:
            nursery.start_soon(beat, group)
    # one REGISTER_BROKER carries every topic: not one registration per new group
    assert cluster.broker.register_count - before < len(groups)
