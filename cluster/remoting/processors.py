"""Request processors, the table that finds them, and the two ways a plain processor answers
later without a task of its own (``Deferred``, ``HELD``). Pure: no trio.

A request processor takes ``(connection, request)``. ``async def`` processors run in a task of
their own (they may wait: long polling, a flush, a call back to the peer); plain ``def``
processors must not block and run inline in the connection's reader, their responses batched
into one send per read. A plain ``def`` processor may also return an awaitable (a coroutine)
when it finds it must wait after all: the answer is then awaited in a task of its own (a pull
with nothing to return yet), or a ``Deferred`` that another task resolves later (no task per
request), or ``HELD`` when it put its answer in ``HeldAnswers`` (sent once a watermark passes
its key: SYNC_MASTER sends).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, cast

import attrs

from .codec import RemotingCommand


class Answerer(Protocol):
    """What a ``Deferred`` answers on (a connection)."""

    def _deferred_done(
        self, opaque: int, flag: int, code: int, response: RemotingCommand | None
    ) -> None: ...


AsyncProcessor = Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]]
SyncProcessor = Callable[
    [Any, RemotingCommand],
    "RemotingCommand | Awaitable[RemotingCommand | None] | Deferred | Held | None",
]
Processor = AsyncProcessor | SyncProcessor
#: A check run before a processor: None lets the request through, a response refuses it.
ProcessorCheck = Callable[[Any, RemotingCommand], "RemotingCommand | None"]


def is_async(processor: Processor) -> bool:
    """Whether ``processor`` is ``async def`` (or a callable with an ``async def __call__``)."""
    target = getattr(processor, "__call__", processor)  # noqa: B004
    return inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(target)


def checked(processor: Processor, check: ProcessorCheck) -> Processor:
    """``processor`` behind ``check`` (the ACL guard, the name gate): when ``check`` answers, that
    answer is the response and the processor does not run. A plain processor stays plain (the
    inline fast path), an ``async def`` one stays async."""
    if is_async(processor):
        async_p = cast(AsyncProcessor, processor)

        async def checked_async(conn: Any, request: RemotingCommand) -> Any:
            refusal = check(conn, request)
            if refusal is not None:
                return refusal
            return await async_p(conn, request)

        return checked_async
    sync_p = processor

    def checked_sync(conn: Any, request: RemotingCommand) -> Any:
        refusal = check(conn, request)
        if refusal is not None:
            return refusal
        return sync_p(conn, request)

    return checked_sync


@attrs.frozen
class ProcessorTable:
    """The processor table keyed by request code, and the processor for any other code."""

    processors: Mapping[int, Processor] = attrs.field(factory=dict)
    default: Processor | None = None
    _is_async: Mapping[int, bool] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        flags = {code: is_async(p) for code, p in self.processors.items()}
        object.__setattr__(self, "_is_async", flags)

    def lookup(self, code: int) -> tuple[Processor | None, bool]:
        """The processor for ``code`` and whether it is ``async`` (needs a task of its own)."""
        processor = self.processors.get(code)
        if processor is not None:
            return processor, self._is_async[code]
        if self.default is not None:
            return self.default, is_async(self.default)
        return None, False


class Deferred:
    """An answer a plain ``def`` processor promises for later, without a task of its own.

    A processor that must wait on something another task will finish (a SYNC_MASTER send
    waiting for a slave's ack) returns a ``Deferred`` and arranges for ``resolve(response)`` to
    be called once from any task of the same Trio run; the connection then queues the response
    and flushes every answer resolved in the same scheduling batch in one send. Costs an object
    and a callback instead of a task per request.
    """

    __slots__ = ("_conn", "_conn_code", "_conn_flag", "_conn_opaque", "_on_done", "done",
                 "response")

    def __init__(self) -> None:
        self._on_done: Callable[[RemotingCommand | None], None] | None = None
        self._conn: Answerer | None = None  # the connection to answer on (no callback object)
        # the request's opaque, flag and code: all the answer needs of it (the request itself,
        # its header fields and body, is freed at once, not kept until the answer)
        self._conn_opaque = self._conn_flag = self._conn_code = 0
        self.done = False
        self.response: RemotingCommand | None = None

    def resolve(self, response: RemotingCommand | None) -> None:
        """Deliver the answer (later calls are ignored)."""
        if self.done:
            return
        self.done = True
        self.response = response
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn._deferred_done(self._conn_opaque, self._conn_flag, self._conn_code, response)
            return
        callback, self._on_done = self._on_done, None
        if callback is not None:
            callback(response)

    def _attach(self, callback: Callable[[RemotingCommand | None], None]) -> None:
        if self.done:
            callback(self.response)
        else:
            self._on_done = callback

    def _attach_connection(self, conn: Answerer, request: RemotingCommand) -> None:
        """``_attach(partial(conn._deferred_done, ...request))`` without the partial."""
        if self.done:
            conn._deferred_done(request.opaque, request.flag, request.code, self.response)
        else:
            self._conn = conn
            self._conn_opaque = request.opaque
            self._conn_flag = request.flag
            self._conn_code = request.code


class Held:
    """What a processor returns when it put its answer in ``HeldAnswers``: the connection
    counts the request as running until the answer is released."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HELD"


#: A plain ``def`` processor's answer is in ``HeldAnswers`` (see there).
HELD: Final = Held()
