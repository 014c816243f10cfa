"""The proxy's consumption calls (ReceiveMessage, AckMessage) find the broker group's master in
the proxy's route cache, not by asking the NameServer for every call; when that master goes
and another takes its place (here: the broker restarted on a new port), the first call that
fails re-reads the route and is made again on the new master, with no proxy restart. A
NameServer and a broker in this test's Trio loop, the proxy's service in it too."""

from __future__ import annotations

from pathlib import Path

import attrs
import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.instance import ClientInstance
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.proxy.config import ProxyConfig
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb
from rmq_cluster.proxy.service import MessagingService
from tests.integration.broker.conftest import Cluster, broker_settings, ok, running_cluster

TOPIC, GROUP = "RouteT", "RouteG"
WAIT_S = 10.0


async def _topic(cluster: Cluster) -> None:
    ext = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "1",
           "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
           "topicSysFlag": "0", "order": "false"}
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))


async def _receive(service: MessagingService) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP), batch_size=1, auto_renew=False,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1,
                                      broker=pb.Broker(name="broker-a")))
    req.long_polling_timeout.FromSeconds(2)
    req.invisible_duration.FromSeconds(30)
    answers: list[bytes] = []

    async def send(payload: bytes) -> None:
        answers.append(payload)

    await service.stream("ReceiveMessage", req.SerializeToString(), {}, send)
    replies = [spb.ReceiveMessageResponse.FromString(a) for a in answers]
    status = [r.status for r in replies if r.HasField("status")]
    assert status and status[0].code in (pb.OK, pb.MESSAGE_NOT_FOUND), status
    return [r.message for r in replies if r.HasField("message")]


async def _ack(service: MessagingService, msg: pb.Message) -> int:
    req = spb.AckMessageRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC))
    req.entries.add(message_id=msg.system_properties.message_id,
                    receipt_handle=msg.system_properties.receipt_handle)
    answer = await service.unary("AckMessage", req.SerializeToString(), {})
    return int(spb.AckMessageResponse.FromString(answer).status.code)


async def _receive_one(service: MessagingService) -> pb.Message:
    with trio.fail_after(WAIT_S):
        while True:
            got = await _receive(service)
            if got:
                return got[0]


async def test_consumption_uses_cached_routes_and_follows_a_new_master(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, reviveInterval="100") as cluster:
        await _topic(cluster)
        for i in range(2):
            ok(await cluster.send(TOPIC, f"m{i}".encode()))
        config = ProxyConfig(namesrv_addr=cluster.ns_addr)
        client_config = attrs.evolve(ClientConfig(), namesrv_addr=cluster.ns_addr,
                                     failover_route_poll_s=0.1)
        async with ClientInstance(client_config) as instance, \
                Producer("PROXY_PRODUCER", instance=instance) as producer, \
                trio.open_nursery() as nursery:
            fetched: list[str] = []
            fetch = instance.fetch_route

            async def counted(topic: str):  # type: ignore[no-untyped-def]
                fetched.append(topic)
                return await fetch(topic)

            instance.fetch_route = counted  # type: ignore[method-assign]
            service = MessagingService(config, instance, producer, nursery=nursery)
            first = await _receive_one(service)
            assert await _ack(service, first) == pb.OK
            second = await _receive_one(service)
            assert await _ack(service, second) == pb.OK
            # two receives and two acks: one route read (main read one for each call)
            assert fetched == [TOPIC], fetched
            assert sorted([first.body, second.body]) == [b"m0", b"m1"]

            # the master goes; a new one of the group registers elsewhere (a new port)
            old = cluster.addr
            await cluster.stop_broker()
            await cluster.start_broker(broker_settings(
                cluster.store_dir, cluster.ns_addr, reviveInterval="100"))
            assert cluster.addr != old
            ok(await cluster.send(TOPIC, b"after"))
            third = await _receive_one(service)
            assert third.body == b"after"
            assert await _ack(service, third) == pb.OK
            assert len(fetched) >= 2  # re-read after the failure, not before
            assert instance.master_addr("broker-a") == cluster.addr
