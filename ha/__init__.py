"""Classic RocketMQ 4.x master/slave replication.

Modules
- ``ha.protocol``: sans-IO framing (8-byte slave offset reports; master frames of
  ``[phyOffset i64][size i32][CommitLog bytes]``, size 0 = heartbeat).
- ``ha.master``: pure ack table (push2SlaveMaxOffset, in-sync by haSlaveFallbehindMax) and the
  SYNC_MASTER decision; what waits for an ack waits on ``HAService.ack_watermark`` (the store's
  one waiting primitive, ``store/watermark.py``).
- ``ha.service``: ``HAService`` - the broker-facing object; listens on haListenPort and runs
  one ``HAConnection`` (read side + write side) per slave; on a SLAVE store it also runs the
  ``HAClient``.
- ``ha.client``: ``HAClient`` - the slave side (connect, report, append_raw, reconnect, re-point).
- ``ha.config``: ``HAConfig`` - haListenPort, haMasterAddress, haSendHeartbeatInterval,
  haHousekeepingInterval, haTransferBatchSize, haSlaveFallbehindMax, slaveTimeout.
- ``ha.net``: ``HASocket`` and listen/connect, on the nodes' one socket layer
  (``cluster/remoting/sockets.py``) with HA's settings (256 KiB reads, 1 MiB kernel buffers,
  a checkpoint after a read that did not wait).
- ``ha.access``: who may use the HA port (our extension; RocketMQ 4.x lets anyone connect and
  take any report as an ack): ``haAllowedSlaveAddresses`` (default: loopback peers for a
  loopback-bound broker, else the group's slave hosts from the NameServers), and with
  ``aclEnable=true`` a challenge the slave answers with an HMAC of the shared aclSecretKey
  (an ACL-on HA port therefore does not serve a Java slave; ACL-off HA is RocketMQ's).
  Acks are checked against what was shipped on that connection: a report past it closes the
  connection, and only bytes actually shipped release SYNC puts.

Broker integration (everything goes through one ``HAService`` per broker)::

    ha_cfg = load_config(HAConfig, props, ha_listen_port=bcfg.ha_port).config
    ha = HAService(store, ha_cfg, host=bcfg.bind_address)   # after MessageStore.open
    ha_port = await nursery.start(ha.run)    # next to store_services.run; on a SYNC_MASTER it
                                             # attaches itself: store.attach_replicas(ha)
    ...
    ha.update_master_address(result.ha_server_addr)  # after each REGISTER_BROKER (slaves only;
                                                     # a configured haMasterAddress wins)
    ha.runtime_info()   # dict[str, str] for GET_BROKER_RUNTIME_INFO's KVTable
    ha.status()         # typed HAStatus (per slave: address, ack, diff, in-sync, bytes/s)
    # shutdown: cancel the scope running ha.run (with the store services), then store.close()
"""
