"""What the remoting shell relies on in Trio beyond its documented API, checked on the installed
Trio (pyproject.toml bounds Trio to the versions this passed on).

``cluster/remoting/connection.py`` ends a lone call's wait at its deadline with
``trio.lowlevel.notify_closing`` on a socket that stays open (no cancel scope per call): the waiter
is woken with ``ClosedResourceError``, and the next wait on the same fd registers it again and
works. Trio documents ``notify_closing`` only as the step before a close.
"""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing


async def test_notify_closing_wakes_a_waiter_and_the_fd_stays_usable() -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        woken: list[type[BaseException]] = []

        async def waiter() -> None:
            try:
                await trio.lowlevel.wait_readable(a)
            except trio.ClosedResourceError as exc:
                woken.append(type(exc))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.notify_closing(a)  # the fd is NOT closed
        assert woken == [trio.ClosedResourceError]
        assert a.fileno() >= 0

        # the same fd can be waited on again, and the wait sees real readiness
        b.send(b"x")
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(a)
        assert a.recv(1) == b"x"

        # and a writer woken mid-wait can wait again and go on
        async def writer_wait() -> None:
            with pytest.raises(trio.ClosedResourceError):
                await trio.lowlevel.wait_readable(a)
            b.send(b"y")
            await trio.lowlevel.wait_readable(a)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer_wait)
                await trio.testing.wait_all_tasks_blocked()
                trio.lowlevel.notify_closing(a)
        assert a.recv(1) == b"y"
    finally:
        a.close()
        b.close()
