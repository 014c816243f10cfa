"""The nemesis schedule (pure): when each fault goes on and off, from a seed.

openmessaging-chaos alternates "wait, inject, wait, recover" (30 s each by default). Here a
``Schedule`` is a list of windows ``[start_s, end_s)`` relative to the start of the fault
phase: quiet for ``off_s``, faulty for ``on_s``, repeated until ``duration_s``; each length is
jittered by up to ``jitter`` (a fraction) from a ``random.Random(seed)``, and each window
carries a ``pick`` in [0, 1) that the runner uses to choose the fault's target among the live
candidates (sorted by name), so one seed reproduces the whole run's choices.
"""

from __future__ import annotations

import random
from typing import Any, Final

import attrs

DEFAULT_ON_S: Final = 10.0
DEFAULT_OFF_S: Final = 10.0
DEFAULT_JITTER: Final = 0.2
#: A window shorter than this is not scheduled (the tail of the duration stays quiet).
MIN_WINDOW_S: Final = 1.0


@attrs.frozen
class Window:
    start_s: float
    end_s: float
    pick: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    def choose(self, candidates: list[str]) -> str:
        """The target among ``candidates`` (sorted first: same set -> same choice)."""
        if not candidates:
            raise ValueError("no candidate for the fault")
        ordered = sorted(candidates)
        return ordered[min(int(self.pick * len(ordered)), len(ordered) - 1)]

    def to_json(self) -> dict[str, Any]:
        return {"start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3),
                "pick": round(self.pick, 6)}


@attrs.frozen
class Schedule:
    seed: int
    duration_s: float
    on_s: float
    off_s: float
    windows: tuple[Window, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "on_s": self.on_s,
            "off_s": self.off_s,
            "windows": [w.to_json() for w in self.windows],
        }


def build_schedule(
    seed: int,
    duration_s: float,
    *,
    on_s: float = DEFAULT_ON_S,
    off_s: float = DEFAULT_OFF_S,
    jitter: float = DEFAULT_JITTER,
) -> Schedule:
    """Fault windows over ``duration_s``: off, on, off, on, ... (the last one ends by the
    duration). Same arguments, same schedule."""
    if duration_s <= 0:
        raise ValueError("duration must be positive")
    if on_s < MIN_WINDOW_S or off_s < 0:
        raise ValueError(f"on_s must be >= {MIN_WINDOW_S} and off_s >= 0")
    if not 0 <= jitter < 1:
        raise ValueError("jitter must be in [0, 1)")
    rng = random.Random(seed)
    windows: list[Window] = []
    t = 0.0
    while True:
        t += off_s * (1 + rng.uniform(-jitter, jitter))
        length = on_s * (1 + rng.uniform(-jitter, jitter))
        pick = rng.random()
        end = min(t + length, duration_s)
        if end - t < MIN_WINDOW_S:
            break
        windows.append(Window(start_s=t, end_s=end, pick=pick))
        t = end
    return Schedule(seed=seed, duration_s=duration_s, on_s=on_s, off_s=off_s,
                    windows=tuple(windows))
