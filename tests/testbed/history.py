"""A production-sized job history for clusterscale's slurmdbd (the scale benchmark).

A site's slurmdbd holds every job its cluster ever ran: hundreds of thousands to millions of
rows in ``<cluster>_job_table``. Some sacct questions cost what that history costs, not what
the window holds (``sacct -s SUSPENDED`` makes slurmdbd scan every row, see
``ccadapter.slurm.formats.listing.RAN``), so a benchmark on a test bed with a few thousand rows
would hide them. Running hundreds of thousands of real jobs takes the test bed hours, so the
history is grown from the cluster's own real rows: each round copies every row, with job
ids above any the test bed reaches, dated ``SHIFT`` seconds before the oldest row, and ended
(a pending copy was cancelled before it started, a running copy ran ten minutes). The copies
lie before any window a benchmark reads and before slurmdbd's rollups of them, so they change
what queries scan, not what they answer.

Runs as root against the test bed's MariaDB (socket, root), from the repository root::

    python3 -m tests.testbed.history --rows 500000     # grow clusterscale's to 500,000 rows
"""

from __future__ import annotations

import argparse
import subprocess
import sys

DATABASE = "slurm_acct_cluster22"  # cluster22's slurmdbd, which clusterscale shares
SHIFT = 86400  # each copy round dates its copies a day before the oldest row
# Copies' job ids start above this, beyond any id the test bed's own jobs reach, so
# that `sacct -j ID` of a real job never finds a copy (ids stay under Slurm's
# MaxJobId, 67,043,328, for half a million rows).
FIRST_COPY_ID = 1_000_000


def _sql(statement: str, database: str = DATABASE) -> str:
    done = subprocess.run(["mariadb", "--protocol=socket", "-uroot", "-N", "-B", database,
                           "-e", statement], capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"mariadb: {done.stderr.strip()}")
    return done.stdout


def rows(cluster: str = "clusterscale") -> int:
    """How many job records slurmdbd holds for the cluster."""
    return int(_sql(f"select count(*) from `{cluster}_job_table`").strip())


def grow(target: int, cluster: str = "clusterscale") -> int:
    """Copy the cluster's job rows back in time until there are at least ``target``; the
    count then. A round doubles the table; the last round copies only what is missing."""
    table = f"`{cluster}_job_table`"
    have = rows(cluster)
    if have == 0:
        raise RuntimeError(f"{cluster} has no job record to copy: run a job first")
    while have < target:
        take = min(have, target - have)
        _sql(f"""
            set @jobs = (select greatest(max(id_job), {FIRST_COPY_ID}) from {table});
            set @inx = (select max(job_db_inx) from {table});
            set @back = (select {SHIFT} + unix_timestamp() - min(time_submit) from {table});
            create temporary table copies select * from {table} order by job_db_inx limit {take};
            update copies set job_db_inx = job_db_inx + @inx, id_job = id_job + @jobs,
                time_submit = time_submit - @back,
                time_eligible = if(time_eligible, time_eligible - @back, 0),
                time_end = if(time_end, time_end - @back,
                              if(time_start, time_start - @back + 600, time_submit - @back + 60)),
                time_start = if(time_start, time_start - @back, 0),
                state = case when state in (0, 1, 2) and time_start then 3
                             when state in (0, 1, 2) then 4 else state end,
                id_array_job = if(id_array_job, id_array_job + @jobs, 0),
                het_job_id = if(het_job_id, het_job_id + @jobs, 0);
            insert into {table} select * from copies;
            drop temporary table copies;""")
        have = rows(cluster)
    return have


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.testbed.history", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--cluster", default="clusterscale")
    args = p.parse_args(argv)
    print(grow(args.rows, args.cluster))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def spread(count: int, span: float, database: str, cluster: str) -> int:
    """``count`` ended runs copied from the cluster's newest ended real row, their ends spread
    evenly over the ``span`` seconds before the last ten minutes: a site's history of those
    days, for a first window that catches up on it. The copies of an earlier call go first.
    Returns the rows the table holds then."""
    table = f"`{cluster}_job_table`"
    sql = f"""
        delete from {table} where id_job >= {FIRST_COPY_ID};
        set @template = (select job_db_inx from {table} where time_end > 0 and time_start > 0
                         and nodes_alloc > 0 order by time_end desc limit 1);
        set @jobs = (select greatest(max(id_job), {FIRST_COPY_ID}) from {table});
        set @inx = (select max(job_db_inx) from {table});
        set @until = unix_timestamp() - 600;
        create temporary table copies select * from {table} where job_db_inx = @template;
        create temporary table n (k int primary key);
        insert into n select seq from seq_1_to_{count};
        create temporary table made select c.*, n.k from copies c join n;
        update made set job_db_inx = @inx + k, id_job = @jobs + k,
            time_end = @until - floor({span} * (k - 1) / {count}),
            time_start = @until - floor({span} * (k - 1) / {count}) - 60,
            time_eligible = @until - floor({span} * (k - 1) / {count}) - 70,
            time_submit = @until - floor({span} * (k - 1) / {count}) - 70,
            id_array_job = 0, het_job_id = 0, mod_time = unix_timestamp();
        alter table made drop column k;
        insert into {table} select * from made;
        drop temporary table made; drop temporary table copies; drop temporary table n;"""
    _sql(sql, database)
    return int(_sql(f"select count(*) from {table}", database).strip())
