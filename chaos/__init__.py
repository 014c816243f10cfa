"""Chaos testing: faults under load and a checker over the recorded history.

``proxy`` (the fault-injecting TCP proxy), ``cluster`` (a cluster behind the proxies),
``faults`` (kill-master, minor-kill, random-kill, restart, suspend, partition, slow-network),
``nemesis`` (the seeded schedule), ``workload`` (producers/consumer writing the JSONL history),
``checker`` (pure: lost, duplicated, order, unknown, unavailability, verdict), ``runner`` and
``cli`` (``rmq-cluster chaos run | check``).
"""
