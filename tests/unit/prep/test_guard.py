"""What ids slurmctld does not know may cost: asked once, and a flood asked at a rate."""

from ccadapter.prep.guard import GuardSettings, JobIdGuard
from ccadapter.prep.messages import DropReason


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guard(**settings) -> tuple[JobIdGuard, Clock]:
    clock = Clock()
    return JobIdGuard(GuardSettings(**settings), clock), clock


def test_an_id_slurmctld_did_not_show_is_not_asked_again_until_its_memory_ends():
    g, clock = guard(ttl=600)
    assert g.refuse(7) is None
    g.answered(shown=[9], missing=[7])
    assert g.refuse(7) is DropReason.UNKNOWN_JOB
    assert g.refuse(9) is None and g.refuse(8) is None  # shown, never asked: asked
    clock.now += 601
    assert g.refuse(7) is None  # forgotten: slurmctld may hold it by now


def test_genuine_traffic_is_never_refused():
    """Only ids slurmctld did not show spend the budget: a burst of real jobs costs nothing."""
    g, _ = guard(burst=5)
    for job_id in range(1, 10_001):
        assert g.refuse(job_id) is None
        g.answered(shown=[job_id], missing=[])
    assert not g.flooding


def test_a_flood_keeps_ids_unlike_slurmctlds_out_and_lets_genuine_ones_in():
    g, clock = guard(burst=10, rate=2, near=1000)
    g.answered(shown=[50_000], missing=[])
    g.answered(shown=[], missing=list(range(900_000, 900_011)))  # 11 unknown: spent
    assert g.flooding
    assert g.refuse(123_456_789) is DropReason.FLOOD  # far from 50,000
    assert g.refuse(50_001) is None  # a new job's id: asked
    assert g.refuse(49_500) is None  # a job queued for a while: asked
    clock.now += 1  # 2 more in the budget: not spent any more
    assert not g.flooding and g.refuse(123_456_789) is None


def test_a_flood_that_imitates_real_ids_stops_every_question_for_a_while():
    g, clock = guard(burst=10, rate=2, near=1000)
    g.answered(shown=[50_000], missing=[])
    g.answered(shown=[], missing=list(range(50_100, 50_200)))  # 100 unknown, near the real
    assert g.refuse(50_001) is DropReason.FLOOD  # spent twice over: none asked
    clock.now += 5.5  # floor -20, +11: -9 now, spent once: ids near slurmctld's asked again
    assert g.refuse(50_001) is None and g.refuse(9_000_000) is DropReason.FLOOD
    clock.now += 4.5
    assert g.refuse(9_000_000) is None  # refilled


def test_ids_above_the_newest_slurmctld_showed_are_not_remembered():
    """Issue 36, item 2: announcing the next ids made their real prologs drop as
    unknown_job for an hour. An id above the newest shown may be a job to come: asked each
    time (its sender's share pays), never remembered; one below it is."""
    g, _ = guard()
    g.answered(shown=[500], missing=[501, 502, 499])
    assert g.refuse(501) is None and g.refuse(502) is None  # the next jobs keep the fast path
    assert g.refuse(499) is DropReason.UNKNOWN_JOB
    g2, _ = guard()
    g2.answered(shown=[], missing=[77])  # nothing shown yet: no newest to compare with
    assert g2.refuse(77) is None


def test_memory_is_bounded():
    g, _ = guard(memory=100)
    g.answered(shown=[5000], missing=list(range(1, 1001)))
    assert len(g._unknown) == 100
    assert g.refuse(1000) is DropReason.UNKNOWN_JOB  # the newest are kept
    assert g.refuse(1) is not DropReason.UNKNOWN_JOB
