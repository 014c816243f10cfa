"""PullRequestHoldService: parked pulls are objects woken by the service's one task -- by an
arriving message past their offset that their filter takes, or by their own deadline -- each
exactly once; shutdown wakes the rest. Trio's MockClock jumps over the deadlines."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.broker.long_polling import Parked, PullRequestHoldService


class _Log:
    def __init__(self) -> None:
        self.woken: list[tuple[str, float]] = []

    def parked(self, name: str, offset: int, tags: set[int] | None = None) -> Parked:
        return Parked(
            offset,
            None if tags is None else tags.__contains__,
            lambda: self.woken.append((name, trio.current_time())),
        )


def _run(test) -> None:  # type: ignore[no-untyped-def]
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def test_arrival_wakes_matching_pulls_and_deadline_the_rest() -> None:
    async def main() -> None:
        hold = PullRequestHoldService()
        log = _Log()
        async with trio.open_nursery() as nursery:
            await nursery.start(hold.run)
            t0 = trio.current_time()
            hold.park("T", 0, log.parked("a", 5), 10.0)
            hold.park("T", 0, log.parked("b", 5, {7}), 3.0)
            hold.park("T", 1, log.parked("c", 0), 20.0)
            assert hold.parked == 3
            hold.notify_message_arriving("T", 0, 5, 7)  # not past offset 5
            hold.notify_message_arriving("T", 0, 6, 8)  # past it; b wants tag 7 only
            await trio.testing.wait_all_tasks_blocked()
            assert [n for n, _ in log.woken] == ["a"] and log.woken[0][1] == t0
            assert hold.parked == 2
            await trio.sleep(3.5)  # b's deadline
            assert [n for n, _ in log.woken] == ["a", "b"]
            assert log.woken[1][1] == t0 + 3.0
            hold.notify_message_arriving("T", 1, 1, 0)
            await trio.testing.wait_all_tasks_blocked()
            assert [n for n, _ in log.woken] == ["a", "b", "c"] and hold.parked == 0
            await trio.sleep(30)  # no deadline wakes a pull twice
            assert len(log.woken) == 3
            nursery.cancel_scope.cancel()

    _run(main)


def test_an_earlier_deadline_rearms_the_sleeping_service() -> None:
    async def main() -> None:
        hold = PullRequestHoldService()
        log = _Log()
        async with trio.open_nursery() as nursery:
            await nursery.start(hold.run)
            t0 = trio.current_time()
            hold.park("T", 0, log.parked("late", 0), 100.0)
            await trio.testing.wait_all_tasks_blocked()  # asleep until t0 + 100
            hold.park("T", 0, log.parked("soon", 0), 1.0)
            await trio.sleep(2)
            assert log.woken == [("soon", t0 + 1.0)]
            nursery.cancel_scope.cancel()

    _run(main)


def test_wake_all_answers_every_pull_once_and_a_failing_wake_is_contained() -> None:
    async def main() -> None:
        hold = PullRequestHoldService()
        log = _Log()

        def boom() -> None:
            raise RuntimeError("boom")

        hold.park("T", 0, Parked(0, None, boom), 5.0)
        for i in range(5):
            hold.park("T", i, log.parked(str(i), 0), 5.0)
        hold.notify_message_arriving("T", 0, 1, 0)  # ready, the service not running
        hold.wake_all()
        assert sorted(n for n, _ in log.woken) == ["0", "1", "2", "3", "4"]
        assert hold.parked == 0
        async with trio.open_nursery() as nursery:  # nothing left to wake later
            await nursery.start(hold.run)
            await trio.sleep(10)
            nursery.cancel_scope.cancel()
        assert len(log.woken) == 5

    _run(main)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(1, 50),
                  st.sampled_from([None, frozenset({1}), frozenset({1, 2})])),
        max_size=30,
    ),
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 8), st.integers(0, 3),
                       st.integers(0, 60)), max_size=30),
)
def test_each_pull_wakes_once_at_the_first_due_moment(parks, arrivals) -> None:  # type: ignore[no-untyped-def]
    """Model: a pull wakes at the first arrival (in time order) past its offset with a tag it
    takes, or at its deadline, whichever comes first; exactly once."""
    arrivals = sorted(arrivals, key=lambda a: a[3])

    def expected(i: int) -> float:
        q, offset, timeout, tags = parks[i]
        for aq, max_off, tag, at in arrivals:
            if at >= timeout:
                break
            if aq == q and max_off > offset and (tags is None or tag in tags):
                return float(at)
        return float(timeout)

    async def main() -> None:
        hold = PullRequestHoldService()
        woken: dict[int, list[float]] = {}
        async with trio.open_nursery() as nursery:
            await nursery.start(hold.run)
            t0 = trio.current_time()
            def on_wake(i: int) -> Callable[[], None]:
                return lambda: woken.setdefault(i, []).append(trio.current_time() - t0)

            for i, (q, offset, timeout, tags) in enumerate(parks):
                hold.park("T", q, Parked(
                    offset, None if tags is None else tags.__contains__, on_wake(i)),
                    float(timeout))
            for aq, max_off, tag, at in arrivals:
                await trio.sleep_until(t0 + at)
                hold.notify_message_arriving("T", aq, max_off, tag)
            await trio.sleep_until(t0 + 100)
            nursery.cancel_scope.cancel()
        assert hold.parked == 0
        for i in range(len(parks)):
            assert len(woken.get(i, [])) == 1, (i, woken)
            # an arrival at the same instant as the deadline: either order is right
            want = expected(i)
            assert woken[i][0] == want or woken[i][0] == parks[i][2], (i, woken[i], want)

    _run(main)


def test_the_heap_sheds_entries_of_pulls_woken_by_messages() -> None:
    async def main() -> None:
        hold = PullRequestHoldService()
        async with trio.open_nursery() as nursery:
            await nursery.start(hold.run)
            for i in range(20_000):
                hold.park("T", 0, Parked(i), 60.0)
                hold.notify_message_arriving("T", 0, i + 1, 0)
            await trio.testing.wait_all_tasks_blocked()
            assert hold.parked == 0
            assert len(hold._heap) < 5_000  # not 20 000 dead entries until their deadline
            nursery.cancel_scope.cancel()

    _run(main)


def test_the_batch_end_callback_follows_each_batch_of_wakes_once() -> None:
    """The pull processor queues a woken pull's answer and sends each connection's answers
    once, after the batch (``on_batch_end``): one call per batch, after all of its wakes,
    message-woken, deadline-woken and shutdown alike; a failing callback is contained."""

    async def main() -> None:
        changes: list[str] = []
        hold = PullRequestHoldService(on_change=lambda: changes.append("change"))
        log = _Log()
        ends: list[list[str]] = []
        hold.on_batch_end(lambda: ends.append([n for n, _ in log.woken]))
        async with trio.open_nursery() as nursery:
            await nursery.start(hold.run)
            for name, queue in (("a", 0), ("b", 0), ("c", 1)):
                hold.park("T", queue, log.parked(name, 0), 10.0)
            hold.park("T", 2, log.parked("d", 0), 5.0)
            hold.park("T", 3, log.parked("e", 0), 50.0)
            changes.clear()
            hold.notify_message_arriving("T", 0, 1, 0)
            hold.notify_message_arriving("T", 1, 1, 0)
            await trio.testing.wait_all_tasks_blocked()
            assert ends == [["a", "b", "c"]] and changes == ["change"]
            await trio.sleep(6)  # d's deadline
            assert ends == [["a", "b", "c"], ["a", "b", "c", "d"]]
            hold.on_batch_end(lambda: 1 / 0)  # type: ignore[func-returns-value]
            hold.wake_all()  # shutdown: e, then the (failing, contained) callback
            assert [n for n, _ in log.woken] == ["a", "b", "c", "d", "e"]
            nursery.cancel_scope.cancel()

    _run(main)


def test_a_thousand_woken_pulls_are_answered_in_bounded_steps() -> None:
    """A dispatch round that wakes a parked pull on each of 1024 queues (a wide topic, one
    message each): the service answers at most WAKES_PER_STEP per step of its task and yields
    in between, so a request of another connection is not held behind all of them (issue 39:
    a 4.x consumer's rebalance asks one offset per queue, one after the other)."""
    from rmq_cluster.broker.long_polling import WAKES_PER_STEP

    async def main() -> None:
        hold = PullRequestHoldService()
        log = _Log()
        steps: list[int] = []
        hold.on_batch_end(lambda: steps.append(len(log.woken)))
        other_ran_at: list[int] = []

        async def other() -> None:  # another task: runs between the service's steps
            while len(log.woken) < 1024:
                other_ran_at.append(len(log.woken))
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            await nursery.start(hold.run)
            for q in range(1024):
                hold.park("Wide", q, log.parked(f"q{q}", 0), 15.0)
            for q in range(1024):
                hold.notify_message_arriving("Wide", q, 1, 0)
            nursery.start_soon(other)
            await trio.testing.wait_all_tasks_blocked()
            assert len(log.woken) == 1024 and hold.parked == 0
            nursery.cancel_scope.cancel()
        sizes = [b - a for a, b in zip([0, *steps], steps, strict=False)]
        assert max(sizes) <= WAKES_PER_STEP, sizes
        assert sum(sizes) == 1024
        # interleaved, not after (trio may run the two in either order within a batch)
        assert len(set(other_ran_at)) >= 1024 // WAKES_PER_STEP // 2, sorted(set(other_ran_at))

    _run(main)
