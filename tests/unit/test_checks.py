"""Start-up checks: Slurm admin level (through the runner) and secrets on disk."""

import json
import os

import pytest

from ccadapter.config.keys import Config
from ccadapter.errors import SlurmCommandError
from ccadapter.ops.checks import Identity, secret_files, slurm_privilege, startup_warnings
from tests.conftest import ReplayRunner

CONFIG_TEXT = "ClusterName             = cluster24\nSlurmUser               = slurm(64030)\n"


def sacctmgr(levels, fail=False):
    def answer(argv):
        if argv[:3] == ["scontrol", "show", "config"]:
            return CONFIG_TEXT
        if fail:
            raise SlurmCommandError(argv, "exit code 1", "sacctmgr: error: Problem talking")
        assert argv == ["sacctmgr", "show", "user", argv[3], "-P", "-n",
                        "format=user,adminlevel"]
        return "".join(f"{u}|{lvl}\n" for u, lvl in levels.items() if u == argv[3])
    return ReplayRunner(answer)


def who(user="ccadm", uid=990, groups=(990,)):
    return Identity(user, uid, frozenset(groups))


def test_root_and_slurm_user_need_no_query():
    runner = sacctmgr({})
    assert slurm_privilege(runner, who("root", 0)) is None
    assert runner.calls["sacctmgr"] == 0 and runner.calls["scontrol"] == 0
    assert slurm_privilege(runner, who("slurm", 64030)) is None
    assert runner.calls["sacctmgr"] == 0


@pytest.mark.parametrize("level", ["Operator", "Administrator"])
def test_operators_and_admins_pass(level):
    assert slurm_privilege(sacctmgr({"ccadm": level}), who()) is None


def test_plain_user_is_told_the_exact_command():
    msg = slurm_privilege(sacctmgr({"ccadm": "None", "other": "Operator"}), who())
    assert "AdminLevel None" in msg
    assert msg.endswith("run: sacctmgr modify user where name=ccadm set adminlevel=operator")


def test_unknown_user_is_told_to_add_it():
    msg = slurm_privilege(sacctmgr({"other": "Operator"}), who())
    assert "not in Slurm's accounting database" in msg
    assert "sacctmgr add user ccadm account=ACCOUNT adminlevel=operator" in msg


def test_failing_sacctmgr_is_a_warning_not_a_crash():
    msg = slurm_privilege(sacctmgr({}, fail=True), who())
    assert msg.startswith("cannot tell whether user ccadm is a Slurm operator")


def write(path, data, mode):
    path.write_text(json.dumps(data))
    os.chmod(path, mode)
    return str(path)


def test_config_with_a_secret_readable_by_others(tmp_path):
    path = write(tmp_path / "c.json", {"ccRestJwt": "jwt-value-123"}, 0o644)
    me = who(uid=os.getuid(), groups=())
    (msg,) = secret_files(Config(ccRestJwt="jwt-value-123"), path, me)
    assert "holds ccRestJwt" in msg and "jwt-value-123" not in msg
    assert "readable by group" in msg and "and others (mode 0644)" in msg
    assert msg.endswith(f"run: chmod go-r {path}")


def test_group_read_is_fine_when_the_daemon_reads_through_that_group(tmp_path):
    path = write(tmp_path / "c.json", {"natsPassword": "pw"}, 0o640)
    st = os.stat(path)
    cfg = Config(natsPassword="pw")
    daemon = who(uid=st.st_uid + 1, groups=(st.st_gid,))  # not the owner, in its group
    assert secret_files(cfg, path, daemon) == []
    owner = who(uid=st.st_uid, groups=(st.st_gid,))  # the owner needs no group read
    (msg,) = secret_files(cfg, path, owner)
    assert "holds natsPassword" in msg and msg.endswith(f"run: chmod g-r {path}")
    os.chmod(path, 0o604)
    (msg,) = secret_files(cfg, path, daemon)
    assert "readable by others (mode 0604)" in msg and msg.endswith(f"chmod o-r {path}")


def test_no_secret_no_warning_and_credential_files_count(tmp_path):
    path = write(tmp_path / "c.json", {}, 0o644)
    me = who(uid=os.getuid(), groups=())
    assert secret_files(Config(), path, me) == []
    assert secret_files(Config(ccRestJwt="x"), path, who(uid=os.getuid())) != []
    assert secret_files(Config(ccRestJwt="x"), None, me) == []  # built-in defaults: no file
    creds = write(tmp_path / "nats.creds", {}, 0o604)
    (msg,) = secret_files(Config(natsCredsFile=creds), None, me)
    assert msg.startswith(f"{creds} is natsCredsFile and is readable by others")
    gone = Config(natsNKeySeedFile=str(tmp_path / "missing"))
    assert secret_files(gone, None, me) == []


def test_startup_warnings_collects_both(tmp_path):
    path = write(tmp_path / "c.json", {"ccRestJwt": "x"}, 0o600)
    cfg = Config(ccRestJwt="x")
    assert startup_warnings(cfg, path, sacctmgr({"ccadm": "Operator"}), who()) == []
    os.chmod(path, 0o604)
    got = startup_warnings(cfg, path, sacctmgr({}), who())
    assert [w.split()[0] for w in got] == ["user", path]


def test_identity_current():
    me = Identity.current()
    assert me.uid == os.geteuid() and os.getegid() in me.groups and me.user
