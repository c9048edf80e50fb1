"""Value decoders the generations share: numbers and strings as each generation writes them
(plain or ``{"set", "number"}``), host lists, TRES counts, id ranges and GRES, durations, and
the parts of an sacct record every generation reads alike. For the version modules and the
text parsers of this package only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import hostlist

from ccadapter.model import Shared, valid_cluster_name
from ccadapter.slurm.formats.records import ParseContext, SacctRecord

# --- value decoders ------------------------------------------------------------------------


def number(value: Any, where: str, ctx: ParseContext) -> int | None:
    """Plain int (22.05) or ``{"set","infinite","number"}`` (23.02+); None = unset/infinite."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ctx.error(f"{where}: expected a number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        if value.get("infinite") or not value.get("set", False):
            return None
        num = value.get("number")
        if isinstance(num, int) and not isinstance(num, bool):
            return num
    raise ctx.error(f"{where}: expected a number, got {value!r}")


def text(value: Any, where: str, ctx: ParseContext) -> str:
    """Plain string, or a list of strings (24.11 wraps some strings in lists)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value[0] if value else ""
    raise ctx.error(f"{where}: expected a string, got {value!r}")


def mapping(value: Any, where: str, ctx: ParseContext) -> Mapping[str, Any]:
    """An object, or ``{}`` for null/absent; anything else is an error naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ctx.error(f"{where}: expected an object, got {value!r:.80}")
    return value


def decimal(text: str) -> int | None:
    """ASCII decimal digits (at most 19, a 64-bit value) -> int; None for anything else.
    ``str.isdigit`` alone lets through "²" (``int`` raises) and "١٢" (``int`` reads 12),
    and ``int`` raises past 4,300 digits: none of these is a Slurm number."""
    if text.isascii() and text.isdigit() and len(text) <= 19:
        return int(text)
    return None


def field(record: Mapping[str, Any], path: str, ctx: ParseContext) -> Any:
    """``record["a"]["b"]`` for ``path="a.b"``, naming the path when it is missing."""
    cur: Any = record
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            raise ctx.error(f"missing field {path!r}")
        cur = cur[part]
    return cur


def expand_hostlist(expr: str, ctx: ParseContext) -> tuple[str, ...]:
    """``"n[1-2],e1"`` -> hosts; sacct says ``"None assigned"`` for never-started jobs."""
    expr = expr.strip()
    if not expr or expr.lower() in ("none assigned", "(null)", "none"):
        return ()
    try:
        return _expand(expr)
    except hostlist.BadHostlist as exc:
        raise ctx.error(f"bad hostlist {expr!r}: {exc}") from None


@lru_cache(maxsize=4096)
def _expand(expr: str) -> tuple[str, ...]:
    # Many jobs of a window share a node list; expanding each distinct one once is enough.
    return tuple(hostlist.expand_hostlist(expr))


def tres_count(entries: Any, kind: str, name: str | None, ctx: ParseContext) -> int | None:
    """Count of a TRES (``cpu``, ``gres``/``gpu``) in sacct's ``tres.allocated`` list."""
    if not isinstance(entries, list):
        raise ctx.error(f"tres list expected, got {type(entries).__name__}")
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise ctx.error(f"tres entry expected, got {entry!r}")
        if entry.get("type") == kind and (name is None or entry.get("name") == name):
            count = entry.get("count")
            if isinstance(count, str):
                return decimal(count)
            if count is None or isinstance(count, bool) or not isinstance(count, int):
                return None
            return max(count, 0)
    return None


def consumed_energy(entries: Any, ctx: ParseContext) -> int | None:
    """Joules the run consumed: the ``energy`` TRES of the job record's ``tres.allocated``.

    slurmctld adds each finished step's consumed energy to the job's allocated ``energy``
    TRES, which starts as NO_VAL64 (``job_set_alloc_tres`` in src/slurmctld/job_mgr.c,
    ``_internal_step_complete`` in src/slurmctld/step_mgr.c, src/stepmgr/stepmgr.c from 24.11
    on), and sends it to slurmdbd with the job's allocated TRES; sacct prints exactly this
    number as the job line's ConsumedEnergy (``print_fields`` in src/sacct/print.c). So the
    job record of ``sacct -X`` carries it: no step needs reading. Unset is NO_VAL64, written
    ``null`` by 22.05 and ``-2`` (the same bits as int64) by 24.11+; either, a missing entry,
    and 0 (a plugin that measured nothing, which cc-backend would show as a job that used no
    energy) give None. A count that is not
    an integer is a format we do not know: an error."""
    if not isinstance(entries, list):
        raise ctx.error(f"tres list expected, got {type(entries).__name__}")
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("type") != "energy":
            continue
        count = entry.get("count")
        if count is None:
            return None
        if isinstance(count, bool) or not isinstance(count, int):
            raise ctx.error(f"tres.allocated energy: expected an integer count, got "
                            f"{count!r:.40}")
        return count if count > 0 else None
    return None


# --- id lists and GRES ---------------------------------------------------------------------


def int_ranges(spec: str) -> tuple[int, ...]:
    """``"0-2,5"`` -> (0, 1, 2, 5). Raises ValueError on anything else."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        first = int(lo)
        last = int(hi) if sep else first
        if last < first or last - first > 1_000_000:
            raise ValueError(f"bad range {part!r}")
        out.extend(range(first, last + 1))
    return tuple(out)


# gpu:tesla:1(IDX:0)  gpu:1(IDX:0-1)  gpu:a100:2(IDX:0,2)  -- IDX may be N/A
_GRES = re.compile(r"(?P<name>[\w.-]+)(?::(?P<type>[^:(),]+))?(?::(?P<count>\d+))?"
                   r"\(IDX:(?P<idx>[^)]*)\)")


def gpu_indices(gres: str) -> tuple[int, ...]:
    """GPU indices of one node's GRES string; other GRES kinds are ignored."""
    out: list[int] = []
    for m in _GRES.finditer(gres):
        if m["name"] != "gpu" or m["idx"] in ("", "N/A"):
            continue
        out.extend(int_ranges(m["idx"]))
    return tuple(sorted(set(out)))


def shared_from_flags(oversubscribe: str | None, exclusive: str | None) -> Shared:
    """26.05 prints ``Exclusive=NODE|USER|MCS|NO``; before, ``OverSubscribe=NO`` meant an
    exclusive node and ``OverSubscribe=USER`` an exclusive user."""
    if exclusive is not None:
        value = exclusive.upper()
        if value in ("NODE", "YES", "TOPO"):
            return Shared.NONE
        if value == "USER":
            return Shared.SINGLE_USER
        return Shared.MULTI_USER
    value = (oversubscribe or "").upper()
    if value == "NO":
        return Shared.NONE
    if value == "USER":
        return Shared.SINGLE_USER
    return Shared.MULTI_USER


def slurm_duration(text: str) -> int:
    """``[days-]hours:minutes:seconds`` (or ``minutes:seconds``) -> seconds; UNLIMITED -> 0."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A"):
        return 0
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return (int(days or 0) * 24 + hours) * 3600 + minutes * 60 + seconds


# --- sacct records: the parts every generation shares --------------------------------------

# Slurm's NO_VAL / INFINITE sentinels leak into time fields of never-started jobs.
_SENTINEL = 0xFFFFFFFE


def epoch(value: Any, where: str, ctx: ParseContext) -> int:
    num = number(value, where, ctx)
    if num is None or num < 0 or num >= _SENTINEL:
        return 0
    return num


def build_sacct_record(
    record: Mapping[str, Any],
    ctx: ParseContext,
    *,
    state: str,
    array_task_id: int | None,
    exit_code: int | None,
    shared: Shared | None,
    script: str | None,
) -> SacctRecord:
    """Fields whose layout is the same (up to int/object and str/list) in all generations;
    the caller passes what its generation lays out differently."""
    if not isinstance(record, Mapping):
        raise ctx.error(f"job record expected, got {type(record).__name__}")
    tres = field(record, "tres.allocated", ctx)
    nodes = expand_hostlist(text(record.get("nodes"), "nodes", ctx), ctx)
    limit = number(field(record, "time.limit", ctx), "time.limit", ctx)
    required = mapping(record.get("required"), "required", ctx)
    required_cpus = number(required.get("CPUs"), "required.CPUs", ctx)
    cpus = tres_count(tres, "cpu", None, ctx)
    start = epoch(field(record, "time.start", ctx), "time.start", ctx)
    if cpus is None:
        # Nothing allocated (yet): what was asked for if it ran, else nothing. A job
        # cancelled while pending may carry its end time as its start (slurmdbd writes it so
        # by the moment of the scancel, seen on 22.05, 23.02 and 24.05): without nodes it
        # never ran.
        cpus = (required_cpus or 0) if start and nodes else 0
    het_job_id, het_offset = _het(record, ctx)
    return SacctRecord(
        job_id=ctx.job_id or 0,
        array_job_id=number(field(record, "array.job_id", ctx), "array.job_id", ctx) or 0,
        array_task_id=array_task_id,
        cluster=text(field(record, "cluster", ctx), "cluster", ctx),
        partition=text(record.get("partition"), "partition", ctx),
        account=text(record.get("account"), "account", ctx),
        user=text(field(record, "user", ctx), "user", ctx),
        group=text(record.get("group"), "group", ctx),
        name=text(record.get("name"), "name", ctx),
        state=state,
        submit_time=epoch(field(record, "time.submission", ctx), "time.submission", ctx),
        start_time=start,
        end_time=epoch(field(record, "time.end", ctx), "time.end", ctx),
        time_limit=(limit or 0) * 60 if limit is not None and limit < _SENTINEL else 0,
        nodes=nodes,
        num_nodes=number(record.get("allocation_nodes"), "allocation_nodes", ctx) or len(nodes),
        num_hwthreads=cpus,
        num_gpus=tres_count(tres, "gres", "gpu", ctx),
        shared=shared,
        script=script or None,
        exit_code=exit_code,
        het_job_id=het_job_id,
        het_offset=het_offset,
        energy=consumed_energy(tres, ctx),
    )


def _het(record: Mapping[str, Any], ctx: ParseContext) -> tuple[int, int | None]:
    """(leader id, offset) of a het job's component; (0, None) for any other job. Every
    generation carries ``het``; a job that is no component has ``job_id`` 0 and no offset."""
    het_job_id = number(field(record, "het.job_id", ctx), "het.job_id", ctx) or 0
    offset = number(field(record, "het.job_offset", ctx), "het.job_offset", ctx)
    if het_job_id <= 0 or het_job_id >= _SENTINEL or offset is None or not (
            0 <= offset < _SENTINEL):
        return 0, None
    return het_job_id, offset


def job_id_of(record: Any, ctx: ParseContext) -> int:
    """The job id first, so that every later error can name the job."""
    job_id = record.get("job_id") if isinstance(record, Mapping) else None
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ctx.error(f"record without a valid job_id: {str(record)[:80]!r}")
    return job_id


# --- sacctmgr list clusters (argv and form per generation: see the version modules) ------


def cluster_names(values: list[Any], ctx: ParseContext) -> tuple[list[str], list[str]]:
    """The cluster names of a ``sacctmgr list clusters`` answer, in its order, duplicates
    dropped; a value that is no cluster name (:func:`ccadapter.model.valid_cluster_name`) is
    an error string and skipped: it would end up in a file name and a command line."""
    names: list[str] = []
    errors: list[str] = []
    for value in values:
        if not valid_cluster_name(value):
            errors.append(str(ctx.error(f"not a cluster name: {str(value)[:80]!r}")))
        elif value not in names:
            names.append(value)
    return names, errors
