"""POP request processors (RocketMQ 5): POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
NOTIFICATION, POLLING_INFO, QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE.

Checks and answers follow Apache's processors (codes and remarks); the work is
``PopService``'s. A pop that finds nothing waits for an arrival (``PopPolling``) until its
bornTime + pollTime at most (as Apache's; capped by ``MAX_POLL_TIME_MS``) in a task of its own,
then tries once more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from ...cluster.protocol import pop as wire
from ...cluster.protocol.names import validate_topic
from ...cluster.protocol.route import PermName, TopicConfig
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import ResponseCode
from ...cluster.remoting.processors import Later
from ..clients import build_subscription
from ..processors.common import FAQ_SUGGEST, header_errors
from .modes import (
    RequestModeTable,
    allocate_averagely,
    allocate_for_pop,
    mode_of,
)
from .polling import PopPolling
from .service import PopBatch, PopRequest, PopService, is_retry_topic
from .state import attempt_or_none

if TYPE_CHECKING:
    from ..context import BrokerContext

#: Longest a pop or notification waits for a message, whatever pollTime asks (the server
#: channel's idle timeout; clients ask 15-20 s).
MAX_POLL_TIME_MS: Final = 120_000
#: A pop whose bornTime + pollTime lies further than this in the past is answered at once
#: (Apache: 500 ms; the client gave up on it).
POLL_TIMEOUT_SLACK_MS: Final = 500
#: Longest invisible time a pop or change-invisible may ask (a day; Apache has no cap).
MAX_INVISIBLE_TIME_MS: Final = 24 * 3600 * 1000
#: (topic) -> [(brokerName, readQueueNums, perm)] of every broker serving it (the route).
RouteQueues = Callable[[str], Awaitable[list[tuple[str, int, int]]]]


def _park_s(born_time: int, poll_time: int, now: int) -> float:
    """How long a pop (or notification) that found nothing is parked: until its bornTime +
    pollTime, as Apache's broker expires it (PopLongPollingService), so the time it took to
    get here counts against its poll and its answer is not later than its client expects;
    never longer than pollTime (a client clock ahead of ours), nor ``MAX_POLL_TIME_MS``."""
    left = born_time + poll_time - now if born_time > 0 else poll_time
    return max(0, min(left, poll_time, MAX_POLL_TIME_MS)) / 1000.0


def _topic_missing(request: RemotingCommand, topic: str) -> RemotingCommand:
    return request.response(
        ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! {FAQ_SUGGEST}"
    )


class PopProcessors:
    def __init__(self, ctrl: BrokerContext, service: PopService, polling: PopPolling,
                 modes: RequestModeTable, route_queues: RouteQueues | None = None) -> None:
        self.ctrl = ctrl
        self.service = service
        self.polling = polling
        self.modes = modes
        self.route_queues = route_queues

    # ------------------------------------------------------------------ POP_MESSAGE

    @header_errors
    def pop(self, conn: Any, request: RemotingCommand) -> Any:
        h = wire.PopMessageRequestHeader.from_ext_fields(request.ext_fields)
        ctrl = self.ctrl
        now = ctrl.now_ms()
        if h.born_time > 0 and now - h.born_time - h.poll_time > POLL_TIMEOUT_SLACK_MS:
            return request.response(wire.POLLING_TIMEOUT,
                                    f"the broker[{ctrl.bcfg.broker_ip1}] pop message is timeout "
                                    "too much")
        if ctrl.is_slave or not PermName.is_readable(ctrl.bcfg.broker_permission):
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"the broker[{ctrl.bcfg.broker_ip1}] pop message is forbidden")
        if not 0 < h.max_msg_nums <= wire.MAX_POP_MSG_NUMS:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"the broker[{ctrl.bcfg.broker_ip1}] pop message's num is "
                                    f"greater than {wire.MAX_POP_MSG_NUMS}")
        if not 0 < h.invisible_time <= MAX_INVISIBLE_TIME_MS or h.poll_time < 0:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"invisibleTime must lie in (0, {MAX_INVISIBLE_TIME_MS}] ms "
                                    "and pollTime must not be negative")
        refusal, tc = self._check_topic_group(request, h.topic, h.consumer_group, h.queue_id)
        if refusal is not None:
            return refusal
        assert tc is not None
        bad = validate_topic(wire.pop_retry_topic(h.topic, h.consumer_group))
        if bad is not None:  # its redeliveries would have nowhere to go
            return request.response(ResponseCode.SYSTEM_ERROR, f"no pop retry topic: {bad}")
        try:
            sub = build_subscription(h.topic, h.exp, 0, h.exp_type)
        except ValueError:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                    "parse the consumer's subscription failed")
        if sub.selector is not None:  # SQL92 over POP: not served yet
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                    "SQL92 filters are not served to POP consumers")
        req = PopRequest(
            group=h.consumer_group, topic=h.topic, queue_id=h.queue_id,
            max_nums=h.max_msg_nums, invisible_ms=h.invisible_time, init_mode=h.init_mode,
            order=h.order, attempt_id=attempt_or_none(h.attempt_id),
            message_filter=None if sub.matches_all else sub.is_matched_by_tags_code,
        )
        response = self._try_pop(request, req, tc.read_queue_nums)
        if response is not None or h.poll_time <= 0:
            return response or self._not_found(request, req, 0)
        if self.polling.full():
            return self._not_found(request, req, 0, wire.POLLING_FULL)
        wait_s = _park_s(h.born_time, h.poll_time, now)
        return Later(self._pop_later(request, req, tc.read_queue_nums, wait_s))

    async def _pop_later(self, request: RemotingCommand, req: PopRequest, queues: int,
                         wait_s: float) -> RemotingCommand:
        topics = (req.topic, wire.pop_retry_topic(req.topic, req.group))
        end = trio.current_time() + wait_s
        while True:
            left = end - trio.current_time()
            if req.order:  # an in-flight batch turning visible again wakes it too
                due = self.service.order.next_deadline(req.topic, req.group)
                if due is not None:
                    left = min(left, max(0.0, (due - self.ctrl.now_ms()) / 1000.0))
            if left > 0:
                await self.polling.wait(topics, (req.topic, req.group), left)
            response = self._try_pop(request, req, queues)
            if response is not None:
                return response
            if trio.current_time() >= end:
                return self._not_found(request, req, 0)

    def _try_pop(self, request: RemotingCommand, req: PopRequest,
                 queues: int) -> RemotingCommand | None:
        service = self.service
        store = self.ctrl.store
        if store.dispatch_behind_bytes > 0:  # a pop sees every message stored before it
            store.dispatch()
        pop_time = self.ctrl.now_ms()
        revive_qid = service.next_revive_qid(req.order)
        batch = PopBatch(max_nums=req.max_nums)
        service.pop(req, queues, batch, pop_time, revive_qid)
        if not batch.bodies:
            return None
        header = wire.PopMessageResponseHeader(
            pop_time=pop_time, invisible_time=req.invisible_ms, revive_qid=revive_qid,
            rest_num=batch.rest, start_offset_info=";".join(batch.start_info),
            msg_offset_info=";".join(batch.msg_info),
            order_count_info=";".join(batch.order_info) if req.order else None,
        )
        return request.response(ResponseCode.SUCCESS, "FOUND", header.to_ext_fields(),
                                b"".join(batch.bodies))

    def _not_found(self, request: RemotingCommand, req: PopRequest, rest: int,
                   code: int = wire.POLLING_TIMEOUT) -> RemotingCommand:
        header = wire.PopMessageResponseHeader(  # Apache: an orderly pop answers its qid
            pop_time=self.ctrl.now_ms(), invisible_time=req.invisible_ms,
            revive_qid=wire.ORDER_REVIVE_QID if req.order else 0, rest_num=rest,
            start_offset_info="", msg_offset_info="",
            order_count_info="" if req.order else None,
        )
        return request.response(code, "NO_MESSAGE_IN_QUEUE", header.to_ext_fields())

    def _check_topic_group(self, request: RemotingCommand, topic: str, group: str,
                           queue_id: int) -> tuple[RemotingCommand | None, TopicConfig | None]:
        ctrl = self.ctrl
        tc = ctrl.topics.select(topic)
        if tc is None:
            return _topic_missing(request, topic), None
        if not PermName.is_readable(tc.perm):
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"the topic[{topic}] peeking message is forbidden"), None
        if queue_id >= tc.read_queue_nums or queue_id < -1:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}]"), None
        sgc = ctrl.groups.find(group)
        if sgc is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                    f"subscription group [{group}] does not exist, "
                                    f"{FAQ_SUGGEST}"), None
        if not sgc.consume_enable:
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"subscription group no permission, {group}"), None
        return None, tc

    # ------------------------------------------------------------------ ACK_MESSAGE

    def _handle_checks(
        self, request: RemotingCommand, topic: str, group: str, queue_id: int, offset: int,
        extra_info: str,
    ) -> tuple[RemotingCommand | None, wire.ReceiptHandle | None]:
        ctrl = self.ctrl
        if ctrl.is_slave:
            return request.response(ResponseCode.NO_PERMISSION,
                                    "the broker is a slave: ack on the master"), None
        tc = ctrl.topics.select(topic)
        if tc is None:
            return _topic_missing(request, topic), None
        if not 0 <= queue_id < tc.read_queue_nums:
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}]"), None
        store = ctrl.store
        lo = store.get_min_offset_in_queue(topic, queue_id)
        hi = store.get_max_offset_in_queue(topic, queue_id)
        if not lo <= offset < hi:
            return request.response(
                ResponseCode.NO_MESSAGE,
                f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, "
                f"store:{lo},{hi}"), None
        try:
            handle = wire.ReceiptHandle.parse(extra_info)
        except wire.PopFormatError as exc:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, f"bad extraInfo: {exc}"), None
        if handle.queue_id != queue_id or (
            not handle.is_order and handle.revive_qid >= self.service.revive_queue_num
        ):
            return request.response(ResponseCode.MESSAGE_ILLEGAL,
                                    "extraInfo does not match the queue or revive queue"), None
        if ctrl.groups.find(group) is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                    f"subscription group [{group}] does not exist"), None
        return None, handle

    @header_errors
    def ack(self, conn: Any, request: RemotingCommand) -> Any:
        h = wire.AckMessageRequestHeader.from_ext_fields(request.ext_fields)
        refusal, handle = self._handle_checks(
            request, h.topic, h.consumer_group, h.queue_id, h.offset, h.extra_info)
        if refusal is not None:
            return refusal
        assert handle is not None
        if handle.is_order:
            key = (h.topic, h.consumer_group, h.queue_id)
            commit = self.service.order.ack(key, h.offset, handle.pop_time)
            if commit is not None:
                self.ctrl.offsets.commit(h.consumer_group, h.topic, h.queue_id, commit)
                self._notify_topic(h.topic, h.consumer_group)
            return request.response(ResponseCode.SUCCESS)
        ack = wire.AckRecord(
            topic=h.topic, consumer_group=h.consumer_group, queue_id=h.queue_id,
            start_offset=handle.ck_offset, ack_offset=h.offset, pop_time=handle.pop_time,
            broker_name=self.ctrl.bcfg.broker_name,
        )
        return Later(self._stored(request, [(ack, handle.revive_qid)]))

    async def _stored(self, request: RemotingCommand,
                      records: list[tuple[wire.Checkpoint | wire.AckRecord, int]],
                      answer: RemotingCommand | None = None) -> RemotingCommand:
        for record, revive_qid in records:
            if not await self.service.put_revive(record, revive_qid):
                return request.response(ResponseCode.SYSTEM_ERROR, "put ack msg error")
        return answer or request.response(ResponseCode.SUCCESS)

    def batch_ack(self, conn: Any, request: RemotingCommand) -> Any:
        """BATCH_ACK_MESSAGE (the 5.x proxy's): many checkpoints' acks as bits per checkpoint;
        offsets outside the queue are skipped, as Apache skips them."""
        ctrl = self.ctrl
        if ctrl.is_slave:
            return request.response(ResponseCode.NO_PERMISSION, "the broker is a slave")
        try:
            acks = wire.decode_batch_ack_body(request.body)
        except wire.PopFormatError as exc:
            return request.response(ResponseCode.NO_MESSAGE, f"bad batch ack body: {exc}")
        records: list[tuple[wire.Checkpoint | wire.AckRecord, int]] = []
        for b in acks:
            try:
                topic = wire.real_topic(b.topic, b.consumer_group, b.retry)
            except wire.PopFormatError:
                continue
            if validate_topic(topic) is not None or ctrl.topics.select(topic) is None:
                continue
            if b.revive_qid != wire.ORDER_REVIVE_QID and b.revive_qid >= (
                    self.service.revive_queue_num):
                continue
            lo = ctrl.store.get_min_offset_in_queue(topic, b.queue_id)
            hi = ctrl.store.get_max_offset_in_queue(topic, b.queue_id)
            for offset in b.offsets:
                if lo <= offset <= hi:
                    records += self._ack_one(b, topic, offset)
        return Later(self._stored(request, records))

    def _ack_one(self, b: wire.BatchAck, topic: str,
                 offset: int) -> list[tuple[wire.Checkpoint | wire.AckRecord, int]]:
        if b.revive_qid == wire.ORDER_REVIVE_QID:
            key = (topic, b.consumer_group, b.queue_id)
            commit = self.service.order.ack(key, offset, b.pop_time)
            if commit is not None:
                self.ctrl.offsets.commit(b.consumer_group, topic, b.queue_id, commit)
                self._notify_topic(topic, b.consumer_group)
            return []
        return [(wire.AckRecord(
            topic=topic, consumer_group=b.consumer_group, queue_id=b.queue_id,
            start_offset=b.start_offset, ack_offset=offset, pop_time=b.pop_time,
            broker_name=self.ctrl.bcfg.broker_name), b.revive_qid)]

    def _notify_topic(self, topic: str, group: str) -> None:
        """An orderly ack may unblock a queue: wake its parked pops (under the real topic)."""
        prefix = f"{wire.RETRY_PREFIX}{group}_"
        self.polling.notify(topic[len(prefix):] if topic.startswith(prefix) else topic)

    # ------------------------------------------------------------------ CHANGE_INVISIBLETIME

    @header_errors
    def change_invisible_time(self, conn: Any, request: RemotingCommand) -> Any:
        h = wire.ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
        if not 0 <= h.invisible_time <= MAX_INVISIBLE_TIME_MS:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"invisibleTime must lie in [0, {MAX_INVISIBLE_TIME_MS}] ms")
        refusal, handle = self._handle_checks(
            request, h.topic, h.consumer_group, h.queue_id, h.offset, h.extra_info)
        if refusal is not None:
            return refusal
        assert handle is not None
        now = self.ctrl.now_ms()
        if handle.is_order:
            key = (h.topic, h.consumer_group, h.queue_id)
            if self.service.order.change_invisible(key, h.offset, handle.pop_time, now,
                                                   h.invisible_time):
                # the queue may turn visible sooner: parked pops re-read its deadline
                self._notify_topic(h.topic, h.consumer_group)
            return self._changed(request, now, h.invisible_time, wire.ORDER_REVIVE_QID)
        ck = wire.Checkpoint(
            topic=h.topic, cid=h.consumer_group, queue_id=h.queue_id, start_offset=h.offset,
            pop_time=now, invisible_time=h.invisible_time, diffs=(0,),
            broker_name=self.ctrl.bcfg.broker_name,
        )
        old = wire.AckRecord(
            topic=h.topic, consumer_group=h.consumer_group, queue_id=h.queue_id,
            start_offset=handle.ck_offset, ack_offset=h.offset, pop_time=handle.pop_time,
            broker_name=self.ctrl.bcfg.broker_name,
        )
        # the new checkpoint first, then the ack of the old one (a crash between the two
        # redelivers the message twice at worst, never not at all)
        answer = self._changed(request, now, h.invisible_time, handle.revive_qid)
        return Later(self._stored(request, [(ck, handle.revive_qid), (old, handle.revive_qid)],
                                  answer))

    @staticmethod
    def _changed(request: RemotingCommand, pop_time: int, invisible: int,
                 revive_qid: int) -> RemotingCommand:
        header = wire.ChangeInvisibleTimeResponseHeader(
            pop_time=pop_time, invisible_time=invisible, revive_qid=revive_qid)
        return request.response(ResponseCode.SUCCESS, None, header.to_ext_fields())

    # ------------------------------------------------------------------ NOTIFICATION

    def _has_message(self, topic: str, group: str, queue_id: int, queues: int) -> bool:
        store = self.ctrl.store
        if store.dispatch_behind_bytes > 0:
            store.dispatch()
        ids = range(queues) if queue_id < 0 else (queue_id,)
        offsets = self.ctrl.offsets
        for qid in ids:
            if store.get_max_offset_in_queue(topic, qid) > max(0, offsets.query(group, topic,
                                                                                   qid)):
                return True
        retry = wire.pop_retry_topic(topic, group)
        return self.ctrl.topics.select(retry) is not None and (
            store.get_max_offset_in_queue(retry, 0) > max(0, offsets.query(group, retry, 0)))

    @header_errors
    def notification(self, conn: Any, request: RemotingCommand) -> Any:
        h = wire.NotificationRequestHeader.from_ext_fields(request.ext_fields)
        refusal, tc = self._check_topic_group(request, h.topic, h.consumer_group, h.queue_id)
        if refusal is not None:
            return refusal
        assert tc is not None
        if self._has_message(h.topic, h.consumer_group, h.queue_id, tc.read_queue_nums):
            return request.response(ResponseCode.SUCCESS, None, {"hasMsg": "true"})
        if h.poll_time <= 0 or self.polling.full():
            return request.response(ResponseCode.SUCCESS, None, {"hasMsg": "false"})
        wait_s = _park_s(h.born_time, h.poll_time, self.ctrl.now_ms())
        return Later(self._notify_later(request, h, tc.read_queue_nums, wait_s))

    async def _notify_later(self, request: RemotingCommand, h: wire.NotificationRequestHeader,
                            queues: int, wait_s: float) -> RemotingCommand:
        topics = (h.topic, wire.pop_retry_topic(h.topic, h.consumer_group))
        await self.polling.wait(topics, (h.topic, h.consumer_group), wait_s)
        has = self._has_message(h.topic, h.consumer_group, h.queue_id, queues)
        return request.response(ResponseCode.SUCCESS, None, {"hasMsg": str(has).lower()})

    @header_errors
    def polling_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = wire.PollingInfoRequestHeader.from_ext_fields(request.ext_fields)
        refusal, _tc = self._check_topic_group(request, h.topic, h.consumer_group, h.queue_id)
        if refusal is not None:
            return refusal
        num = self.polling.polling_num(h.topic, h.consumer_group)
        return request.response(ResponseCode.SUCCESS, None, {"pollingNum": str(num)})

    # ------------------------------------------------------------------ assignment

    def set_message_request_mode(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            setting = wire.RequestModeSetting.decode(request.body)
        except wire.PopFormatError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request body: {exc}")
        if is_retry_topic(setting.topic):
            return request.response(ResponseCode.NO_PERMISSION,
                                    "retry topic is not allowed to set mode")
        if not self.modes.set(setting):
            return request.response(ResponseCode.SYSTEM_ERROR, "request mode table is full")
        self.ctrl.mark_dirty()
        return request.response(ResponseCode.SUCCESS)

    def query_assignment(self, conn: Any, request: RemotingCommand) -> Any:
        try:
            query = wire.AssignmentQuery.decode(request.body)
        except wire.PopFormatError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request body: {exc}")
        return Later(self._assign(request, query))

    async def _assign(self, request: RemotingCommand,
                      query: wire.AssignmentQuery) -> RemotingCommand:
        setting = mode_of(self.modes, query.topic, query.consumer_group)
        queues = await self._topic_queues(query.topic)
        if query.broadcasting:
            assigned = queues
        else:
            info = self.ctrl.clients.consumer_group(query.consumer_group)
            cids = sorted(info.client_ids()) if info is not None else []
            if setting.mode is wire.RequestMode.POP:
                share = setting.pop_share_queue_num
                assigned = allocate_for_pop(queues, cids, query.client_id, share)
            else:
                assigned = allocate_averagely(queues, cids, query.client_id)
        body = wire.encode_assignments(assigned, setting.mode)
        return request.response(ResponseCode.SUCCESS, None, None, body)

    async def _topic_queues(self, topic: str) -> list[tuple[str, str, int]]:
        """Every readable queue of ``topic`` in the cluster (the route), sorted as Java's
        MessageQueue sorts; this broker's own when the NameServers cannot say."""
        brokers: list[tuple[str, int, int]] = []
        if self.route_queues is not None:
            brokers = await self.route_queues(topic)
        if not brokers:
            tc = self.ctrl.topics.select(topic)
            if tc is not None:
                brokers = [(self.ctrl.bcfg.broker_name, tc.read_queue_nums, tc.perm)]
        out = [(topic, name, q) for name, n, perm in brokers if PermName.is_readable(perm)
               for q in range(min(n, 1024))]
        return sorted(out)
