"""The schedule of the proxy's renewals of auto_renew receipt handles (proxy/renewal.py), as
Apache's proxy (5.3.1, ``DefaultReceiptHandleManager``) keeps it: renewed within
``renewAheadTimeMillis`` of their end with ``RenewStrategyPolicy``'s times, given back at
``renewMaxTimeMillis`` with the group's retry delay, up to ``maxRenewRetryTimes`` failures in a
row, taken out by the client's ack (newest handle), given back with 1 s when the client goes
away (said so, or silent for ``channelExpiredTimeout``). The proxy renewed nothing."""

from __future__ import annotations

import attrs
import pytest

from rmq_cluster.proxy.config import ProxyConfig
from rmq_cluster.proxy.renewal import (
    MAX_ID_CHARS,
    RENEW_POLICY_MS,
    Busy,
    GiveBack,
    HandleKey,
    Held,
    Renew,
    RenewalBook,
    RenewSettings,
    retry_delay_ms,
)

T0 = 1_700_000_000_000
S = RenewSettings()


def _held(n: int = 1, *, client: str = "c1", group: str = "g", pop: int = T0,
          invisible: int = 60_000, reconsume: int = 0) -> Held:
    handle = f"h{n}-{pop}"
    return Held(client, group, "t", HandleKey(f"id{n}", "broker-a", 0, n), handle, handle,
                visible_at_ms=pop + invisible, first_pop_ms=pop, reconsume_times=reconsume)


def test_the_defaults_are_apaches() -> None:
    c = ProxyConfig()
    assert (c.enable_proxy_auto_renew, c.renew_ahead_time_ms, c.renew_schedule_period_ms,
            c.renew_max_time_ms, c.max_renew_retry_times, c.invisible_time_millis_when_clear,
            c.channel_expired_timeout_ms) == (True, 10_000, 5_000, 3 * 3600_000, 3, 1_000,
                                              120_000)
    assert RENEW_POLICY_MS == (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
    # CustomizedRetryPolicy: next[reconsumeTimes + 2], the last one past the end
    assert [retry_delay_ms(n) for n in (0, 1, 2, 15, 99)] == [10_000, 30_000, 60_000,
                                                              7_200_000, 7_200_000]


def test_a_handle_is_renewed_within_the_ahead_time_with_the_policys_times() -> None:
    book = RenewalBook(S)
    assert book.add(_held(), T0)
    assert book.due(T0 + 49_999) == []  # 10 001 ms left
    [step] = book.due(T0 + 50_000)
    assert step == Renew(_held(), 60_000)
    assert book.due(T0 + 55_000) == []  # under way: not twice
    assert book.renewed(step.held, "h1-new", T0 + 120_000) is None
    # the next renewal asks the policy's second time, 10 s before the new handle ends
    assert book.due(T0 + 109_999) == []
    [second] = book.due(T0 + 110_000)
    assert isinstance(second, Renew) and second.invisible_ms == 180_000
    assert (second.held.current, second.held.original) == ("h1-new", "h1-" + str(T0))


def test_past_the_max_renew_time_it_is_given_back_with_the_retry_delay() -> None:
    book = RenewalBook(S)
    book.add(_held(pop=T0, reconsume=1), T0)
    book.seen("c1", "g", T0 + S.max_time_ms - 1)  # (its heartbeats)
    [step] = book.due(T0 + S.max_time_ms)
    assert step == GiveBack(_held(pop=T0, reconsume=1), 30_000, "max renew time")
    book.finished(step.held)
    assert len(book) == 0 and book.due(T0 + S.max_time_ms + 1) == []


def test_an_ack_takes_the_newest_handle_from_its_client_or_by_the_original() -> None:
    book = RenewalBook(S)
    book.add(_held(1), T0)
    book.add(_held(2), T0)
    [a, b] = book.due(T0 + 50_000)
    book.renewed(a.held, "renewed-1", T0 + 110_000)
    key1 = HandleKey("id1", "broker-a", 0, 1)
    taken = book.take("c1", "g", key1, "h1-" + str(T0))
    assert isinstance(taken, Held) and taken.current == "renewed-1"
    assert book.take("c1", "g", key1, "h1-" + str(T0)) is None  # renewed no more
    # message 2's renewal is under way: the ack waits for it
    key2 = HandleKey("id2", "broker-a", 0, 2)
    assert book.take("c1", "g", key2, "h2") == Busy((("c1", "g"), key2))
    book.renewed(b.held, "renewed-2", T0 + 110_000)
    # another client (or one naming none) quoting the original handle finds it too
    taken = book.take("other", "g", None, "h2-" + str(T0))
    assert isinstance(taken, Held) and taken.current == "renewed-2"
    assert len(book) == 0 and book.due(T0 + 200_000) == []


def test_failed_renewals_are_retried_up_to_the_limit() -> None:
    book = RenewalBook(S)
    book.add(_held(), T0)
    for _ in range(S.max_retry_times - 1):
        [step] = book.due(T0 + 55_000)
        assert book.failed(step.held, retry=True) is None
    [step] = book.due(T0 + 55_000)
    book.failed(step.held, retry=True)
    assert len(book) == 0 and book.due(T0 + 55_000) == []
    book.add(_held(), T0)  # an invalid handle: not retried
    [step] = book.due(T0 + 55_000)
    book.failed(step.held, retry=False)
    assert len(book) == 0


def test_a_client_gone_has_its_handles_given_back_in_a_second() -> None:
    book = RenewalBook(S)
    book.add(_held(1, invisible=120_000), T0)
    book.add(_held(2), T0)
    book.add(_held(3, client="c2", invisible=120_000), T0)
    [busy] = book.due(T0 + 50_000)
    steps = book.gone("c1")
    assert steps == [GiveBack(_held(1, invisible=120_000), 1_000, "client gone")]
    # the one under renewal is given back once its renewal ends, with the new handle
    after = book.renewed(busy.held, "renewed-2", T0 + 110_000)
    assert after is not None and (after.held.current, after.invisible_ms) == ("renewed-2", 1_000)
    assert len(book) == 1  # c2's


def test_a_client_silent_past_the_channel_expiry_is_gone() -> None:
    settings = RenewSettings(channel_expired_ms=120_000, ahead_ms=1_000)
    book = RenewalBook(settings)
    book.add(_held(1, invisible=3_600_000), T0)
    book.add(_held(2, client="c2", invisible=3_600_000), T0)
    book.seen("c2", "g", T0 + 100_000)
    book.seen("c3", "g", T0 + 100_000)  # holds nothing: not kept
    steps = book.due(T0 + 120_001)
    assert [(s.held.client, s.why) for s in steps] == [("c1", "client gone")]
    assert len(book) == 1


@pytest.mark.parametrize("cap", [1, 2])
def test_the_handles_kept_and_the_renewals_under_way_are_bounded(cap: int) -> None:
    book = RenewalBook(RenewSettings(max_handles=cap, max_in_flight=1))
    assert all(book.add(_held(n), T0) for n in range(cap))
    assert not book.add(_held(cap), T0)
    assert book.add(_held(0), T0)  # the same message again replaces it
    assert len(book) == cap
    assert len(book.due(T0 + 55_000)) == 1 and book.in_flight == 1
    # a hostile client's long ids are not kept (the count bounds the memory)
    roomy = RenewalBook(S)
    assert not roomy.add(_held(client="c" * (MAX_ID_CHARS + 1)), T0)
    long_id = attrs.evolve(_held(), key=HandleKey("i" * (MAX_ID_CHARS + 1), "broker-a", 0, 1))
    assert not roomy.add(long_id, T0)
    assert len(roomy) == 0
