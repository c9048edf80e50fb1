"""The daemon's stop, as a flag a signal handler may set and any thread may read.

SIGTERM must stop a daemon within seconds, also while a routine runs for minutes (a catch-up
of days, a slurmdbd that answers slowly): systemd kills it ``TimeoutStopSec`` later. The
handler runs in the main thread between two bytecodes, perhaps while that thread holds a lock
it would need, so it only stores a flag (no lock, no Event); the loop, the reconcilers
between their batches and the Slurm commands while they wait read it, and end what they do:
what a stop cuts short is repeated at the next start (lastRun moves only after a slice's
events are stored).
"""

from __future__ import annotations


class StopFlag:
    def __init__(self) -> None:
        self.asked = False

    def set(self) -> None:
        """Safe from a signal handler: a plain store."""
        self.asked = True

    def __call__(self) -> bool:
        return self.asked
