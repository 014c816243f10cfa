"""What the proxy reads from the brokers' configs and answers with, as Apache's 5.x proxy does
(issue 34's differential findings): a consumer's Settings carry its subscription group's
orderliness (``fifo``) and retry policy; QueryRoute names the topic's declared message type; a
send to a topic no broker has is refused (and creates nothing); a receive naming no broker takes
one of the topic's; an orderly group's consumers are assigned each queue and their receives pop
orderly (one batch per queue in flight until acked; the same attempt id gets its batch again).
A NameServer and a broker in this test's Trio loop, the proxy's service in it too."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import orjson
import pytest
import trio
import trio.testing

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.errors import NoRouteError
from rmq_cluster.client.instance import ClientInstance
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.proxy.config import ProxyConfig
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb
from rmq_cluster.proxy.service import MessagingService
from tests.integration.broker.conftest import Cluster, ok, running_cluster
from tests.interop.pop_scenario import create_topic, group_body

FIFO_TOPIC, PLAIN_TOPIC = "MetaFifoT", "MetaPlainT"
ORDERLY, PLAIN = "MetaOrderlyG", "MetaPlainG"


@attrs.frozen
class Proxied:
    cluster: Cluster
    service: MessagingService


@asynccontextmanager
async def _proxied(tmp_path: Path) -> AsyncIterator[Proxied]:
    async with running_cluster(tmp_path, autoCreateTopicEnable="true") as cluster:
        fifo = create_topic(FIFO_TOPIC, "+message.type=FIFO")
        fifo["readQueueNums"] = fifo["writeQueueNums"] = "2"
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fifo))
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic(PLAIN_TOPIC)))
        orderly = {**orjson.loads(group_body(ORDERLY, 3)), "consumeMessageOrderly": True}
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                              body=orjson.dumps(orderly)))
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                              body=group_body(PLAIN, 5)))
        config = ProxyConfig(namesrv_addr=cluster.ns_addr)
        client_config = attrs.evolve(ClientConfig(), namesrv_addr=cluster.ns_addr)
        async with ClientInstance(client_config) as instance, \
                Producer("PROXY_PRODUCER", instance=instance) as producer, \
                trio.open_nursery() as nursery:
            yield Proxied(cluster, MessagingService(config, instance, producer,
                                                    nursery=nursery))
            nursery.cancel_scope.cancel()  # pops still waiting at the broker


async def _settings(service: MessagingService, group: str, topic: str) -> pb.Settings:
    client = pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic),
            expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))
    client.subscription.long_polling_timeout.FromSeconds(5)
    send_in, inbound = trio.open_memory_channel[bytes](1)
    answers: list[bytes] = []

    async def send(payload: bytes) -> None:
        answers.append(payload)

    await send_in.send(spb.TelemetryCommand(settings=client).SerializeToString())
    await send_in.aclose()
    await service.bidi("Telemetry", inbound, {}, send)
    [answer] = answers
    return spb.TelemetryCommand.FromString(answer).settings


async def test_consumer_settings_carry_the_groups_orderliness_and_retries(
        tmp_path: Path) -> None:
    async with _proxied(tmp_path) as p:
        orderly = await _settings(p.service, ORDERLY, FIFO_TOPIC)
        assert orderly.subscription.HasField("fifo") and orderly.subscription.fifo
        assert orderly.backoff_policy.max_attempts == 4  # retryMaxTimes 3, plus the first
        nexts = [d.ToMilliseconds() for d in orderly.backoff_policy.customized_backoff.next]
        assert nexts[:4] == [1000, 5000, 10_000, 30_000] and nexts[-1] == 7_200_000
        assert orderly.subscription.long_polling_timeout.seconds == 20
        assert orderly.subscription.receive_batch_size == 32

        plain = await _settings(p.service, PLAIN, PLAIN_TOPIC)
        assert plain.subscription.HasField("fifo") and not plain.subscription.fifo
        assert plain.backoff_policy.max_attempts == 6

        # a group no broker has: the defaults, under what the client asked for itself
        unknown = await _settings(p.service, "MetaNoSuchG", PLAIN_TOPIC)
        assert not unknown.subscription.fifo and unknown.backoff_policy.max_attempts == 17
        assert unknown.subscription.long_polling_timeout.seconds == 5


async def _route_types(service: MessagingService, topic: str) -> set[int]:
    answer = await service.unary("QueryRoute", spb.QueryRouteRequest(
        topic=pb.Resource(name=topic)).SerializeToString(), {})
    resp = spb.QueryRouteResponse.FromString(answer)
    assert resp.status.code == pb.OK, resp.status
    return {t for q in resp.message_queues for t in q.accept_message_types}


async def test_query_route_names_the_topics_message_type(tmp_path: Path) -> None:
    async with _proxied(tmp_path) as p:
        assert await _route_types(p.service, FIFO_TOPIC) == {pb.FIFO}
        # a topic declaring no type (a 4.x topic) takes every type, on our broker as here
        assert await _route_types(p.service, PLAIN_TOPIC) == {
            pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}


async def _assigned(service: MessagingService, group: str, topic: str) -> list[int]:
    answer = spb.QueryAssignmentResponse.FromString(await service.unary(
        "QueryAssignment", spb.QueryAssignmentRequest(
            topic=pb.Resource(name=topic), group=pb.Resource(name=group)).SerializeToString(),
        {}))
    assert answer.status.code == pb.OK, answer.status
    return [a.message_queue.id for a in answer.assignments]


async def test_an_orderly_groups_consumers_are_assigned_each_queue(tmp_path: Path) -> None:
    """As Apache's proxy: an orderly group's consumers get every queue of the broker (each
    received from as a whole-broker orderly pop), any other group the whole broker (-1)."""
    async with _proxied(tmp_path) as p:
        assert await _assigned(p.service, ORDERLY, FIFO_TOPIC) == [0, 1]
        assert await _assigned(p.service, PLAIN, FIFO_TOPIC) == [-1]


def _message(topic: str, n: int, group: str = "") -> pb.Message:
    sp = pb.SystemProperties(message_id=f"01META{n:020d}", message_type=pb.NORMAL)
    if group:
        sp.message_group, sp.message_type = group, pb.FIFO
    return pb.Message(topic=pb.Resource(name=topic), body=f"m{n}".encode(),
                      system_properties=sp)


async def _send(service: MessagingService, msg: pb.Message) -> int:
    answer = await service.unary("SendMessage", spb.SendMessageRequest(
        messages=[msg]).SerializeToString(), {})
    return int(spb.SendMessageResponse.FromString(answer).status.code)


async def test_a_send_to_a_missing_topic_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    async with _proxied(tmp_path) as p:
        code = await _send(p.service, _message("MetaNoSuchT", 1))
        assert code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        with pytest.raises(NoRouteError):  # autoCreateTopicEnable=true made no topic of it
            await p.service.instance.fetch_route("MetaNoSuchT")
        assert await _send(p.service, _message(PLAIN_TOPIC, 2)) == pb.OK


async def _receive(service: MessagingService, group: str, topic: str, *, broker: str = "broker-a",
                   attempt: str = "", poll_ms: int = 300) -> tuple[int, list[pb.Message]]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=1, auto_renew=False,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1,
                                      broker=pb.Broker(name=broker)))
    req.long_polling_timeout.FromMilliseconds(poll_ms)
    req.invisible_duration.FromSeconds(30)
    if attempt:
        req.attempt_id = attempt
    answers: list[bytes] = []

    async def send(payload: bytes) -> None:
        answers.append(payload)

    await service.stream("ReceiveMessage", req.SerializeToString(), {}, send)
    replies = [spb.ReceiveMessageResponse.FromString(a) for a in answers]
    [status] = [r.status for r in replies if r.HasField("status")]
    return status.code, [r.message for r in replies if r.HasField("message")]


async def _ack(service: MessagingService, group: str, topic: str, msg: pb.Message) -> None:
    req = spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic))
    req.entries.add(message_id=msg.system_properties.message_id,
                    receipt_handle=msg.system_properties.receipt_handle)
    answer = spb.AckMessageResponse.FromString(
        await service.unary("AckMessage", req.SerializeToString(), {}))
    assert answer.status.code == pb.OK, answer.status


async def test_a_receive_naming_no_broker_takes_one_of_the_topics(tmp_path: Path) -> None:
    async with _proxied(tmp_path) as p:
        assert await _send(p.service, _message(PLAIN_TOPIC, 3)) == pb.OK
        code, msgs = await _receive(p.service, PLAIN, PLAIN_TOPIC, broker="", poll_ms=2000)
        assert code == pb.OK and [m.body for m in msgs] == [b"m3"]


async def test_an_orderly_group_pops_one_batch_per_queue_until_it_is_acked(
        tmp_path: Path) -> None:
    async with _proxied(tmp_path) as p:
        for n in range(2):
            assert await _send(p.service, _message(FIFO_TOPIC, n, group="g1")) == pb.OK
        code, first = await _receive(p.service, ORDERLY, FIFO_TOPIC, attempt="a1",
                                     poll_ms=2000)
        assert code == pb.OK and [m.body for m in first] == [b"m0"]
        # the queue's batch is in flight: another receive gets nothing, not m1
        code, none = await _receive(p.service, ORDERLY, FIFO_TOPIC, attempt="a2")
        assert code == pb.MESSAGE_NOT_FOUND and not none
        # the same attempt retried (its answer lost) gets its batch again
        code, again = await _receive(p.service, ORDERLY, FIFO_TOPIC, attempt="a1")
        assert [m.body for m in again] == [b"m0"]
        await _ack(p.service, ORDERLY, FIFO_TOPIC, again[0])
        code, second = await _receive(p.service, ORDERLY, FIFO_TOPIC, attempt="a3",
                                      poll_ms=2000)
        assert code == pb.OK and [m.body for m in second] == [b"m1"]
        assert second[0].system_properties.message_group == "g1"


#: how soon a batch popped for a receive whose client went away is popped again: the proxy
#: gives it back with 1 s of invisible time; left alone it stays in flight for the receive's
#: 30 s, the orderly queue blocked meanwhile
GIVEN_BACK_S = 10


async def _abandoned_receive(p: Proxied, attempt: str) -> None:
    """An orderly receive with ``attempt`` parked at the broker (a 20 s long poll), then
    cancelled: its client gave up."""
    polling = p.cluster.broker.pop.polling
    async with trio.open_nursery() as n:
        n.start_soon(functools.partial(_receive, p.service, ORDERLY, FIFO_TOPIC,
                                       attempt=attempt, poll_ms=20_000))
        with trio.fail_after(5):  # parked at the broker
            while polling.parked < 1:
                await trio.testing.wait_all_tasks_blocked(0.01)
        n.cancel_scope.cancel()


async def test_an_orderly_batch_popped_for_a_receive_that_went_away_is_given_back(
        tmp_path: Path) -> None:
    """A receive cancelled while its pop waits at the broker (an SDK's deadline passed, its
    stream was reset): the broker still pops for it when a message comes. The proxy lets that
    pop finish and gives the batch back, so the queue's next receive gets it within a second
    or two, as Apache's proxy nacks what it could not write."""
    async with _proxied(tmp_path) as p:
        await _abandoned_receive(p, "gone")  # the client went away
        assert await _send(p.service, _message(FIFO_TOPIC, 0, group="g1")) == pb.OK
        msgs: list[pb.Message] = []
        with trio.fail_after(GIVEN_BACK_S):
            while not msgs:
                _code, msgs = await _receive(p.service, ORDERLY, FIFO_TOPIC,
                                             attempt=f"next{len(msgs)}", poll_ms=1000)
        assert [m.body for m in msgs] == [b"m0"]
        await _ack(p.service, ORDERLY, FIFO_TOPIC, msgs[0])


#: quiet spells (every task blocked 10 ms) the test lets pass for a retried receive to reach
#: its wait: its lookups are cached, a pop of its own would be a loopback round trip
RETRY_SETTLE_WINDOWS = 20


async def test_a_receive_retried_with_its_attempt_id_takes_over_the_pop_under_way(
        tmp_path: Path) -> None:
    """The SDKs retry a receive whose deadline passed with the same attempt id. Its first pop,
    still parked at the broker, answers the retry: one pop per attempt, so the batch is popped
    once, under the receipt handles the retry hands out. (Two pops of one attempt both popped
    it, the broker blocking no attempt's own retry; the second replaced the queue's orderly
    block under the first one's handles, and the first's, given back, could make the batch
    visible again in a second while the retry's consumer held it.)"""
    async with _proxied(tmp_path) as p:
        polling = p.cluster.broker.pop.polling
        await _abandoned_receive(p, "same")  # the client's deadline passed
        got: list[tuple[int, list[pb.Message]]] = []

        async def retry() -> None:
            got.append(await _receive(p.service, ORDERLY, FIFO_TOPIC, attempt="same",
                                      poll_ms=20_000))

        async with trio.open_nursery() as n:
            n.start_soon(retry)
            with trio.fail_after(5):  # the retry reached its wait (a second pop: its park)
                for _ in range(RETRY_SETTLE_WINDOWS):
                    await trio.testing.wait_all_tasks_blocked(0.01)
            assert polling.parked == 1  # the first pop, not a second one beside it
            for k in range(2):
                assert await _send(p.service, _message(FIFO_TOPIC, k, group="g1")) == pb.OK
        [(code, first)] = got
        assert code == pb.OK and [m.body for m in first] == [b"m0"]
        # the batch is in flight for the retry, under its handle: nothing for anyone else
        code, none = await _receive(p.service, ORDERLY, FIFO_TOPIC, attempt="other")
        assert (code, none) == (pb.MESSAGE_NOT_FOUND, [])
        await _ack(p.service, ORDERLY, FIFO_TOPIC, first[0])
        code, second = await _receive(p.service, ORDERLY, FIFO_TOPIC, attempt="next",
                                      poll_ms=2000)
        assert [m.body for m in second] == [b"m1"]
