"""The controller of controller mode (RocketMQ 5.x RIP-44): a Raft-replicated table of broker
groups (replicas, master, master epoch, SyncStateSet) that elects masters for master/slave
groups.  ``state.py`` is the pure state machine, ``node.py`` the Trio shell, ``__main__`` the
``mqcontroller`` process."""
