"""``ConnectionAdmission``: the counts and decisions of a server's connection limits, against a
plain model, over any sequence of connects, closes and evictions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting.admission import ConnectionAdmission, Refused

ADDRESSES = ("a", "b", "c", "d")


@given(
    max_connections=st.integers(1, 6),
    max_per_address=st.integers(1, 4),
    steps=st.lists(st.tuples(st.booleans(), st.sampled_from(ADDRESSES)), max_size=60),
)
def test_counts_limits_and_fair_share_match_a_plain_model(
    max_connections: int, max_per_address: int, steps: list[tuple[bool, str]]
) -> None:
    adm = ConnectionAdmission(max_connections, max_per_address)
    model = dict.fromkeys(ADDRESSES, 0)
    refused = dict.fromkeys(Refused, 0)
    evictions = 0
    for connect, address in steps:
        if not connect:
            adm.closed(address)  # (a close of nothing open changes nothing)
            model[address] = max(0, model[address] - 1)
            continue
        heaviest = max(model.values())
        victim = adm.fair_share_victim(address)
        if heaviest >= model[address] + 2:
            assert victim is not None and model[victim] == heaviest
        else:
            assert victim is None
        full = sum(model.values()) >= max_connections
        evicting = full and victim is not None
        got = adm.admit(address, evicting=evicting)
        if model[address] >= max_per_address:
            assert got is Refused.ADDRESS_FULL
        elif full and not evicting:
            assert got is Refused.NODE_FULL
        else:
            assert got is None
            model[address] += 1
            if evicting:  # the server closes one of the victim's: it ends at once here
                assert victim is not None
                evictions += 1
                adm.closed(victim)
                model[victim] -= 1
        if got is not None:
            refused[got] += 1
        assert adm.by_address == {a: n for a, n in model.items() if n}
        assert adm.open == sum(model.values()) <= max_connections
        assert max(model.values()) <= max_per_address
        assert adm.refused == refused and adm.evictions == evictions
