"""``rmq-cluster``: the command line, on top of every other package.

It imports the parts' commands (``deploy``, ``client``, ``chaos``, ``spark_jobs``) and wires them
into one parser (``main.py``); nothing imports it back. ``python -m rmq_cluster.cli`` is the same
as ``rmq-cluster``.
"""
