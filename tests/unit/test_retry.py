"""The one retry rule and the policies made from the config."""

from __future__ import annotations

import pytest
from tenacity import RetryError, retry_if_result

from ccadapter.config.keys import Config
from ccadapter.retry import RetryPolicies, RetryPolicy


def test_delays_grow_from_the_base_and_are_capped():
    p = RetryPolicy(base=1, cap=300)
    assert [p.delay(n, rng=lambda: 1.0) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert p.delay(50, rng=lambda: 0.0) == 150  # jitter: between half and all of the cap
    assert p.delay(50, rng=lambda: 1.0) == 300
    assert p.delay(10**6, rng=lambda: 1.0) == 300  # no overflow however many retries


def test_exhausted_after_the_attempts_or_never():
    assert not RetryPolicy(attempts=3).exhausted(2) and RetryPolicy(attempts=3).exhausted(3)
    assert not RetryPolicy(attempts=0).exhausted(10**9)


def test_retrying_stops_after_the_attempts_and_waits_the_policy():
    slept: list[float] = []
    tries = []
    loop = RetryPolicy(0.01, 0.02, 3).retrying(retry=retry_if_result(lambda r: r is None),
                                                sleep=slept.append)

    def fails():
        tries.append(1)

    with pytest.raises(RetryError):
        loop(fails)
    assert len(tries) == 3 and len(slept) == 2
    assert 0.005 <= slept[0] <= 0.01 and 0.01 <= slept[1] <= 0.02


def test_policies_from_config_take_the_fast_paths_keys():
    c = Config(slurmMaxRetries=4, slurmQueryDelay=3)
    p = RetryPolicies.from_config(c)
    assert p.fast_path == RetryPolicy(0.05, 3, 4)
    assert p.slurm == RetryPolicies().slurm and p.outbox.attempts == 0  # events: until sent
    assert RetryPolicies.from_config(Config(slurmMaxRetries=0)).fast_path.attempts == 1
