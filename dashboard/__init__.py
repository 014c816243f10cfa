"""``rmq-cluster dashboard``: a web dashboard for RocketMQ clusters without a JVM.

Starlette served by Hypercorn's Trio worker, in the same Trio loop as the admin client it uses:
every figure and action goes through the admin protocol (``rmq_cluster.client.admin``), so it
works against Apache's nodes as well as ours. Server-rendered HTML, a little vanilla JS, live
figures over server-sent events.
"""
