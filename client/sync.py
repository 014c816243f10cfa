"""Blocking facade: the Trio client on a background thread, for code that is not async::

    from rmq_cluster.client.sync import SyncProducer
    with SyncProducer("PG", namesrv_addr="127.0.0.1:9876") as p:
        print(p.send(Message("T", b"hi")).msg_id)

Each facade object owns one background thread running ``trio.run``; calls cross over with
``trio.from_thread.run``. A push consumer's listener runs in a worker thread
(``trio.to_thread.run_sync``), so it may block.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import trio

from .admin import Admin
from .consumer import PullConsumer, PushConsumer
from .errors import ClientStateError
from .model import (
    Message,
    MessageQueue,
    PullResult,
    ReceivedMessage,
    SendResult,
    TransactionState,
)
from .producer import Producer, TransactionProducer
from .request_reply import DEFAULT_REQUEST_TIMEOUT_S

T = TypeVar("T")
#: How long starting the background loop may take.
LOOP_START_TIMEOUT_S = 30.0


class BackgroundLoop:
    """A Trio loop on a daemon thread that async context managers can live in."""

    def __init__(self, name: str = "rmq-client") -> None:
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        if not self._ready.wait(LOOP_START_TIMEOUT_S):
            raise ClientStateError("background Trio loop did not start")

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the next caller
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._token is None or not self._thread.is_alive():
            raise ClientStateError(f"background loop is not running ({self._error!r})")
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def enter(self, cm: AbstractAsyncContextManager[T]) -> tuple[T, Callable[[], None]]:
        """Enter ``cm`` in a task of the loop; returns its value and a blocking ``exit``."""
        entered: list[T] = []
        leave = threading.Event()
        leave_async: list[trio.Event] = []
        done = threading.Event()
        failure: list[BaseException] = []

        async def holder(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            ev = trio.Event()
            leave_async.append(ev)
            try:
                async with cm as value:
                    entered.append(value)
                    task_status.started()
                    await ev.wait()
            except BaseException as exc:
                failure.append(exc)
                if not entered:
                    raise
            finally:
                done.set()

        async def start() -> None:
            assert self._nursery is not None
            await self._nursery.start(holder)

        self.run(start)

        def exit_() -> None:
            if leave.is_set():
                return
            leave.set()
            trio.from_thread.run_sync(leave_async[0].set, trio_token=self._token)
            done.wait()
            errors = [e for e in failure if not isinstance(e, trio.Cancelled)]
            if errors:
                raise errors[0]

        return entered[0], exit_

    def close(self) -> None:
        if self._token is not None and self._thread.is_alive() and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()


class _Facade:
    def __init__(self, make: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        self._loop = BackgroundLoop()
        try:
            self._obj, self._exit = self._loop.enter(make())
        except BaseException:
            self._loop.close()
            raise

    def close(self) -> None:
        try:
            self._exit()
        finally:
            self._loop.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncProducer(_Facade):
    def __init__(self, group: str = "DEFAULT_PRODUCER", **kwargs: Any) -> None:
        super().__init__(lambda: Producer(group, **kwargs))
        self.producer: Producer = self._obj

    def __enter__(self) -> SyncProducer:
        return self

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        return self._loop.run(lambda: self.producer.send(msg, **kwargs))

    def send_orderly(self, msg: Message, key: Any) -> SendResult:
        return self._loop.run(self.producer.send_orderly, msg, key)

    def send_oneway(self, msg: Message) -> None:
        self._loop.run(self.producer.send_oneway, msg)

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        return self._loop.run(self.producer.send_batch, msgs)

    def request(self, msg: Message, timeout: float = DEFAULT_REQUEST_TIMEOUT_S
                ) -> ReceivedMessage:
        """Send a request and block for its reply (``Producer.request``)."""
        return self._loop.run(self.producer.request, msg, timeout)

    def send_reply(self, reply: Message) -> SendResult:
        """Send a ``create_reply_message`` reply; callable from a SyncPushConsumer listener."""
        return self._loop.run(self.producer.send_reply, reply)

    def send_many(self, msgs: Iterable[Message], in_flight: int = 256) -> list[SendResult]:
        """Async sends with ``in_flight`` outstanding; results in input order."""
        items = list(msgs)

        async def go() -> list[SendResult]:
            out: list[SendResult | None] = [None] * len(items)
            limit = trio.Semaphore(in_flight)

            async def one(i: int, m: Message) -> None:
                async with limit:
                    out[i] = await self.producer.send(m)

            async with trio.open_nursery() as n:
                for i, m in enumerate(items):
                    await limit.acquire()
                    limit.release()
                    n.start_soon(one, i, m)
            return [r for r in out if r is not None]

        return self._loop.run(go)


class SyncTransactionProducer(SyncProducer):
    """``TransactionProducer``, blocking: ``execute_local(msg, arg)`` and ``check_local(msg)``
    run in a worker thread (they may block, e.g. on a database) and return a
    ``TransactionState``."""

    def __init__(self, group: str, *,
                 execute_local: Callable[[Message, Any], TransactionState],
                 check_local: Callable[[ReceivedMessage], TransactionState],
                 **kwargs: Any) -> None:
        async def execute(msg: Message, arg: Any) -> TransactionState:
            return await trio.to_thread.run_sync(execute_local, msg, arg)

        async def check(msg: ReceivedMessage) -> TransactionState:
            return await trio.to_thread.run_sync(check_local, msg)

        _Facade.__init__(self, lambda: TransactionProducer(
            group, execute_local=execute, check_local=check, **kwargs))
        self.producer: TransactionProducer = self._obj

    def __enter__(self) -> SyncTransactionProducer:
        return self

    def send_in_transaction(self, msg: Message, arg: Any = None
                            ) -> tuple[SendResult, TransactionState]:
        """Half message, ``execute_local`` (in a worker thread), END_TRANSACTION."""
        return self._loop.run(self.producer.send_in_transaction, msg, arg)


class SyncPullConsumer(_Facade):
    def __init__(self, group: str, **kwargs: Any) -> None:
        super().__init__(lambda: PullConsumer(group, **kwargs))
        self.consumer: PullConsumer = self._obj

    def __enter__(self) -> SyncPullConsumer:
        return self

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return self._loop.run(self.consumer.fetch_queues, topic)

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        self._loop.run(self.consumer.assign, list(mqs))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        async def go() -> None:
            self.consumer.seek(mq, offset)

        self._loop.run(go)

    def poll(self, timeout: float = 5.0) -> list[ReceivedMessage]:
        return self._loop.run(self.consumer.poll, timeout)

    def commit(self) -> None:
        self._loop.run(self.consumer.commit)

    def pull(self, mq: MessageQueue, offset: int, **kwargs: Any) -> PullResult:
        return self._loop.run(lambda: self.consumer.pull(mq, offset, **kwargs))


class SyncPushConsumer(_Facade):
    """``listener(msgs)`` runs in a worker thread; subscribe before constructing or via
    ``subscriptions={"T": "A || B"}``."""

    def __init__(self, group: str, listener: Callable[[list[ReceivedMessage]], Any],
                 subscriptions: dict[str, str], **kwargs: Any) -> None:
        async def in_thread(msgs: list[ReceivedMessage]) -> Any:
            return await trio.to_thread.run_sync(listener, msgs)

        def make() -> PushConsumer:
            c = PushConsumer(group, listener=in_thread, **kwargs)
            for topic, expr in subscriptions.items():
                c.subscribe(topic, expr)
            return c

        super().__init__(make)
        self.consumer: PushConsumer = self._obj

    def __enter__(self) -> SyncPushConsumer:
        return self


class SyncAdmin(_Facade):
    """Every ``Admin`` coroutine method, blocking: ``SyncAdmin(namesrv_addr=..).topic_list()``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(lambda: Admin(**kwargs))
        self.admin: Admin = self._obj

    def __enter__(self) -> SyncAdmin:
        return self

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self.admin, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(lambda: fn(*args, **kwargs))

        return call
