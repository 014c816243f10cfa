"""Simple consumption over gRPC on the broker's POP: ReceiveMessage (a POP_MESSAGE to the
master of the broker the SDK picked, long polling), AckMessage and ChangeInvisibleDuration
(ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME on the broker the receipt handle names). The receipt
handle a client gets is the broker's own ``extraInfo`` (cluster/protocol/pop.py), opaque to it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import trio

from ..client.errors import MQBrokerError
from ..client.frames import request, send_back
from ..client.instance import ClientInstance
from ..cluster.logging import get_logger
from ..cluster.protocol.message import MessageConst as MC
from ..cluster.protocol.message import StoredMessage, iter_records
from ..cluster.protocol.names import validate_group, validate_topic
from ..cluster.protocol.pop import (
    POLLING_TIMEOUT,
    PROPERTY_POP_CK,
    PROPERTY_SHARDING_KEY,
    OrderCounts,
    PopFormatError,
    ReceiptHandle,
    parse_start_offset_info,
    pop_retry_topic,
    queue_info_key,
    retry_flag,
)
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import RequestCode, ResponseCode
from . import convert
from .calls import fetch_route
from .config import ProxyConfig
from .invisible import InvisibleLimits, change_invisible_ms, receive_invisible_ms
from .metadata import ProxyMetadata
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .polling import PollingLimits, ReceiveCall, polling_ms, refusal_code
from .renewal import HandleKey, Held, RenewSettings
from .renewer import HandleRenewer
from .routes import MasterRoutes

log = get_logger(node="proxy", component="consume")

Send = Callable[[bytes], Awaitable[None]]
#: a pop's answer (the broker's address and its answer), or why there is none
Popped = tuple[str, RemotingCommand] | Exception
#: messages one receive may ask for (Apache's proxy caps batch_size at 32)
MAX_BATCH: Final = 32
#: a receive whose call says nothing of its deadline, version or client
NO_DEADLINE: Final = ReceiveCall()
#: the invisible time a message popped for a receive whose client went away is given back
#: with (Apache's proxy nacks the messages it could not write so: ``NACK_INVISIBLE_TIME``)
GIVE_BACK_INVISIBLE_MS: Final = 1_000
#: the longest attempt id passed on to the broker (the SDKs send a UUID); a longer one is
#: dropped (the receive is then a first attempt)
MAX_ATTEMPT_ID_CHARS: Final = 128
#: properties that are ours, not the user's
_SYSTEM_KEYS: Final = frozenset({
    MC.PROPERTY_TAGS, MC.PROPERTY_KEYS, MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MC.PROPERTY_WAIT_STORE_MSG_OK, PROPERTY_POP_CK, PROPERTY_SHARDING_KEY,
    "TIMER_DELIVER_MS", "TIMER_OUT_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "1ST_POP_TIME",
    "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "MIN_OFFSET", "MAX_OFFSET",
    # the broker's own (its cluster, the timer wheel's times) and the SDK's born host: none of
    # them a user property, as Apache's proxy hides them
    MC.PROPERTY_CLUSTER, "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES",
    convert.PROPERTY_BORN_HOST,
})


def _handle(m: StoredMessage, ext: dict[str, str], starts: Mapping[str, int],
            broker: str) -> str:
    """The receipt handle a client gets: the broker's extraInfo and, after it, the message's
    CommitLog offset (ForwardMessageToDeadLetterQueue sends that message back); ``starts``:
    the pop's ``startOffsetInfo``."""
    if PROPERTY_POP_CK in m.properties:
        return f"{m.properties[PROPERTY_POP_CK]} {m.commitlog_offset}"
    start = starts.get(queue_info_key(m.topic, m.queue_id), m.queue_offset)
    info = ReceiptHandle(start, int(ext["popTime"]), int(ext["invisibleTime"]),
                         int(ext["reviveQid"]), retry_flag(m.topic), broker, m.queue_id,
                         m.queue_offset).encode()
    return f"{info} {m.commitlog_offset}"


def parse_handle(text: str) -> tuple[ReceiptHandle, int | None]:
    """A client's receipt handle: the broker's extraInfo and the CommitLog offset after it
    (None in a handle without one); ProxyError INVALID_RECEIPT_HANDLE for anything else."""
    info, _, tail = text.rpartition(" ")
    offset: int | None = None
    if tail.isascii() and tail.isdigit() and len(tail) <= 19 and info.count(" ") == 7:
        offset = int(tail)
    else:
        info = text
    try:
        return ReceiptHandle.parse(info), offset
    except ValueError as exc:
        raise convert.ProxyError(pb.INVALID_RECEIPT_HANDLE, str(exc)) from exc


def to_pb(m: StoredMessage, topic: str, handle: str, invisible_ms: int, *,
          reconsume_times: int | None = None) -> pb.Message:
    """``m`` as a client gets it; ``reconsume_times``: its count when not the record's own (an
    orderly pop's, from ``orderCountInfo``)."""
    props = m.properties
    out = pb.Message(topic=pb.Resource(name=topic), body=m.body)
    out.user_properties.update({k: v for k, v in props.items() if k not in _SYSTEM_KEYS})
    sp = out.system_properties
    if m.tags:
        sp.tag = m.tags
    sp.keys.extend(k for k in (props.get(MC.PROPERTY_KEYS) or "").split(" ") if k)
    sp.message_id = props.get(MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or m.msg_id
    sp.body_digest.CopyFrom(convert.body_digest(m.body))
    sp.body_encoding = pb.IDENTITY
    sp.born_timestamp.FromMilliseconds(m.born_timestamp)
    sp.born_host = props.get(convert.PROPERTY_BORN_HOST) or f"{m.born_host[0]}:{m.born_host[1]}"
    sp.store_timestamp.FromMilliseconds(m.store_timestamp)
    sp.store_host = f"{m.store_host[0]}:{m.store_host[1]}"
    if handle:  # a received message (a transaction check's has none)
        sp.receipt_handle = handle
        sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    sp.delivery_attempt = (m.reconsume_times if reconsume_times is None else reconsume_times) + 1
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp.message_group = group
        sp.message_type = pb.FIFO
    elif props.get("TIMER_DELIVER_MS", "").isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(props["TIMER_DELIVER_MS"]))
        sp.message_type = pb.DELAY
    else:
        sp.message_type = pb.NORMAL
    return out


def _order_counts(rext: dict[str, str], broker: str) -> OrderCounts:
    """An orderly pop's ``orderCountInfo``; none for a malformed one (its messages then show
    their records' own reconsume times, where Apache's client would fail the whole pop)."""
    try:
        return OrderCounts.parse(rext.get("orderCountInfo"))
    except PopFormatError as exc:
        log.info("orderCountInfo ignored", broker=broker, error=str(exc)[:200])
        return OrderCounts()


def _popped(resp: RemotingCommand, topic: str, broker: str, *,
            orderly: bool = False) -> list[pb.Message]:
    """A pop's messages as the client gets them, each with its receipt handle; an orderly
    pop's (``orderly``) with their delivery attempts from ``orderCountInfo``, as Apache's
    proxy reads them (``MQClientAPIImpl.processPopResponse``): a message the broker gave a
    receipt handle of its own (``POP_CK``: one of the pop retry topic) keeps its record's."""
    rext = {k: str(v) for k, v in resp.ext_fields.items()}
    counts = _order_counts(rext, broker) if orderly else OrderCounts()
    starts = parse_start_offset_info(rext.get("startOffsetInfo"))
    out = []
    for m in iter_records(bytes(resp.body or b"")):
        shown = topic if m.topic == topic or m.topic.startswith("%RETRY%") else m.topic
        times = None
        if counts.counts and PROPERTY_POP_CK not in m.properties:
            times = counts.reconsume_times(m.topic, m.queue_id, m.queue_offset,
                                           m.reconsume_times)
        out.append(to_pb(m, shown, _handle(m, rext, starts, broker), int(rext["invisibleTime"]),
                         reconsume_times=times))
    return out


def _handle_key(msg_id: str, handle: str) -> HandleKey | None:
    """Which message a client's receipt handle names, as renewals key it (None: no handle)."""
    try:
        h, _offset = parse_handle(handle)
    except convert.ProxyError:
        return None
    return HandleKey(msg_id, h.broker_name, h.queue_id, h.queue_offset)


def _to_hold(client: str, group: str, topic: str, m: pb.Message) -> Held:
    """A message an auto_renew receive hands out, as the renewals keep it."""
    sp = m.system_properties
    h, _offset = parse_handle(sp.receipt_handle)
    return Held(client, group, topic, HandleKey(sp.message_id, h.broker_name, h.queue_id,
                                                h.queue_offset),
                sp.receipt_handle, sp.receipt_handle, visible_at_ms=h.pop_time + h.invisible_time,
                first_pop_ms=h.pop_time, reconsume_times=max(0, sp.delivery_attempt - 1))


def _changed_handle(h: ReceiptHandle, resp: RemotingCommand, old: str) -> tuple[str, int]:
    """The receipt handle a change of ``old``'s (``h``'s) invisible time gives, from the
    broker's answer ``resp``, and when it turns visible (epoch ms)."""
    ext = resp.ext_fields
    pop_time, invisible = int(ext["popTime"]), int(ext["invisibleTime"])
    new = ReceiptHandle(h.queue_offset, pop_time, invisible, int(ext["reviveQid"]), h.flag,
                        h.broker_name, h.queue_id, h.queue_offset)
    _h, offset = parse_handle(old)
    text = new.encode() if offset is None else f"{new.encode()} {offset}"
    return text, pop_time + invisible


def _renew_settings(config: ProxyConfig) -> RenewSettings:
    return RenewSettings(
        ahead_ms=config.renew_ahead_time_ms, max_time_ms=config.renew_max_time_ms,
        max_retry_times=config.max_renew_retry_times,
        clear_invisible_ms=config.invisible_time_millis_when_clear,
        channel_expired_ms=config.channel_expired_timeout_ms,
        max_handles=config.max_renewed_handles, max_in_flight=config.max_renewals_in_flight,
        policy_ms=config.renew_policy_ms or RenewSettings().policy_ms)


def _check_names(topic: str, group: str) -> None:
    """ProxyError ILLEGAL_TOPIC or ILLEGAL_CONSUMER_GROUP (the topic checked first, as Apache's
    proxy's ``validateTopicAndConsumerGroup`` does) for a name the broker would refuse."""
    for code, problem in ((pb.ILLEGAL_TOPIC, validate_topic(topic)),
                          (pb.ILLEGAL_CONSUMER_GROUP, validate_group(group))):
        if problem is not None:
            raise convert.ProxyError(code, problem)


#: a pop under way for an attempt: (broker, group, topic, attempt id)
AttemptKey = tuple[str, str, str, str]


@attrs.define(eq=False)
class _Waiter:
    """Whom a pop's answer goes to: the receive that asked, or the retry of its attempt that
    took its place once it went away."""

    tx: trio.MemorySendChannel[Popped]

    def gone(self) -> bool:
        """The receive waiting went away (its end of the channel is closed)."""
        return self.tx.statistics().open_receive_channels == 0

    def take_over(self, tx: trio.MemorySendChannel[Popped]) -> None:
        self.tx.close()
        self.tx = tx


def _hand_over(tx: trio.MemorySendChannel[Popped], item: Popped) -> bool:
    """``item`` to the receive waiting for it; False when that receive went away."""
    try:
        tx.send_nowait(item)
    except trio.BrokenResourceError:
        return False
    return True


class PopBridge:
    """``nursery``: the proxy's own, where pops run and popped messages are given back (a
    receive's task is cancelled when its client goes away)."""

    def __init__(self, config: ProxyConfig, instance: ClientInstance,
                 routes: MasterRoutes | None = None, metadata: ProxyMetadata | None = None,
                 *, nursery: trio.Nursery) -> None:
        self.config = config
        self.instance = instance
        self.nursery = nursery
        self.routes = routes or MasterRoutes(instance)
        self.metadata = metadata or ProxyMetadata(instance)
        self.limits = PollingLimits(config.grpc_client_consumer_min_long_polling_timeout_ms,
                                    config.grpc_client_consumer_max_long_polling_timeout_ms)
        self.invisible = InvisibleLimits(config.default_invisible_time_ms,
                                         config.min_invisible_time_ms_for_recv,
                                         config.max_invisible_time_ms)
        self._next_broker = 0
        #: the handles of auto_renew receives, renewed until acked (its loop: ``run``)
        self.renewer = HandleRenewer(
            _renew_settings(config), self._renew_change,
            period_s=max(1, config.renew_schedule_period_ms) / 1000,
            call_timeout_s=config.call_timeout_s, concurrency=config.renew_concurrency)
        #: the pops under way that carry an attempt id (one per receive in flight at most)
        self._attempts: dict[AttemptKey, _Waiter] = {}

    async def receive(self, req: spb.ReceiveMessageRequest, send: Send,
                      call: ReceiveCall = NO_DEADLINE) -> None:
        try:
            await self._receive(req, send, call)
        except Exception as exc:
            await send(spb.ReceiveMessageResponse(
                status=convert.error_status(exc)).SerializeToString())

    def _poll_ms(self, req: spb.ReceiveMessageRequest, call: ReceiveCall) -> int:
        """The pop's long poll, from the request and the time its client has left
        (proxy/polling.py); ProxyError when that is too short for the shortest."""
        requested = None
        if req.HasField("long_polling_timeout"):
            requested = convert.duration_ms(req.long_polling_timeout)
            if requested is None:
                raise convert.ProxyError(refusal_code(call.client_version),
                                         "long_polling_timeout is not a valid duration")
        poll = polling_ms(self.limits, requested_ms=requested, time_left_ms=call.time_left_ms,
                          request_timeout_ms=call.request_timeout_ms)
        if poll is None:
            raise convert.ProxyError(refusal_code(call.client_version),
                                     "The deadline time remaining is not enough for polling")
        return poll

    async def _receive(self, req: spb.ReceiveMessageRequest, send: Send,
                       call: ReceiveCall) -> None:
        # refused in Apache's proxy's order: the long poll, the names, the invisible time
        poll_ms = self._poll_ms(req, call)
        group, topic = req.group.name, req.message_queue.topic.name
        if not group or not topic:
            raise convert.ProxyError(pb.BAD_REQUEST, "group and topic are required")
        _check_names(topic, group)
        auto_renew = req.auto_renew and self.config.enable_proxy_auto_renew
        invisible_ms = receive_invisible_ms(self.invisible, req.invisible_duration,
                                            auto_renew=auto_renew)
        broker = req.message_queue.broker.name or await self._any_broker(topic)
        # the group's orderliness, asked of the master the pop goes to
        policy = await self.metadata.group(group, topic, await self.routes.master(topic, broker))
        ext: dict[str, Any] = {
            "consumerGroup": group, "topic": topic, "queueId": "-1",
            "maxMsgNums": str(max(1, min(MAX_BATCH, req.batch_size or MAX_BATCH))),
            "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms),
            "bornTime": str(int(time.time() * 1000)), "initMode": "0",
            "order": "true" if policy is not None and policy.orderly else "false",
        }
        attempt = req.attempt_id if req.HasField("attempt_id") else ""
        if attempt and len(attempt) <= MAX_ATTEMPT_ID_CHARS and attempt.isascii() \
                and attempt.isprintable():
            ext["attemptId"] = attempt  # an orderly pop retried gets its batch again
        expr = req.filter_expression.expression
        if expr and expr != "*":
            ext["exp"], ext["expType"] = expr, "TAG"
        # (the pop's answer is waited for past the client's deadline: what it pops for a
        # receive gone by then is given back, see _pop)
        timeout = poll_ms / 1000 + self.config.call_timeout_s
        addr, resp = await self._pop(topic, broker, request(RequestCode.POP_MESSAGE, ext),
                                     timeout, group)
        if resp.code in (ResponseCode.PULL_NOT_FOUND, POLLING_TIMEOUT):
            await send(spb.ReceiveMessageResponse(status=pb.Status(
                code=pb.MESSAGE_NOT_FOUND, message="no new message")).SerializeToString())
            return
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        popped = _popped(resp, topic, broker, orderly=ext["order"] == "true")
        held = [_to_hold(call.client_id, group, topic, m) for m in popped] \
            if auto_renew and call.client_id else []
        self.renewer.seen(call.client_id, group)
        self.renewer.keep(held)  # before they are handed out: an ack may follow at once
        handed = False
        try:
            await send(spb.ReceiveMessageResponse(status=convert.ok_status()).SerializeToString())
            for out in popped:
                await send(spb.ReceiveMessageResponse(message=out).SerializeToString())
            # the stream's last entry: when the messages were handed over (the SDKs'
            # PushConsumer measures its delivery latency from it, and fails without it)
            done = spb.ReceiveMessageResponse()
            done.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
            await send(done.SerializeToString())
            handed = True
        finally:
            if not handed:  # the SDKs drop a receive whose stream broke: give them all back
                self.renewer.drop(call.client_id, group, ((h.key, h.original) for h in held))
                self.nursery.start_soon(
                    self._give_back, group, topic,
                    [m.system_properties.receipt_handle for m in popped])

    async def _pop(self, topic: str, broker: str, cmd: RemotingCommand, timeout: float,
                   group: str) -> tuple[str, RemotingCommand]:
        """The broker's answer to a pop, asked in a task of the proxy's own: a receive
        cancelled while its pop waits at the broker (the client gave up, or reset the stream)
        does not abandon it. What the broker pops for it then is given back at once, not left
        invisible for its whole invisible time (an orderly queue blocked meanwhile).

        A receive retried with the attempt id of one that went away while its pop is still
        under way (the SDKs retry a receive whose deadline passed with the same attempt id)
        takes that pop's answer instead of popping again: two pops of one attempt would both
        pop the batch (the broker does not block an attempt's own retry), and whichever came
        second would replace the queue's orderly block under the other's receipt handles."""
        tx, rx = trio.open_memory_channel[Popped](1)
        attempt = str(cmd.ext_fields.get("attemptId", ""))
        key = (broker, group, topic, attempt) if attempt else None
        waiter = self._attempts.get(key) if key is not None else None
        if waiter is not None and waiter.gone():
            waiter.take_over(tx)
            log.info("a retried receive takes over its attempt's pop under way", group=group,
                     topic=topic, broker=broker)
        else:
            waiter = _Waiter(tx)
            if key is not None and key not in self._attempts:
                self._attempts[key] = waiter
            self.nursery.start_soon(self._pop_task, topic, broker, cmd, timeout, group, waiter,
                                    key)
        async with rx:
            answer = await rx.receive()
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def _pop_task(self, topic: str, broker: str, cmd: RemotingCommand, timeout: float,
                        group: str, waiter: _Waiter, key: AttemptKey | None) -> None:
        try:
            try:
                answer: Popped = await self.routes.invoke(topic, broker, cmd, timeout)
            except Exception as exc:
                answer = exc
            if key is not None and self._attempts.get(key) is waiter:
                del self._attempts[key]  # (no await from here to the hand-over: none joins)
            if _hand_over(waiter.tx, answer) or isinstance(answer, Exception) \
                    or answer[1].code != ResponseCode.SUCCESS:
                return
        finally:
            if key is not None and self._attempts.get(key) is waiter:
                del self._attempts[key]
            waiter.tx.close()
        try:
            popped = _popped(answer[1], topic, broker)
        except Exception as exc:  # (a malformed answer: the receive would have failed too)
            log.info("popped messages not given back", group=group, topic=topic,
                     error=repr(exc)[:200])
            return
        await self._give_back(group, topic, [m.system_properties.receipt_handle for m in popped])

    async def _give_back(self, group: str, topic: str, handles: Sequence[str]) -> None:
        """Messages popped for a receive that went away, visible again in a second."""
        kept = 0
        for handle in handles:
            try:
                await self._call_handle(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, group, topic,
                                        handle, {"invisibleTime": str(GIVE_BACK_INVISIBLE_MS)})
            except Exception as exc:  # it turns visible at its invisible time instead
                kept += 1
                log.info("popped message not given back", group=group, topic=topic,
                         error=str(exc)[:200])
        if handles:
            log.info("gave back messages popped for a receive that went away", group=group,
                     topic=topic, messages=len(handles), kept=kept)

    async def _any_broker(self, topic: str) -> str:
        """A receive naming no broker: one of the topic's readable brokers, in turn (as
        Apache's proxy picks one)."""
        names = convert.readable_brokers(await fetch_route(self.instance, topic))
        if not names:
            raise convert.ProxyError(pb.FORBIDDEN, f"no readable queue of topic {topic}")
        self._next_broker += 1
        return names[self._next_broker % len(names)]

    async def _call_handle(self, code: int, group: str, topic: str, handle_text: str,
                           extra: dict[str, str]) -> tuple[ReceiptHandle, Any]:
        h, _offset = parse_handle(handle_text)
        real = topic if h.flag == "0" else pop_retry_topic(topic, group)
        ext = {"consumerGroup": group, "topic": real, "queueId": str(h.queue_id),
               "extraInfo": h.encode(), "offset": str(h.queue_offset), **extra}
        # an ack or a change of invisible time may be made twice: once more on a new connection
        # when the broker's connection went under it
        addr, resp = await self.routes.invoke(topic, h.broker_name, request(code, ext),
                                              idempotent=True)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return h, resp

    async def _renew_change(self, group: str, topic: str, handle: str, invisible_ms: int
                            ) -> tuple[str, int]:
        """A renewal (or give-back) of a kept handle: its new handle and visible time."""
        h, resp = await self._call_handle(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, group, topic,
                                          handle, {"invisibleTime": str(invisible_ms)})
        return _changed_handle(h, resp, handle)

    async def _newest(self, client: str, group: str, msg_id: str, handle: str) -> str:
        """The handle to act on for a client's ``handle``: the newest one the renewals kept for
        its message (then renewed no more), else ``handle`` itself (Apache's proxy answers an
        ack or change so, with the client's handle taken out of its ``ReceiptHandleGroup``)."""
        return await self.renewer.take(client, group, _handle_key(msg_id, handle), handle)

    async def ack(self, req: spb.AckMessageRequest, client: str = ""
                  ) -> spb.AckMessageResponse:
        entries = []
        for e in req.entries:
            try:
                handle = await self._newest(client, req.group.name, e.message_id,
                                            e.receipt_handle)
                await self._call_handle(RequestCode.ACK_MESSAGE, req.group.name,
                                        req.topic.name, handle, {})
                status = convert.ok_status()
            except Exception as exc:
                status = convert.error_status(exc)
            entries.append(spb.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=status))
        failed = next((x.status for x in entries if x.status.code != pb.OK), None)
        return spb.AckMessageResponse(status=failed or convert.ok_status(), entries=entries)

    async def change_invisible(self, req: spb.ChangeInvisibleDurationRequest, client: str = ""
                               ) -> spb.ChangeInvisibleDurationResponse:
        try:
            _check_names(req.topic.name, req.group.name)  # first, as Apache's proxy checks
            ms = change_invisible_ms(self.invisible, req.invisible_duration)
            handle = await self._newest(client, req.group.name, req.message_id,
                                        req.receipt_handle)
            h, resp = await self._call_handle(
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME, req.group.name, req.topic.name,
                handle, {"invisibleTime": str(ms)})
            text, _visible_at = _changed_handle(h, resp, handle)
        except Exception as exc:
            return spb.ChangeInvisibleDurationResponse(status=convert.error_status(exc))
        return spb.ChangeInvisibleDurationResponse(status=convert.ok_status(),
                                                   receipt_handle=text)

    async def forward_to_dlq(self, req: spb.ForwardMessageToDeadLetterQueueRequest,
                             client: str = "") -> spb.ForwardMessageToDeadLetterQueueResponse:
        """The message goes to ``%DLQ%<group>`` at once (a send-back with delay level -1 and no
        retries left), then its receipt handle is acked."""
        try:
            await self._forward(req, client)
        except Exception as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=convert.error_status(exc))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=convert.ok_status())

    async def _forward(self, req: spb.ForwardMessageToDeadLetterQueueRequest,
                       client: str) -> None:
        group, topic = req.group.name, req.topic.name
        problem = validate_group(group) or validate_topic(topic)
        if problem is not None:
            raise convert.ProxyError(pb.BAD_REQUEST, problem)
        handle = await self._newest(client, group, req.message_id, req.receipt_handle)
        h, offset = parse_handle(handle)
        if offset is None:
            raise convert.ProxyError(pb.INVALID_RECEIPT_HANDLE, "no CommitLog offset in it")
        real = topic if h.flag == "0" else pop_retry_topic(topic, group)
        cmd = send_back(commitlog_offset=offset, group=group, delay_level=-1,
                        origin_msg_id=req.message_id, origin_topic=real, max_reconsume_times=0)
        addr, resp = await self.routes.invoke(topic, h.broker_name, cmd)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        await self._call_handle(RequestCode.ACK_MESSAGE, group, topic, handle, {})
