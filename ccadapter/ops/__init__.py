"""Operator tasks beside the daemon: filling a past range (:mod:`.backfill`), a clean start
after a crash (:mod:`.recover`), the state read from files (:mod:`.status`) and the start-up
checks that warn of a quietly wrong setup (:mod:`.checks`)."""
