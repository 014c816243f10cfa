"""The Broker node (``BrokerController`` in RocketMQ): store, processors, clients, registration.

Embedding::

    from rmq_cluster.broker.config import load_broker_config
    from rmq_cluster.broker.server import serve
    settings = load_broker_config({"brokerName": "broker-a", "listenPort": "0", ...}).settings
    host, port = await nursery.start(serve, settings)

Process: ``mqbroker -c broker-a.properties -n "127.0.0.1:9876;127.0.0.1:9877"``.

Layout: ``config.py`` (BrokerConfig + MessageStoreConfig from one broker.conf), pure managers
(``topic_config.py``, ``offsets.py``, ``clients.py``, ``schedule.py``, ``transaction.py``),
``processors/`` (send, pull, consumer/client management and queries, admin, end transaction),
``long_polling.py`` (parked pulls), ``controller.py`` (the Trio shell composing everything),
``server.py`` / ``__main__.py`` (entry points).
"""
