"""Start-up checks of the daemon: mistakes that do not stop it but make it quietly wrong or
unsafe, each reported as one warning that says what to run to fix it.

- Slurm privileges. With ``PrivateData=jobs`` sacct and scontrol show a plain user
  only their own jobs, and ``scontrol write batch_script`` refuses other users' jobs
  whatever the setting. root and SlurmUser are privileged; anyone else needs AdminLevel
  Operator (or Administrator) in slurmdbd.
- Secrets on disk. A config file holding a secret (``ccRestJwt``, ``natsPassword``, ...)
  or a NATS credentials file must not be readable by others, nor by its group unless the
  daemon itself reads it through that group (owner root, group of the daemon, mode 0640).
- Cluster names. ``sacct --clusters NAME`` for a NAME slurmdbd does not hold answers
  nothing and exits 0 (22.05 on the test bed), so a typo in ``slurmClusters`` would leave
  that cluster's windows empty without a word; the names are compared with ``sacctmgr list
  clusters`` once at start.

``check-config`` adds what stops the daemon at start, checked where the config is written
(:func:`config_problems`): a group the config names that does not exist, and a file the
daemon's user (as the unit starts it) cannot read.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass

from ccadapter.config.keys import Config
from ccadapter.config.secrets import SECRET_KEYS
from ccadapter.errors import CcAdapterError
from ccadapter.model import ALL_CLUSTERS
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.formats.text import parse_admin_levels, parse_slurm_user
from ccadapter.slurm.runner import CommandRunner

PRIVILEGED_LEVELS = frozenset({"operator", "administrator"})
STARTUP_TIMEOUT = 10.0  # seconds a start-up check may wait for Slurm


@dataclass(frozen=True)
class Identity:
    """Who the daemon runs as (a parameter, so tests need not change their own user)."""

    user: str
    uid: int
    groups: frozenset[int]

    @classmethod
    def current(cls) -> Identity:
        uid = os.geteuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:  # no passwd entry (containers): Slurm knows the uid only
            user = str(uid)
        return cls(user, uid, frozenset({os.getegid(), *os.getgroups()}))

    @classmethod
    def service(cls, user: str, group: str) -> Identity:
        """The daemon as the unit starts it (``User=``, ``Group=``, and the user's own group,
        which systemd/ccadapter.service adds with ``SupplementaryGroups=``), with the
        groups that list the user as a member. Raises KeyError naming a missing one."""
        entry = pwd.getpwnam(user)
        gid = grp.getgrnam(group).gr_gid
        members = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
        return cls(user, entry.pw_uid, frozenset({gid, entry.pw_gid, *members}))

    def can_read(self, path: str) -> bool:
        """Whether this identity may read ``path`` by its mode bits: every directory on the
        way searchable, the file readable (ACLs and capabilities aside; root reads all)."""
        if self.uid == 0:
            return True
        target = os.path.abspath(path)
        parts = target.split(os.sep)[1:]
        for i in range(len(parts) + 1):
            current = os.sep + os.sep.join(parts[:i])
            try:
                st = os.stat(current)
            except OSError:
                return False
            want = stat.S_IROTH if current == target else stat.S_IXOTH
            if not self._allowed(st, want):
                return False
        return True

    def _allowed(self, st: os.stat_result, other_bit: int) -> bool:
        """The mode's owner, group or other bit for this identity (``other_bit`` scaled)."""
        if st.st_uid == self.uid:
            return bool(st.st_mode & (other_bit << 6))
        if st.st_gid in self.groups:
            return bool(st.st_mode & (other_bit << 3))
        return bool(st.st_mode & other_bit)


def startup_warnings(config: Config, config_path: str | None, runner: CommandRunner,
                     who: Identity) -> list[str]:
    """Every warning of the checks, in a stable order."""
    warnings = []
    if (slurm := slurm_privilege(runner, who)) is not None:
        warnings.append(slurm)
    if (clusters := unknown_clusters(config, runner)) is not None:
        warnings.append(clusters)
    return warnings + secret_files(config, config_path, who)


def unknown_clusters(config: Config, runner: CommandRunner) -> str | None:
    """A warning when slurmClusters names a cluster slurmdbd does not hold (None for the
    default mode and for ``["*"]``, which reads the names from slurmdbd)."""
    named = [c for c in config.slurm_clusters if c != ALL_CLUSTERS]
    if not named:
        return None
    try:
        known = ClusterList(runner).names()
    except CcAdapterError as exc:
        return f"cannot tell whether slurmdbd holds the clusters of slurmClusters: {exc}"
    unknown = [c for c in named if c not in known]
    if not unknown:
        return None
    return (f"slurmClusters names {', '.join(unknown)}, which slurmdbd does not hold "
            f"(`sacctmgr list clusters`: {', '.join(known) or 'none'}); sacct answers "
            "nothing for such a name, without an error: check the spelling in the config")


def slurm_privilege(runner: CommandRunner, who: Identity) -> str | None:
    """A warning when ``who`` is not privileged in Slurm, or when that cannot be told."""
    if who.uid == 0:
        return None
    try:
        # asked once, briefly: a warning must not hold the start while slurmdbd is slow
        if parse_slurm_user(runner.run(["scontrol", "show", "config"], retry=False,
                                       timeout=STARTUP_TIMEOUT)) == who.user:
            return None
        out = runner.run(["sacctmgr", "show", "user", who.user, "-P", "-n",
                          "format=user,adminlevel"], retry=False, timeout=STARTUP_TIMEOUT)
    except CcAdapterError as exc:
        return f"cannot tell whether user {who.user} is a Slurm operator: {exc}"
    level = parse_admin_levels(out).get(who.user)
    why = ("other users' jobs may be hidden from it (PrivateData) and their batch scripts "
           "cannot be read")
    if level is None:
        return (f"user {who.user} is not in Slurm's accounting database, so {why}; run: "
                f"sacctmgr add user {who.user} account=ACCOUNT adminlevel=operator")
    if level.strip().lower() in PRIVILEGED_LEVELS:
        return None
    return (f"user {who.user} has Slurm AdminLevel {level.strip() or 'None'}, so {why}; run: "
            f"sacctmgr modify user where name={who.user} set adminlevel=operator")


def secret_files(config: Config, config_path: str | None, who: Identity) -> list[str]:
    """Warnings for files holding secrets that others (or a foreign group) may read."""
    data = config.model_dump(by_alias=True)
    candidates: list[tuple[str, str]] = []
    held = sorted(k for k in SECRET_KEYS if data.get(k))
    if config_path and held:
        candidates.append((config_path, f"holds {', '.join(held)}"))
    for key in ("ccRestJwtFile", "natsPasswordFile", "natsCredsFile", "natsNKeySeedFile",
                "natsTlsKeyFile"):
        if data.get(key):
            candidates.append((data[key], f"is {key}"))
    warnings = []
    for path, what in candidates:
        try:
            st = os.stat(path)
        except OSError:
            continue  # missing files are reported where they are needed
        readers = _foreign_readers(st, who)
        if readers:
            fix = "go-r" if len(readers) == 2 else ("o-r" if readers[-1] == "others" else "g-r")
            warnings.append(f"{path} {what} and is readable by {' and '.join(readers)} "
                            f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod {fix} {path}")
    return warnings


# the keys naming files the daemon reads
FILE_KEYS = ("ccRestJwtFile", "natsPasswordFile", "ccRestCaBundle", "natsCredsFile",
             "natsNKeySeedFile", "natsTlsCaFile", "natsTlsCertFile", "natsTlsKeyFile")


def config_problems(config: Config, config_path: str, who: Identity | None
                    ) -> list[tuple[str, str]]:
    """(key, message) for each group the config names that does not exist, and for each file
    ``who`` (the daemon as its unit starts it; None: not checked) cannot read: the config
    file itself (key ``<file>``) and those its keys name."""
    problems = []
    if config.prep_sock_group:
        try:
            grp.getgrnam(config.prep_sock_group)
        except KeyError:
            problems.append(("prepSockGroup", f"group {config.prep_sock_group!r} does not "
                             "exist (it should be SlurmUser's group, e.g. slurm)"))
    if who is None:
        return problems
    data = config.model_dump(by_alias=True)
    for key, path in [("<file>", config_path), *((k, data[k]) for k in FILE_KEYS)]:
        if path and os.path.exists(path) and not who.can_read(path):
            st = os.stat(path)
            problems.append((key, f"user {who.user} cannot read {path} (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}, owner "
                             f"{_user_name(st.st_uid)}:{_group_name(st.st_gid)}); give it "
                             f"to a group of the daemon's, e.g. chgrp {_group_name(_first(who))} "
                             f"{path}; chmod g+r {path}, and see that its directories are "
                             "searchable"))
    return problems


def _first(who: Identity) -> int:
    """The daemon's own group (its user's), where the unit adds it; else any of its."""
    try:
        return pwd.getpwnam(who.user).pw_gid
    except KeyError:
        return min(who.groups)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _foreign_readers(st: os.stat_result, who: Identity) -> list[str]:
    """Who besides the daemon may read a file: ``group NAME`` and/or ``others``."""
    readers = []
    if st.st_mode & stat.S_IRGRP:
        reads_through_group = who.uid != 0 and st.st_uid != who.uid and st.st_gid in who.groups
        if not reads_through_group:
            readers.append(f"group {_group_name(st.st_gid)}")
    if st.st_mode & stat.S_IROTH:
        readers.append("others")
    return readers


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)

