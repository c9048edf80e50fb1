"""The fast path asks one part at a time while slurmctld answers slowly (issue 47)."""

import logging

from ccadapter.prep.pace import Pace
from ccadapter.slurm.controller import RouteCosts


def test_a_slow_slurmctld_is_asked_one_part_at_a_time_and_said_once_each_way(caplog):
    costs = RouteCosts()
    heard = []
    pace = Pace(costs, 3, "fast path", slow=0.05, on_change=heard.append)
    assert pace.usable(3) == 3 and pace.usable(2) == 2  # 5 ms a question: every slot
    costs.saw_singles(10, 10 * 0.4)  # slurmctld took 400 ms a question
    with caplog.at_level(logging.INFO):
        assert pace.usable(3) == 1 and pace.usable(2) == 0  # one part, none beside it
        assert pace.usable(3) == 1
        costs.per_job = 0.03  # below the threshold, not yet below half of it
        assert pace.usable(3) == 1
        costs.per_job = 0.02
        assert pace.usable(3) == 3
    assert heard == [True, False]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "answers slowly" in said[0] and "ms per job question" in said[0]
    assert "3 parts at once" in said[1]
