"""argparse ``type=`` checkers the command lines share (``deploy``, ``client``): a bad value is a
usage error (exit 2) with a one-line reason, before anything runs."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def non_negative(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def positive(text: str) -> int:
    """A whole number >= 1."""
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def at_most(limit: int) -> Callable[[str], int]:
    """A whole number in 0..``limit``."""
    def parse(text: str) -> int:
        value = non_negative(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"at most {limit}, not {value}")
        return value
    return parse


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value
