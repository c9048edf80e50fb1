"""The one retry rule of ccadapter: exponential delays, capped, jittered.

Four things retry: a Slurm command that failed transiently, an HTTP request cc-backend
answered 5xx, an event the outbox could not deliver, a job the fast path does not see in
slurmctld yet; a fifth, NATS, reconnects when our side (creds, TLS) was refused. They wait
on very different scales (50 ms for the fast path, minutes for an outbox event), so each
gets its own :class:`RetryPolicy`, but all delays follow :meth:`RetryPolicy.delay` and all
policies are made in one place, :meth:`RetryPolicies.from_config`.

The jitter draws between half and all of the ceiling: retries of many events after an
outage spread out (no herd), yet none comes much sooner than the policy says.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, stop_after_attempt, stop_never

if TYPE_CHECKING:
    from ccadapter.config.keys import Config


@dataclass(frozen=True)
class RetryPolicy:
    """Delays of ``base * 2**n``, at most ``cap`` seconds; ``attempts`` tries in all (the
    first included), 0 for no limit."""

    base: float = 1.0
    cap: float = 300.0
    attempts: int = 0

    def delay(self, retries: int, rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait after ``retries`` failed tries (1 after the first failure)."""
        ceiling = min(self.cap, self.base * 2 ** min(max(retries - 1, 0), 30))
        return ceiling / 2 + rng() * ceiling / 2

    def exhausted(self, tries: int) -> bool:
        """Whether ``tries`` tries used up the policy."""
        return self.attempts > 0 and tries >= self.attempts

    def retrying(self, **kwargs: Any) -> Retrying:
        """A tenacity loop with this policy's stop and wait (``retry=``, ``reraise=`` and
        callbacks given by the caller)."""
        return Retrying(
            stop=stop_after_attempt(self.attempts) if self.attempts else stop_never,
            wait=lambda state: self.delay(state.attempt_number), **kwargs)


@dataclass(frozen=True)
class RetryPolicies:
    """Every retry of the daemon and the one-shot commands."""

    # a Slurm command failing transiently (slurmctld restarting), within one cycle
    slurm: RetryPolicy = field(default_factory=lambda: RetryPolicy(0.5, 5.0, 3))
    # cc-backend answering 5xx: a few quick tries before the outbox takes the event over
    http: RetryPolicy = field(default_factory=lambda: RetryPolicy(0.2, 2.0, 3))
    # an event not delivered: again and again, up to five minutes apart, until it is
    outbox: RetryPolicy = field(default_factory=lambda: RetryPolicy(1.0, 300.0))
    # a job the hook announced that slurmctld does not show (yet) as running or ended
    fast_path: RetryPolicy = field(default_factory=lambda: RetryPolicy(0.05, 1.0, 10))
    # NATS refused our side of the connection (creds, TLS): maybe the admin fixes it
    nats_connect: RetryPolicy = field(default_factory=lambda: RetryPolicy(5.0, 60.0))

    @classmethod
    def from_config(cls, config: Config) -> RetryPolicies:
        """The defaults, with the fast path's tries and longest delay from the config
        (``slurmMaxRetries``, ``slurmQueryDelay``)."""
        return cls(fast_path=RetryPolicy(0.05, config.slurm_query_delay,
                                         max(1, config.slurm_max_retries)))
