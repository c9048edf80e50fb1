"""The running daemon: the loop (:mod:`~ccadapter.daemon.loop`), what it is built of and how
(:mod:`~ccadapter.daemon.app`, :mod:`~ccadapter.daemon.build`), a sync per served cluster, the
failover role, the delivery pool, the metrics and the cost of a cycle."""
