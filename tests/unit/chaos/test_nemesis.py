"""The nemesis schedule: a seed reproduces it, windows alternate and stay in the duration."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.chaos.faults import FAULTS, make_fault
from rmq_cluster.chaos.nemesis import MIN_WINDOW_S, Window, build_schedule


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    a = build_schedule(7, 120, on_s=10, off_s=10)
    b = build_schedule(7, 120, on_s=10, off_s=10)
    c = build_schedule(8, 120, on_s=10, off_s=10)
    assert a == b and a.to_json() == b.to_json()
    assert a.windows != c.windows


@given(
    seed=st.integers(min_value=0, max_value=2**32),
    duration=st.floats(min_value=1, max_value=3600),
    on=st.floats(min_value=MIN_WINDOW_S, max_value=60),
    off=st.floats(min_value=0, max_value=60),
    jitter=st.floats(min_value=0, max_value=0.9),
)
def test_windows_are_ordered_disjoint_and_inside_the_duration(
    seed: int, duration: float, on: float, off: float, jitter: float
) -> None:
    s = build_schedule(seed, duration, on_s=on, off_s=off, jitter=jitter)
    last_end = 0.0
    for w in s.windows:
        assert last_end <= w.start_s < w.end_s <= duration
        assert w.length_s >= MIN_WINDOW_S
        assert w.length_s <= on * (1 + jitter) + 1e-9
        assert 0 <= w.pick < 1
        last_end = w.end_s


def test_window_choice_is_by_pick_over_sorted_candidates() -> None:
    w = Window(0, 1, pick=0.99)
    assert w.choose(["b", "a", "c"]) == "c"
    assert Window(0, 1, pick=0.0).choose(["b", "a"]) == "a"
    with pytest.raises(ValueError):
        w.choose([])


def test_bad_schedule_arguments() -> None:
    with pytest.raises(ValueError):
        build_schedule(1, 0)
    with pytest.raises(ValueError):
        build_schedule(1, 10, on_s=0.1)
    with pytest.raises(ValueError):
        build_schedule(1, 10, jitter=1.5)


def test_every_fault_name_makes_a_fault() -> None:
    for name in FAULTS:
        assert make_fault(name).name == name
    with pytest.raises(ValueError, match="unknown fault"):
        make_fault("meteor")
