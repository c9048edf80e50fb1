"""Slurm text outputs that are the same on every supported generation: the version line,
``scontrol -o show node``, ``scontrol show config`` and ``sacctmgr show user -P``.
``scontrol show job`` text lives in :mod:`.scontrol`, the cheap run listing in
:mod:`.listing`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ccadapter.errors import SlurmParseError
from ccadapter.slurm.formats.records import NodeState, ParseContext, SlurmVersion

# --- version detection ---------------------------------------------------------------------


def version_from_meta(doc: Mapping[str, Any], command: str) -> SlurmVersion:
    """22.05 writes ``meta.Slurm.version`` with ints, 23.02+ ``meta.slurm.version`` strings."""
    meta = doc.get("meta") if isinstance(doc, Mapping) else None
    slurm = None
    if isinstance(meta, Mapping):
        slurm = meta.get("slurm") or meta.get("Slurm")
    ver = slurm.get("version") if isinstance(slurm, Mapping) else None
    if not isinstance(ver, Mapping):
        raise SlurmParseError("unknown", command, "output has no meta.slurm.version")
    try:
        return SlurmVersion(int(ver["major"]), int(ver["minor"]), int(ver.get("micro", 0)))
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise SlurmParseError("unknown", command, f"unreadable version {ver!r:.80}") from None


def version_from_text(out: str, command: str) -> SlurmVersion:
    """``sacct -V`` prints ``slurm 22.05.8`` (or ``slurm-wlm 22.05.8``)."""
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    if not m:
        raise SlurmParseError("unknown", command, f"no version in {out.strip()!r}")
    return SlurmVersion(int(m[1]), int(m[2]), int(m[3]))


# --- scontrol -o show node, scontrol show config (text, same on every generation) ------


_NODE_KEYS = ("NodeName", "CPUAlloc", "AllocMem", "State", "AllocTRES", "Sockets",
              "CoresPerSocket", "ThreadsPerCore", "CPUTot")


def parse_nodes(out: str, ctx: ParseContext) -> tuple[list[NodeState], list[str]]:
    """``scontrol -o show node``: one line per node, read in one pass (the first
    occurrence of a key wins: free text such as ``Reason=`` comes after the keys we read)."""
    nodes: list[NodeState] = []
    errors: list[str] = []
    for line in out.split("\n"):  # a Reason= may hold what str.splitlines splits at
        if not line.startswith("NodeName="):
            continue
        vals = dict.fromkeys(_NODE_KEYS, "")
        seen: set[str] = set()
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key in vals and key not in seen:
                vals[key] = value
                seen.add(key)
        try:
            tres = dict(kv.split("=", 1) for kv in vals["AllocTRES"].split(",") if "=" in kv)
            nodes.append(NodeState(
                hostname=vals["NodeName"],
                states=tuple(s.lower() for s in vals["State"].split("+") if s),
                cpus_allocated=int(vals["CPUAlloc"] or 0),
                memory_allocated=int(vals["AllocMem"] or 0),
                gpus_allocated=int(tres.get("gres/gpu", "0") or 0),
                sockets=int(vals["Sockets"] or 0),
                cores_per_socket=int(vals["CoresPerSocket"] or 0),
                threads_per_core=int(vals["ThreadsPerCore"] or 0),
                cpus=int(vals["CPUTot"] or 0),
            ))
        except ValueError as exc:
            errors.append(str(ctx.error(f"node {vals['NodeName']}: {exc}")))
    return nodes, errors


def parse_cluster_name(out: str) -> str | None:
    """``scontrol show config``: ``ClusterName             = cluster22``."""
    m = re.search(r"^ClusterName\s*=\s*(\S+)", out, re.M)
    return m[1] if m else None


def parse_energy_plugin(out: str) -> str | None:
    """``scontrol show config``: ``AcctGatherEnergyType    = acct_gather_energy/rapl``; None
    when energy is not gathered (``(null)`` or ``acct_gather_energy/none``, as the test bed's
    22.05, 24.11 and 26.05 print it, or no such line)."""
    m = re.search(r"^AcctGatherEnergyType\s*=\s*(\S+)", out, re.M)
    if not m or m[1] in ("(null)", "acct_gather_energy/none", "none"):
        return None
    return m[1]


def stores_scripts(out: str) -> bool:
    """``scontrol show config``: ``AccountingStoreFlags    = job_script`` (with others,
    comma-separated): slurmdbd keeps every batch script from its submission (20.11 on)."""
    m = re.search(r"^AccountingStoreFlags\s*=\s*(\S+)", out, re.M)
    return bool(m) and "job_script" in m[1].split(",")


# What lets slurmctld boot a job's nodes after it allocated them, and so reset the job's
# StartTime once they are up (job_mgr.c job_config_fini): nodes powered down by power saving
# or defined CLOUD (node_scheduler.c select_nodes sets JOB_POWER_UP_NODE for nodes in
# power_down_node_bitmap, 22.05 to 26.05), which needs a ResumeProgram to bring them back
# (power_save.c) and a SuspendProgram to power them down; and a node features plugin that
# reboots nodes into the features a job asks for (job_scheduler.c reboot_job_nodes). A job's
# own ``--reboot`` is its ``Reboot=1`` (ControllerJob.reboot). Admin reboots (``scontrol
# reboot``, RebootProgram) set the node DOWN and take it out of the available ones until it
# is back (controller.c _queue_reboot_msg up to 24.11, power_save.c in 26.05), so no job is
# allocated a rebooting node. Slurm 26.05 adds PowerAction entries to slurm.conf (read in
# read_config.c): programs that power nodes down and up by name (``scontrol power down ...
# Action=NAME``), which ``scontrol show config`` does not print; from 26.05 on, the config
# cannot tell.
_BOOT_KEYS = ("SuspendProgram", "ResumeProgram", "NodeFeaturesPlugins")
_UNSET = frozenset({"(null)", "none", ""})
_POWER_ACTIONS = (26, 5)  # the first release with PowerAction


def parse_node_boot(out: str) -> tuple[str, ...] | None:
    """The settings of ``scontrol show config`` that let slurmctld boot a job's nodes
    (``ResumeProgram = /usr/sbin/resume``); empty when all are unset (``(null)``, as on the
    test bed's 22.05 and 24.11). None when it cannot tell: the config's ``SLURM_VERSION`` is
    26.05 or later, or missing (not a config). The caller must then assume that nodes may
    boot."""
    line = re.search(r"^SLURM_VERSION\s*=.*$", out, re.M)
    try:
        release = version_from_text(line[0], "scontrol show config") if line else None
    except SlurmParseError:
        release = None
    if release is None or release.generation >= _POWER_ACTIONS:
        return None
    found = []
    for key in _BOOT_KEYS:
        m = re.search(rf"^{key}\s*=[ \t]*(.*?)\s*$", out, re.M)
        if m and m[1].lower() not in _UNSET:
            found.append(key)
    return tuple(found)


# SlurmUser = slurm(64030): its name and uid
_SLURM_USER = re.compile(r"^SlurmUser\s*=\s*([^\s(]+)(?:\((\d+)\))?", re.MULTILINE)


def parse_slurm_user(out: str) -> str | None:
    """``SlurmUser`` of ``scontrol show config`` (``SlurmUser = slurm(64030)``)."""
    match = _SLURM_USER.search(out)
    return match.group(1) if match else None


def parse_slurm_uid(out: str) -> int | None:
    """The uid of ``SlurmUser`` in ``scontrol show config`` (``SlurmUser = slurm(64030)``):
    the user slurmctld runs PrologSlurmctld and EpilogSlurmctld as."""
    match = _SLURM_USER.search(out)
    return int(match.group(2)) if match and match.group(2) else None


def parse_admin_levels(out: str) -> dict[str, str]:
    """``sacctmgr show user NAME -P -n format=user,adminlevel``: user -> AdminLevel (as
    written: ``None``, ``Operator``, ``Administrator``)."""
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
