import json
import logging

import pytest
from click.testing import CliRunner

from ccadapter.cli import Deps, main
from ccadapter.config.keys import Config
from ccadapter.config.load import load_config, parse_config
from ccadapter.config.rules import missing_files
from ccadapter.errors import ConfigError
from tests.conftest import FIXTURES, ReplayRunner, whoami


def test_defaults_match_cc_slurm_adapter():
    c = Config()
    assert (c.slurm_poll_interval, c.slurm_query_delay, c.slurm_query_max_span) == (60, 1, 604800)
    assert (c.slurm_max_retries, c.cc_poll_interval, c.nats_port, c.nats_subject) == (
        10, 21600, 4222, "jobs")
    assert c.pid_file_path == "/run/cc-slurm-adapter/daemon.pid"
    sock = "/run/cc-slurm-adapter/daemon.sock"
    assert c.prep_sock_listen_path == c.prep_sock_connect_path == sock
    assert c.last_run_path == "/var/lib/cc-slurm-adapter/lastrun"
    assert c.cc_rest_submit_jobs is True


def test_documented_example_loads_unchanged(caplog):
    with caplog.at_level(logging.WARNING):
        c = load_config(FIXTURES / "cc-slurm-adapter-example.json")
    assert caplog.records == []  # every key of the example is known
    assert c.slurm_max_retries == 5  # the example spells it slurmQueryMaxRetries
    assert c.last_run_path == "/var/lib/cc-slurm-adapter/last_run"
    assert c.cc_rest_url == "https://my-cc-backend-instance.example"
    assert c.slurm_clusters == [] and not c.multi_cluster()  # the local cluster, as before
    assert list(c.gpu_pci_addrs) == ["^nodehostname0[0-9]$", "^nodehostname1[0-9]$"]
    assert c.ignore_hosts_pattern().search("nodehostname9abc")
    assert (c.nats_server, c.nats_subject, c.nats_user) == ("mynatsserver.example", "mysubject",
                                                           "myuser")
    # The example names NATS files that do not exist here; that is reported separately.
    assert [k for k, _ in missing_files(c)] == ["natsCredsFile", "natsNKeySeedFile"]


def test_keys_match_case_insensitively_like_go():
    assert parse_config({"SLURMPOLLINTERVAL": 5}).slurm_poll_interval == 5


def test_unknown_key_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        parse_config({"slurmPollIntervall": 5})
    assert "slurmPollIntervall" in caplog.text


@pytest.mark.parametrize(("raw", "key"), [
    ({"ignoreHosts": "n[1-"}, "ignoreHosts"),
    ({"gpuPciAddrs": {"(bad": ["0000:00:01.0"]}}, "gpuPciAddrs"),
    ({"slurmPollInterval": -1}, "slurmPollInterval"),
    ({"ccPollInterval": "soon"}, "ccPollInterval"),
    ({"natsPort": 70000}, "natsPort"),
    ({"ccRestUrl": "ftp://x"}, "ccRestUrl"),
    ({"slurmCommandPrefix": "chroot /x"}, "slurmCommandPrefix"),
    ({"natsServer": "http://broker:4222"}, "natsServer"),
    ({"natsServer": "broker/x"}, "natsServer"),
    ({"natsPublishTimeout": 0}, "natsPublishTimeout"),
    ({"natsJetStream": "maybe"}, "natsJetStream"),
    ({"natsNodeStateSubject": "cc.node.*"}, "natsNodeStateSubject"),
    ({"natsNodeStateSubject": "cc.>"}, "natsNodeStateSubject"),
    ({"natsNodeStateSubject": "cc node"}, "natsNodeStateSubject"),
    ({"natsNodeStateSubject": "cc..state"}, "natsNodeStateSubject"),
    ({"natsNodeStateSubject": ".cc"}, "natsNodeStateSubject"),
    ({"prepSockAllowedPeers": ["ctld1"]}, "prepSockAllowedPeers"),
    ({"prepSockAllowedPeers": ["10.0.0.0/33"]}, "prepSockAllowedPeers"),
])
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert err.value.key.split(".")[0] == key
    assert key in str(err.value)


def test_allowed_peers_are_networks():
    import ipaddress

    cfg = parse_config({"prepSockAllowedPeers": ["10.1.2.3", "10.2.0.0/16", "::1"]})
    assert cfg.allowed_peers() == [ipaddress.ip_network(n) for n in
                                   ("10.1.2.3/32", "10.2.0.0/16", "::1/128")]
    assert parse_config({}).allowed_peers() == []


@pytest.mark.parametrize(("text", "address"), [
    ("", None), ("127.0.0.1:9102", ("127.0.0.1", 9102)), ("[::1]:9102", ("::1", 9102)),
    (":9102", ("0.0.0.0", 9102)), ("[::]:80", ("::", 80)), ("mon.example:1", ("mon.example", 1)),
])
def test_metrics_listen(text, address):
    assert parse_config({"metricsListen": text}).metrics_address() == address


@pytest.mark.parametrize("text", ["9102", "::1:9102", "[::1]9102", "[nope]:1", "a b:1",
                                  "127.0.0.1:0", "127.0.0.1:65536", "host:", "-x:1"])
def test_bad_metrics_listen_names_the_key(text, tmp_path):
    with pytest.raises(ConfigError, match="metricsListen"):
        parse_config({"metricsListen": text})
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"metricsListen": text}))
    res = CliRunner().invoke(main, ["check-config", str(path), *whoami()])
    assert res.exit_code == 2 and "metricsListen" in res.output


@pytest.mark.parametrize("subject", ["", "cc.node.state", "nodes", "site-a.cc_nodes.v1"])
def test_node_state_subjects_one_can_publish_to(subject):
    assert parse_config({"natsNodeStateSubject": subject}).nats_node_state_subject == subject


def test_zero_interval_becomes_one_like_go():
    assert parse_config({"slurmPollInterval": 0}).slurm_poll_interval == 1


def test_secret_never_in_error():
    with pytest.raises(ConfigError) as err:
        parse_config({"ccRestJwt": ["s3cr3t-token"]})
    assert "s3cr3t" not in str(err.value)
    assert "ccRestJwt" in str(err.value)


def test_check_config_cli(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"ignoreHosts": "("}))
    res = CliRunner().invoke(main, ["check-config", str(bad), *whoami()])
    assert res.exit_code == 2
    assert "ignoreHosts" in res.output

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"ccRestJwt": "s3cr3t-token", "slurmPollInterval": 30}))
    res = CliRunner().invoke(main, ["check-config", str(good), *whoami()])
    assert res.exit_code == 0, res.output
    assert "s3cr3t" not in res.output
    assert json.loads(res.stdout.split("\n" + str(good))[0])["slurmPollInterval"] == 30

    example = str(FIXTURES / "cc-slurm-adapter-example.json")
    res = CliRunner().invoke(main, ["check-config", example, *whoami()])
    assert res.exit_code == 2
    assert "natsCredsFile" in res.output


def test_not_json_and_not_object(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("[1]")
    with pytest.raises(ConfigError):
        load_config(p)
    p.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(p)


# Found by tests/unit/fuzz/test_config_fuzz.py (shrunk examples): each raised a traceback
# out of load_config, and out of `ccadapter check-config` / the daemon's start, instead of
# an error naming the file.
@pytest.mark.parametrize(("body", "reason"), [
    (b"\x80", "not UTF-8"),  # UnicodeDecodeError
    (b'{"natsPort": ' + b"9" * 4301 + b"}", "number too long"),  # ValueError (digit limit)
    (b"[" * 1983 + b"]" * 1983, "nested too deeply"),  # RecursionError
])
def test_unreadable_files_are_config_errors(tmp_path, body, reason):
    path = tmp_path / "config.json"
    path.write_bytes(body)
    with pytest.raises(ConfigError, match=reason) as err:
        load_config(path)
    assert err.value.key == "<file>"
    result = CliRunner().invoke(main, ["check-config", str(path), *whoami()])
    assert result.exit_code == 2 and reason in result.output


def test_nats_url_from_cc_slurm_adapter_keys_or_a_url():
    assert parse_config({"natsServer": "broker", "natsPort": 4333}).nats_url() == \
        "nats://broker:4333"
    assert parse_config({"natsServer": "::1"}).nats_url() == "nats://[::1]:4222"
    assert parse_config({"natsServer": "broker", "natsTlsCaFile": "/ca.pem"}).nats_url() == \
        "tls://broker:4222"
    assert parse_config({"natsServer": "tls://b:1"}).nats_url() == "tls://b:1"


def test_nats_url_with_password_is_not_echoed():
    with pytest.raises(ConfigError) as err:
        parse_config({"natsServer": "http://user:pw-s3cr3t@broker"})
    assert "s3cr3t" not in str(err.value)


@pytest.mark.parametrize(("raw", "key"), [
    ({"ccRestSubmitJobs": False}, "ccRestSubmitJobs"),  # and no natsServer: no path at all
    ({"ccRestUrl": ""}, "ccRestUrl"),
    ({"ccRestSubmitJobs": False, "natsServer": "127.0.0.1", "natsCredsFile": "/nope.creds"},
     "natsCredsFile"),
])
def test_daemon_refuses_configs_that_cannot_deliver(tmp_path, raw, key):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"pidFilePath": str(tmp_path / "pid"), **raw}))
    res = CliRunner().invoke(main, ["daemon", "--config", str(cfg)])
    assert res.exit_code == 2
    assert repr(key) in res.output


def test_our_example_config_loads_without_warnings(caplog):
    with caplog.at_level(logging.WARNING):
        c = load_config(FIXTURES.parent.parent / "example-config.json")
    assert caplog.records == []
    assert not c.multi_cluster()


@pytest.mark.parametrize("clusters", [["cluster22"], ["cluster22", "clusterscale"], ["*"],
                                      ["c.1", "c_2", "3-c"]])
def test_slurm_clusters_names_or_star(clusters):
    c = parse_config({"slurmClusters": clusters})
    assert c.slurm_clusters == clusters and c.multi_cluster()


@pytest.mark.parametrize(("clusters", "reason"), [
    (["*", "cluster22"], "goes alone"),
    (["cluster22", "cluster22"], "twice"),
    (["a/b"], "not a Slurm cluster name"),
    (["-x"], "not a Slurm cluster name"),
    ([""], "not a Slurm cluster name"),
    ("cluster22", "slurmClusters"),
])
def test_bad_slurm_clusters_name_the_key(clusters, reason):
    with pytest.raises(ConfigError, match=reason) as err:
        parse_config({"slurmClusters": clusters})
    assert "slurmClusters" in str(err.value)


def test_cluster_sockets_need_slurm_clusters_and_a_served_name():
    with pytest.raises(ConfigError, match="needs slurmClusters"):
        parse_config({"prepSockClusterListenPaths": {"a": "tcp:127.0.0.1:7001"}})
    with pytest.raises(ConfigError, match="not in slurmClusters"):
        parse_config({"slurmClusters": ["a"], "prepSockClusterListenPaths": {"b": "/s"}})
    with pytest.raises(ConfigError, match="another cluster's"):
        parse_config({"slurmClusters": ["a", "b"], "prepSockListenPath": "/s",
                      "prepSockClusterListenPaths": {"a": "/s"}})
    c = parse_config({"slurmClusters": ["*"],
                      "prepSockClusterListenPaths": {"any": "tcp:127.0.0.1:7001"}})
    assert c.prep_sock_cluster_listen_paths == {"any": "tcp:127.0.0.1:7001"}


def test_a_password_inside_a_url_is_never_printed(tmp_path):
    """Issue 29: check-config printed ccRestUrl as written, password included; a malformed
    URL echoed it in its error; status scrubbed the secret keys only."""
    secret = "pa55-in-url"
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"ccRestUrl": f"http://cc:{secret}@cc.example.org:8080",
                                "natsServer": f"nats://n:{secret}2@broker:4222"}))
    res = CliRunner().invoke(main, ["check-config", str(good), *whoami()])
    assert res.exit_code == 0, res.output
    assert secret not in res.output
    shown = json.loads(res.stdout.split("\n" + str(good))[0])
    assert shown["ccRestUrl"] == "http://cc:<redacted>@cc.example.org:8080"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"ccRestUrl": f"htp://cc:{secret}@cc.example.org"}))
    res = CliRunner().invoke(main, ["check-config", str(bad), *whoami()])
    assert res.exit_code == 2 and "ccRestUrl" in res.output and secret not in res.output
    from ccadapter.config.secrets import safe_url, scrub, url_password

    config = load_config(good)
    assert scrub(f"HTTP 500 from http://cc:{secret}@cc.example.org:8080: x",
                 config.secret_values()) == \
        "HTTP 500 from http://cc:<redacted>@cc.example.org:8080: x"
    assert url_password(config.cc_rest_url) == secret
    assert safe_url(config.cc_rest_url) == "http://cc.example.org:8080"


def test_a_secret_in_a_file_of_its_own(tmp_path):
    """Issue 29: ccRestJwtFile (and natsPasswordFile) keep the secret out of the config
    file, which the hook (SlurmUser) may then read for prepSockConnectPath."""
    jwt = tmp_path / "jwt"
    jwt.write_text("eyJ.token.sig\n")
    config = parse_config({"ccRestUrl": "http://cc", "ccRestJwtFile": str(jwt)})
    assert config.rest_jwt() == "eyJ.token.sig" and config.cc_rest_jwt == ""
    assert "eyJ.token.sig" in config.secret_values()
    assert config.redacted()["ccRestJwtFile"] == str(jwt)  # a path, not the secret
    with pytest.raises(ConfigError, match="ccRestJwtFile") as err:
        parse_config({"ccRestJwt": "x", "ccRestJwtFile": str(jwt)})
    assert "not both" in str(err.value)
    gone = parse_config({"ccRestJwtFile": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match=r"ccRestJwtFile.*cannot read") as err:
        gone.rest_jwt()
    assert missing_files(gone) == [("ccRestJwtFile", str(tmp_path / "missing"))]
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        parse_config({"natsPasswordFile": str(tmp_path / "empty")}).nats_secret()


@pytest.fixture
def open_dir():
    """A directory every user may search (the tests' own tmp_path is root's alone)."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="ccadapter-check-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_check_config_checks_groups_and_what_the_daemons_user_can_read(open_dir):
    """Issue 29: a prepSockGroup that does not exist passed check-config (the daemon then
    failed at start), and nothing told that the daemon's user could not read its files."""
    import os

    jwt = open_dir / "jwt"
    jwt.write_text("token\n")
    os.chown(jwt, 0, 0)
    jwt.chmod(0o600)  # root's alone
    cfg = open_dir / "config.json"
    cfg.write_text(json.dumps({"ccRestUrl": "http://cc", "ccRestJwtFile": str(jwt),
                               "prepSockGroup": "no-such-group-here"}))
    cfg.chmod(0o644)
    res = CliRunner().invoke(main, ["check-config", str(cfg), "--user", "nobody",
                                    "--group", "nogroup"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert lines[0] == ("error: config key 'prepSockGroup': group 'no-such-group-here' does "
                        "not exist (it should be SlurmUser's group, e.g. slurm)")
    assert lines[1].startswith(f"error: config key 'ccRestJwtFile': user nobody cannot read "
                               f"{jwt} (mode 0600, owner root:root)")
    os.chown(jwt, 0, grp_id("nogroup"))
    jwt.chmod(0o640)  # the daemon's group may read it now
    cfg.write_text(json.dumps({"ccRestUrl": "http://cc", "ccRestJwtFile": str(jwt)}))
    res = CliRunner().invoke(main, ["check-config", str(cfg), "--user", "nobody",
                                    "--group", "nogroup"])
    assert res.exit_code == 0, res.output
    cfg.chmod(0o600)
    res = CliRunner().invoke(main, ["check-config", str(cfg), "--user", "nobody",
                                    "--group", "nogroup"])
    assert res.exit_code == 2 and "error: config key '<file>': user nobody cannot read" in \
        res.stderr


def grp_id(name: str) -> int:
    import grp

    return grp.getgrnam(name).gr_gid


# Issue 35, item 8: each of these passed check-config, and the daemon then died on it with a
# traceback (ValueError, OverflowError, a NATS URL nats://[host:4222]:4222, KeyError in the
# hook server) and systemd restarted it every 15 s.
DIES_AT_START = [
    ({"prepSockListenPath": "tcp:127.0.0.1"}, "prepSockListenPath", "no port"),
    ({"prepSockListenPath": "tcp:127.0.0.1:70000"}, "prepSockListenPath", "1 to 65535"),
    ({"prepSockListenPath": "tcp::0"}, "prepSockListenPath", "1 to 65535"),
    ({"prepSockConnectPath": "tcp:[::1]:99999"}, "prepSockConnectPath", "1 to 65535"),
    ({"natsServer": "host:4222"}, "natsServer", "natsPort"),
    ({"natsServer": "10.1.2.3:4222"}, "natsServer", "natsPort"),
]


@pytest.mark.parametrize(("raw", "key", "reason"), DIES_AT_START)
def test_check_config_refuses_what_the_daemon_cannot_start_with(tmp_path, raw, key, reason):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"ccRestUrl": "http://cc", **raw}))
    res = CliRunner().invoke(main, ["check-config", str(path), *whoami()])
    assert res.exit_code == 2, res.output
    assert f"config key {key!r}" in res.output and reason in res.output


@pytest.mark.timeout(60)  # a daemon that starts runs until it is stopped
@pytest.mark.parametrize(("raw", "key", "reason"), [
    *DIES_AT_START,
    ({"prepSockGroup": "no-such-group-here"}, "prepSockGroup", "does not exist")])
def test_the_daemon_exits_2_naming_the_key_as_check_config_does(tmp_path, raw, key, reason):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "ccRestUrl": "http://127.0.0.1:9", "pidFilePath": str(tmp_path / "run" / "pid"),
        "lastRunPath": str(tmp_path / "lastrun"),
        "prepSockListenPath": str(tmp_path / "run" / "sock"), **raw}))

    def slurm(config):
        return ReplayRunner(lambda argv: "ClusterName = c\nSlurmUser = root(0)\n")

    res = CliRunner().invoke(main, ["daemon", "--config", str(cfg)], obj=Deps(runner=slurm))
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    assert f"config key {key!r}" in res.output and reason in res.output
    assert "Traceback" not in res.output


def test_ipv6_nats_servers_and_ports_in_urls_are_still_taken():
    assert parse_config({"natsServer": "fe80::1"}).nats_url() == "nats://[fe80::1]:4222"
    assert parse_config({"natsServer": "nats://host:4333"}).nats_url() == "nats://host:4333"
    assert parse_config({"prepSockListenPath": "tcp:[::1]:65535"})



def test_cluster_json_files_must_exist_for_the_daemon(tmp_path):
    """Issue 45: ccClusterJson names cc-backend's cluster.json files; a missing one stops a
    delivering command with the key, as ccRestJwtFile does."""
    from ccadapter.config.rules import check_delivery

    there = tmp_path / "cluster.json"
    there.write_text("{}")
    config = parse_config({"ccRestUrl": "http://cc", "ccRestJwt": "x",
                           "ccClusterJson": [str(there), str(tmp_path / "gone.json")]})
    assert missing_files(config) == [("ccClusterJson", str(tmp_path / "gone.json"))]
    with pytest.raises(ConfigError, match="ccClusterJson"):
        check_delivery(config)
