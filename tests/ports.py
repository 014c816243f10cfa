"""Ports for nodes a test starts by itself (not through a deploy plan, whose ports come from
``free_base_port``): picked at random in this worker's slice of the test range
(``ports_for_tests()``, see tests/conftest.py), and free when checked. Not the kernel's
``bind(0)``: that hands out a port of the ephemeral range, where any outgoing connection on
the machine, another worker's included, may take it between the check and the node's bind
(seconds, for a JVM on loaded cores).

The rule is for ports picked now and bound later by someone else: a node, a child process, a
server the test starts. A socket the test binds and keeps itself until it is done with it (a
listener it serves or holds busy, a client's source address) may bind port 0: the port is the
test's from that bind on, and nothing can take it in between. bench/_launch.py gives the
benchmarks' nodes their ports from here too."""

from __future__ import annotations

import random
import socket

from rmq_cluster.deploy.supervisor import ports_for_tests

#: Random picks tried before giving up (a slice holds thousands of ports).
ATTEMPTS = 500


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, neighbours: tuple[int, ...] = (), taken: set[int] | None = None) -> int:
    """A port free now whose ``port + d`` for each ``d`` in ``neighbours`` is free too
    (RocketMQ's broker also binds its fast port, -2, and its HA port, +1), none of them in
    ``taken``; with ``taken`` given, the group is added to it."""
    low, high = ports_for_tests()
    reach = max((abs(d) for d in neighbours), default=0)
    rng = random.Random()
    for _ in range(ATTEMPTS):
        port = rng.randrange(low + reach, high - reach)
        group = {port, *(port + d for d in neighbours)}
        if taken is not None and group & taken:
            continue
        if all(bindable(p) for p in group):
            if taken is not None:
                taken.update(group)
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports, each free now."""
    taken: set[int] = set()
    return [free_port(taken=taken) for _ in range(count)]
