"""Request processors, the one shape of what they return (``Reply``), and the table that
finds them. Pure: no trio.

A processor is a plain ``def (connection, request) -> Reply``, run inline in the connection's
reader (it must not block; the answers of one read go out in one send). ``Reply`` is one of:

* a ``RemotingCommand``: the answer, sent now;
* ``None``: no answer (a oneway request; a two-way one is answered SYSTEM_ERROR);
* a ``Later``: the answer comes later, and the request counts as in flight until it does.
  ``Later(work)`` -- ``work`` is an awaitable (a coroutine) the connection awaits in a task of
  its own and answers with (a call back to a client, a file to write, a route to look up);
  ``LATER`` -- the processor already arranged its answer with no task: held, encoded, on a
  watermark (``HeldAnswers``: SYNC_FLUSH, SYNC_MASTER and DLedger sends), or kept by whoever
  will finish it, who hands it to ``conn.answer_later`` (a parked pull).

An ``async def`` processor is accepted by the table and adapted to this shape (``in_task``:
its coroutine becomes ``Later(work)``), so the connection handles one form.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, cast, final

import attrs

from .codec import RemotingCommand


@final
class Later:
    """A reply that comes later (see the module docstring): ``work`` to await in a task, or
    nothing (``LATER``: the answer is held or kept elsewhere)."""

    __slots__ = ("work",)

    def __init__(self, work: Awaitable[RemotingCommand | None] | None = None) -> None:
        self.work = work

    def __repr__(self) -> str:
        return "LATER" if self.work is None else f"Later({self.work!r})"


#: The answer is arranged already, with no task (held on a watermark, or kept by a parked pull).
LATER: Final = Later()

#: What a processor returns: the answer now, no answer, or the answer later.
Reply = RemotingCommand | Later | None
Processor = Callable[[Any, RemotingCommand], Reply]
AsyncProcessor = Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]]
#: What a table takes: a processor, or an ``async def`` one it adapts (``plain``).
AnyProcessor = Callable[[Any, RemotingCommand], "Reply | Awaitable[RemotingCommand | None]"]
#: A check run before a processor: None lets the request through, a response refuses it.
ProcessorCheck = Callable[[Any, RemotingCommand], "RemotingCommand | None"]


class LaterAnswers(Protocol):
    """What a processor that returned ``LATER`` answers on (a connection): once, with the
    request (its opaque, flag and code) and the answer (None: SYSTEM_ERROR)."""

    def answer_later(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        ...


def is_async(processor: Any) -> bool:
    """Whether ``processor`` is ``async def`` (or a callable with an ``async def __call__``)."""
    target = getattr(processor, "__call__", processor)  # noqa: B004
    return inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(target)


def in_task(processor: AsyncProcessor) -> Processor:
    """An ``async def`` processor as a plain one: its coroutine is the ``Later``'s work."""

    def later(conn: Any, request: RemotingCommand) -> Reply:
        return Later(processor(conn, request))

    return later


def plain(processor: AnyProcessor) -> Processor:
    """``processor`` in the one form (``async def`` ones through ``in_task``)."""
    if is_async(processor):
        return in_task(cast(AsyncProcessor, processor))
    return cast(Processor, processor)


def checked(processor: AnyProcessor, check: ProcessorCheck) -> Processor:
    """``processor`` behind ``check`` (the ACL guard, the name gate): when ``check`` answers,
    that answer is the reply and the processor does not run."""
    inner = plain(processor)

    def checked_p(conn: Any, request: RemotingCommand) -> Reply:
        refusal = check(conn, request)
        if refusal is not None:
            return refusal
        return inner(conn, request)

    return checked_p


@attrs.frozen
class ProcessorTable:
    """The processor table keyed by request code, and the processor for any other code
    (``async def`` processors are adapted to the one form when the table is built)."""

    processors: Mapping[int, AnyProcessor] = attrs.field(factory=dict)
    default: AnyProcessor | None = None
    _plain: Mapping[int, Processor] = attrs.field(init=False, repr=False, eq=False)
    _default: Processor | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_plain", {c: plain(p) for c, p in self.processors.items()})
        default = plain(self.default) if self.default is not None else None
        object.__setattr__(self, "_default", default)

    def lookup(self, code: int) -> Processor | None:
        """The processor for ``code`` (None: no processor takes it)."""
        processor = self._plain.get(code)
        return processor if processor is not None else self._default
