"""UPDATE_AND_CREATE_TOPIC (17) answers only once the NameServers know the new route, as
RocketMQ's broker does (``registerIncrementBrokerData`` before the response). Apache's Go
client (rocketmq-client-go 2.1.2) showed it: its admin creates a topic and at once looks up
its queues (FetchPublishMessageQueues), and its producer sends right after; both failed with
"topic not exist" / a stale default route while the registration waited for the next round."""

from __future__ import annotations

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import WAIT_S, Cluster, ok


async def test_a_created_topic_is_routed_when_the_creator_is_answered(cluster: Cluster) -> None:
    create = {
        "topic": "GoAdminT",
        "defaultTopic": "TBW102",
        "readQueueNums": "3",
        "writeQueueNums": "3",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    # known to the NameServer the moment the answer is in (read without yielding to the loop)
    assert cluster.ns.state.routes.pickup_topic_route_data("GoAdminT") is not None
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "GoAdminT"})
    route = await cluster.client.invoke(cluster.ns_addr, lookup, WAIT_S)
    assert route.code == ResponseCode.SUCCESS, (route.code, route.remark)
    (queue_data,) = fastjson.loads(bytes(route.body))["queueDatas"]
    assert (queue_data["readQueueNums"], queue_data["writeQueueNums"]) == (3, 3)
    assert queue_data["perm"] == 6


async def test_a_refused_create_is_answered_at_once_and_routes_nothing(cluster: Cluster) -> None:
    bad = await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC,
                             {"topic": "TooManyQ", "readQueueNums": "99999", "writeQueueNums": "1",
                              "perm": "6", "topicFilterType": "SINGLE_TAG", "order": "false"})
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TooManyQ"})
    route = await cluster.client.invoke(cluster.ns_addr, lookup, WAIT_S)
    assert route.code == ResponseCode.TOPIC_NOT_EXIST
