"""The read-side budget (input_budget.py) under random interleavings of reads of many
connections, through the real frame decoder: its invariants hold after every read, and every
frame completes (no two connections can wait on each other for ever)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode_into
from rmq_cluster.cluster.remoting.input_budget import (
    READ_CHUNK_BYTES,
    SMALL_FRAME_BYTES,
    InputBudget,
    InputCharge,
)

CAP = 1024 * 1024
RESERVE = 128 * 1024


class _Budget(InputBudget):
    __slots__ = ("freed_calls",)

    def __init__(self) -> None:
        super().__init__(CAP, RESERVE)
        self.freed_calls = 0

    def freed(self) -> None:
        self.freed_calls += 1


def _stream(sizes: list[int]) -> bytes:
    out = bytearray()
    for i, size in enumerate(sizes):
        encode_into(out, RemotingCommand(code=10, body=b"x" * size), i + 1)
    return bytes(out)


@given(
    st.lists(st.lists(st.integers(0, 300 * 1024), min_size=1, max_size=4), min_size=1,
             max_size=4),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, READ_CHUNK_BYTES)), max_size=400),
)
def test_budget_invariants_hold_and_every_frame_completes(
    frames: list[list[int]], schedule: list[tuple[int, int]]
) -> None:
    budget = _Budget()
    streams = [_stream(sizes) for sizes in frames]
    sent = [0] * len(streams)
    decoders = [FrameDecoder() for _ in streams]
    charges = [InputCharge() for _ in streams]
    got = [0] * len(streams)

    def read(k: int, want: int) -> bool:
        """One read of connection k (at most ``want`` bytes); False if it must wait."""
        c = charges[k]
        limit = READ_CHUNK_BYTES
        if budget.needs_check(c):
            limit = budget.room_for_read(c)
            if not limit:
                return False
        data = streams[k][sent[k] : sent[k] + min(limit, want)]
        if not data:
            return False
        sent[k] += len(data)
        commands = decoders[k].feed(data)
        got[k] += len(commands)
        if c.charge or decoders[k].buffered:
            budget.account(c, k, 0.0, data, bool(commands), decoders[k].buffered)
        # the invariants
        assert budget.used == sum(x.charge for x in charges)
        assert budget.used <= CAP
        assert budget.peak <= CAP
        assert set(budget.partial) == {i for i, d in enumerate(decoders) if d.buffered}
        for x, d in zip(charges, decoders, strict=True):
            assert x.charge >= (d.buffered if x.grant else 2 * d.buffered)
            if x.grant:
                assert x.grant >= x.frame  # a grant covers its whole frame
        return True

    for k, want in schedule:  # the random interleaving
        read(k % len(streams), want)
    # then every connection reads on, round robin, until all is read: nothing stays stuck
    for _ in range(100_000):
        progressed = False
        for k in range(len(streams)):
            if sent[k] < len(streams[k]):
                progressed |= read(k, READ_CHUNK_BYTES)
        if all(s == len(x) for s, x in zip(sent, streams, strict=True)):
            break
        assert progressed, f"every connection waits for room: used={budget.used}"
    assert got == [len(sizes) for sizes in frames]
    assert budget.used == 0 and not budget.partial


def test_a_big_frame_waits_unread_until_it_is_admitted() -> None:
    budget = _Budget()
    small, big = InputCharge(), InputCharge()
    big_frame = _stream([400 * 1024])
    d = FrameDecoder()
    first = big_frame[:READ_CHUNK_BYTES]
    d.feed(first)
    # another connection holds most of the budget: the big frame cannot be admitted
    small.charge = budget.used = CAP - RESERVE - 100 * 1024
    budget.account(big, "big", 0.0, first, False, d.buffered)
    assert big.frame > SMALL_FRAME_BYTES and big.want and not big.grant
    assert budget.needs_check(big) and budget.room_for_read(big) == 0
    budget.used -= small.charge  # the other connection's frame completed
    small.charge = 0
    assert budget.room_for_read(big) == READ_CHUNK_BYTES and big.grant and not big.want
    assert budget.used == big.charge <= CAP - RESERVE
