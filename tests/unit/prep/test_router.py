"""Hook messages routed to their cluster's fast path; clusters come and go."""

import pytest

from ccadapter.prep.messages import BadMessage, HookEvent, HookMessage
from ccadapter.prep.router import HookRouter


class FastPathStub:
    def __init__(self):
        self.got, self.started, self.stopped = [], 0, 0

    def start(self):
        self.started += 1
        return self

    def stop(self):
        self.stopped += 1

    def submit(self, msg):
        self.got.append(msg.job_id)


def test_each_message_goes_to_its_clusters_fast_path():
    a, b = FastPathStub(), FastPathStub()
    router = HookRouter()
    router.add("a", a)
    router.add("b", b)
    router.start()
    for job, cluster in ((1, "a"), (2, "b"), (3, "a")):
        router.submit(HookMessage(job, HookEvent.START, None, cluster))
    assert (a.got, b.got) == ([1, 3], [2])
    assert (a.started, b.started) == (1, 1)
    router.stop()
    assert (a.stopped, b.stopped) == (1, 1)


def test_a_cluster_not_served_is_refused_naming_the_served_ones():
    router = HookRouter()
    router.add("a", FastPathStub())
    with pytest.raises(BadMessage, match=r"cluster 'x' is not ours \('a'\)"):
        router.submit(HookMessage(1, HookEvent.START, None, "x"))
    with pytest.raises(BadMessage, match="not ours"):
        HookRouter().submit(HookMessage(1, HookEvent.START, None, "a"))


def test_clusters_added_and_removed_while_it_runs():
    router = HookRouter().start()
    late = FastPathStub()
    router.add("late", late)  # a cluster `sacctmgr list clusters` names from now on
    assert late.started == 1 and router.clusters() == ["late"]
    router.submit(HookMessage(5, HookEvent.END, None, "late"))
    router.remove("late")  # deleted from slurmdbd: its fast path stops
    assert late.stopped == 1 and late.got == [5]
    with pytest.raises(BadMessage):
        router.submit(HookMessage(6, HookEvent.END, None, "late"))
    added_before_start = FastPathStub()
    idle = HookRouter()
    idle.add("a", added_before_start)
    assert added_before_start.started == 0  # started with the router, not before
