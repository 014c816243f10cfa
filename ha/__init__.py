"""Classic RocketMQ 4.x master/slave replication (issue 7).

Modules
- ``ha.protocol``: sans-IO framing (8-byte slave offset reports; master frames of
  ``[phyOffset i64][size i32][CommitLog bytes]``, size 0 = heartbeat).
- ``ha.master``: pure ack table (push2SlaveMaxOffset, in-sync by haSlaveFallbehindMax), the
  SYNC_MASTER decision, and ``GroupTransfer`` (wait groups released together per ack).
- ``ha.connection``: ``HAService`` - the broker-facing object; listens on haListenPort and runs
  one ``HAConnection`` (read side + write side) per slave; on a SLAVE store it also runs the
  ``HAClient``.
- ``ha.client``: ``HAClient`` - the slave side (connect, report, append_raw, reconnect, re-point).
- ``ha.config``: ``HAConfig`` - haListenPort, haMasterAddress, haSendHeartbeatInterval,
  haHousekeepingInterval, haTransferBatchSize, haSlaveFallbehindMax, syncFlushTimeout.
- ``ha.net``: the raw non-blocking socket helpers both sides use.

Broker integration (everything goes through one ``HAService`` per broker)::

    ha_cfg = load_config(HAConfig, props, ha_listen_port=bcfg.ha_port).config
    ha = HAService(store, ha_cfg, host=bcfg.bind_address)   # after MessageStore.open
    ha_port = await nursery.start(ha.run)    # next to store_services.run; on a SYNC_MASTER it
                                             # sets store.replica_waiter = ha.replica_waiter
    ...
    ha.update_master_address(result.ha_server_addr)  # after each REGISTER_BROKER (slaves only;
                                                     # a configured haMasterAddress wins)
    ha.runtime_info()   # dict[str, str] for GET_BROKER_RUNTIME_INFO's KVTable
    ha.status()         # typed HAStatus (per slave: address, ack, diff, in-sync, bytes/s)
    # shutdown: cancel the scope running ha.run (with the store services), then store.close()
"""
