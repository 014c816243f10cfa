"""The NameServer: route registry of a RocketMQ 4.x cluster.

* ``route_info.RouteInfoManager`` - the route tables as pure state (time passed in);
* ``processor.process`` - every 4.x NameServer request code, request in, ``Reply`` out;
* ``kv_config`` - the KV config table and its ``kvConfig.json`` file;
* ``config.NamesrvConfig`` - RocketMQ's namesrv property keys;
* ``server.serve`` / ``server.NamesrvServer`` - the Trio node; ``mqnamesrv`` runs one.
"""
