"""Controllers' listen addresses in the replicated state (GET_METADATA_INFO's leader address)."""

from __future__ import annotations

import orjson
import pytest

from rmq_cluster.controller.state import (
    MAX_CONTROLLERS,
    ApplyOutcome,
    EventError,
    LeaderEvent,
    ReplicasState,
    decode_event,
    encode_event,
)


def test_a_leader_event_round_trips_and_applies() -> None:
    ev = LeaderEvent("n1", "127.0.0.1:9888")
    assert decode_event(encode_event(ev)) == ev
    st = ReplicasState()
    assert st.apply(ev) is ApplyOutcome.APPLIED
    assert st.apply(LeaderEvent("n1", "127.0.0.1:9889")) is ApplyOutcome.APPLIED
    assert st.controllers == {"n1": "127.0.0.1:9889"} and st.groups == {}


@pytest.mark.parametrize("obj", [
    {"t": "leader", "id": "n1"},
    {"t": "leader", "id": "n1", "addr": "nohost"},
    {"t": "leader", "id": "", "addr": "127.0.0.1:1"},
    {"t": "leader", "id": "n 1", "addr": "127.0.0.1:1"},
    {"t": "leader", "id": "n1", "addr": "127.0.0.1:70000"},
    {"t": "leader", "id": 5, "addr": "127.0.0.1:1"},
])
def test_a_bad_leader_event_is_refused(obj: dict[str, object]) -> None:
    with pytest.raises(EventError):
        decode_event(orjson.dumps(obj))


def test_the_number_of_controllers_kept_is_bounded() -> None:
    st = ReplicasState()
    for i in range(MAX_CONTROLLERS):
        assert st.apply(LeaderEvent(f"n{i}", "127.0.0.1:1")) is ApplyOutcome.APPLIED
    assert st.apply(LeaderEvent("extra", "127.0.0.1:1")) is ApplyOutcome.REFUSED
    assert st.apply(LeaderEvent("n0", "127.0.0.1:2")) is ApplyOutcome.APPLIED
    assert len(st.controllers) == MAX_CONTROLLERS
