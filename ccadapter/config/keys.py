"""The configuration file: cc-slurm-adapter's JSON keys, unchanged, plus our own.

A site migrating from cc-slurm-adapter keeps its config file as it is. Go's ``encoding/json``
matches keys case-insensitively and ignores unknown ones, so we do the same for matching and
warn (instead of silently ignoring) on unknown keys. The documented example of
cc-slurm-adapter spells the retry key ``slurmQueryMaxRetries`` while its code reads
``slurmMaxRetries``; both are accepted.

Loading validates types, ranges and regexes without touching the file system, so a config
can be checked on any machine; :func:`ccadapter.config.rules.missing_files` is the separate
check that the files it names exist, done where they are needed (the daemon,
``check-config``).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from ccadapter.config.secrets import safe_url
from ccadapter.config.views import HOSTNAME, ConfigViews, parse_listen_address
from ccadapter.model import ALL_CLUSTERS, valid_cluster_name
from ccadapter.prep.hook import parse_spec


def _compile(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


def _listen_address(value: str) -> str:
    parse_listen_address(value)
    return value


def _socket_spec(value: str) -> str:
    """A hook socket as the hook and the daemon read it (:func:`parse_spec`): checked when
    the file is loaded, so that check-config and the daemon refuse it alike, naming the key,
    instead of the daemon failing when it binds."""
    parse_spec(value)
    return value


# Text keys checked when the file is loaded, kept as written.
HostRegex = Annotated[str, AfterValidator(_compile)]
ListenAddress = Annotated[str, AfterValidator(_listen_address)]
SocketSpec = Annotated[str, AfterValidator(_socket_spec)]


class Config(ConfigViews, BaseModel):
    """One model for the whole file; attribute names are Pythonic, aliases are the file's.
    It declares each of the file's keys with its default and alias, and the checks of
    single keys beside them; the file is flat (as cc-slurm-adapter defines it), so the
    model is too. Rules across keys are :mod:`ccadapter.config.rules`."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    # --- cc-slurm-adapter keys, same defaults ---------------------------------------------
    pid_file_path: str = Field("/run/cc-slurm-adapter/daemon.pid", alias="pidFilePath")
    prep_sock_listen_path: SocketSpec = Field(
        "/run/cc-slurm-adapter/daemon.sock", alias="prepSockListenPath"
    )
    prep_sock_connect_path: SocketSpec = Field(
        "/run/cc-slurm-adapter/daemon.sock", alias="prepSockConnectPath"
    )
    last_run_path: str = Field("/var/lib/cc-slurm-adapter/lastrun", alias="lastRunPath")
    slurm_poll_interval: int = Field(60, alias="slurmPollInterval")
    slurm_query_delay: int = Field(1, alias="slurmQueryDelay")
    slurm_query_max_span: int = Field(7 * 24 * 3600, alias="slurmQueryMaxSpan")
    slurm_max_retries: int = Field(10, alias="slurmMaxRetries", ge=0)
    cc_rest_url: str = Field("", alias="ccRestUrl")
    cc_rest_jwt: str = Field("", alias="ccRestJwt", repr=False)
    cc_rest_submit_jobs: bool = Field(True, alias="ccRestSubmitJobs")
    cc_poll_interval: int = Field(6 * 3600, alias="ccPollInterval")
    gpu_pci_addrs: dict[str, list[str]] = Field(default_factory=dict, alias="gpuPciAddrs")
    ignore_hosts: HostRegex = Field("", alias="ignoreHosts")
    nats_server: str = Field("", alias="natsServer")
    nats_port: int = Field(4222, alias="natsPort", gt=0, lt=65536)
    nats_subject: str = Field("jobs", alias="natsSubject")
    nats_user: str = Field("", alias="natsUser")
    nats_password: str = Field("", alias="natsPassword", repr=False)
    nats_creds_file: str = Field("", alias="natsCredsFile")
    nats_nkey_seed_file: str = Field("", alias="natsNKeySeedFile")

    # --- our own keys ---------------------------------------------------------------------
    # A file holding ccRestJwt (its first line), readable by the daemon's user alone; the
    # config file then holds no secret. Mutually exclusive with ccRestJwt. A systemd
    # credential works too: LoadCredential=jwt:/etc/... and the path
    # /run/credentials/ccadapter.service/jwt.
    cc_rest_jwt_file: str = Field("", alias="ccRestJwtFile")
    # The same for natsPassword.
    nats_password_file: str = Field("", alias="natsPasswordFile")
    # Put in front of every Slurm command, e.g. ["chroot", "/srv/slurm24"] or ["ssh", "ctld"].
    slurm_command_prefix: list[str] = Field(default_factory=list, alias="slurmCommandPrefix")
    # Seconds one Slurm command may take before it is killed and counted as failed.
    slurm_command_timeout: float = Field(60.0, alias="slurmCommandTimeout", gt=0)
    # Fetch batch scripts from slurmctld when slurmdbd does not store them (one call per job).
    slurm_fetch_job_scripts: bool = Field(True, alias="slurmFetchJobScripts")
    # How far before lastRun each window starts. slurmdbd learns of a job's start and end
    # from slurmctld with a delay (seconds, minutes under load); cc-slurm-adapter's 1 s
    # overlap loses the jobs whose records arrive later than the next window. Repeating a
    # stretch costs one longer sacct answer: events are idempotent.
    slurm_window_overlap: float = Field(120.0, alias="slurmWindowOverlap", ge=1)
    # Group that may connect to a UNIX prepSockListenPath (the hook runs as SlurmUser).
    prep_sock_group: str | None = Field(None, alias="prepSockGroup")
    # CA bundle for cc-backend's TLS certificate (default: the system's CA store).
    cc_rest_ca_bundle: str = Field("", alias="ccRestCaBundle")
    # How long cc-backend 1.5 may keep a new job in its job cache before GET /api/jobs/ lists
    # it (its commit-job-worker interval: 2 min by default, 1 min in its sample config).
    # cc-cache sends no start again that was delivered less than this long ago.
    cc_commit_job_interval: float = Field(300.0, alias="ccCommitJobInterval", ge=0)
    # Where the outbox (and its lock) live. Empty: the directory of lastRunPath, so that two
    # configs with their own lastRunPath (two clusters on one host) get their own outbox;
    # cc-slurm-adapter's default lastRunPath keeps /var/lib/cc-slurm-adapter.
    state_directory: str = Field("", alias="stateDirectory")
    # Publish to a JetStream stream (acknowledged, deduplicated by Nats-Msg-Id) instead of
    # core NATS (fire and forget). Needed for ccRestSubmitJobs=false: then NATS is the only
    # delivery path and must be durable.
    nats_jetstream: bool = Field(False, alias="natsJetStream")
    # TLS towards the NATS server: CA bundle, and a client certificate and key if the
    # server verifies clients. Setting any of them (or a tls:// natsServer) turns TLS on.
    nats_tls_ca_file: str = Field("", alias="natsTlsCaFile")
    nats_tls_cert_file: str = Field("", alias="natsTlsCertFile")
    nats_tls_key_file: str = Field("", alias="natsTlsKeyFile")
    # Seconds a publish may wait for the server's (or the stream's) acknowledgement.
    nats_publish_timeout: float = Field(5.0, alias="natsPublishTimeout", gt=0, le=300)
    # The subject cc-backend (1.5.4+) reads node states from (its `subject-node-state`, e.g.
    # "cc.node.state"). Used when NATS is the job path (ccRestSubmitJobs=false): node states
    # then go there instead of to /api/nodestate/. Empty: node states keep going over REST
    # (when ccRestUrl is set), as before this key existed.
    nats_node_state_subject: str = Field("", alias="natsNodeStateSubject")
    # Where the daemon serves Prometheus metrics: "127.0.0.1:9102", "[::1]:9102" or ":9102"
    # (every IPv4 address). Empty: no metrics, no listening socket.
    metrics_listen: ListenAddress = Field("", alias="metricsListen")
    # The Slurm clusters one daemon serves (several clusters of one slurmdbd): names, or
    # ["*"] for every cluster `sacctmgr list clusters` names, as cc-slurm-adapter does. Each
    # gets `--clusters NAME` on every Slurm command and state of its own (see
    # ccadapter.model). Empty: the local cluster only, without --clusters, as before.
    slurm_clusters: list[str] = Field(default_factory=list, alias="slurmClusters")
    # With ["*"]: seconds between two readings of the cluster list (a cluster added to
    # slurmdbd is served from the next one on, a deleted one is no longer polled).
    slurm_cluster_list_interval: float = Field(300.0, alias="slurmClusterListInterval", ge=1)
    # Further hook sockets, one per cluster whose slurmctld's hook sends elsewhere than
    # prepSockListenPath: {"CLUSTER": "tcp:HOST:PORT" or a UNIX path}. A message is routed
    # by its SLURM_CLUSTER_NAME whatever socket it came in on; one without that name belongs
    # to the socket's cluster. Needs slurmClusters.
    prep_sock_cluster_listen_paths: dict[str, str] = Field(
        default_factory=dict, alias="prepSockClusterListenPaths")
    # Who may send hook messages to a TCP prepSockListenPath: IP addresses or networks
    # ("127.0.0.1", "10.1.2.0/24", "::1"); a connection from elsewhere is closed unread.
    # Empty: any peer that reaches the port (keep it to the controller hosts with a firewall
    # or a loopback bind address). UNIX sockets are guarded by their mode and prepSockGroup.
    prep_sock_allowed_peers: list[str] = Field(default_factory=list,
                                               alias="prepSockAllowedPeers")
    # Controller failover: slurm.conf lists SlurmctldHost more than once and a daemon runs
    # beside each slurmctld. Only the daemon beside the one in control (scontrol ping) finds
    # and sends jobs; the others stand by. Off: this daemon always works, as before. With
    # slurmClusters the controllers are the local cluster's (this host's slurm.conf), and the
    # daemon in control works for every cluster it serves.
    slurmctld_failover: bool = Field(False, alias="slurmctldFailover")
    # This host's name as SlurmctldHost spells it (before any "(address)"); empty: the host
    # name the system gives (socket.gethostname()), compared without domain and case.
    slurmctld_host_name: str = Field("", alias="slurmctldHostName")
    # cc-backend's cluster.json files (its job archive's, one per cluster): the topology a
    # job's resources are mapped through (Slurm's abstract CPU ids and GRES indices to OS
    # processor ids and accelerator ids), read again when a file changes. Empty: cc-backend's
    # own, asked with GET /api/clusters/ (ccRestUrl); a site that reaches cc-backend by NATS
    # alone names the files here. See the README, "Resources in cc-backend's numbering".
    cc_cluster_json: list[str] = Field(default_factory=list, alias="ccClusterJson")

    @field_validator(
        "slurm_poll_interval", "slurm_query_delay", "cc_poll_interval", "slurm_query_max_span"
    )
    @classmethod
    def _positive_interval(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        # cc-slurm-adapter turns 0 into 1 (0 would be busy waiting); so do we.
        return max(value, 1)

    @field_validator("gpu_pci_addrs")
    @classmethod
    def _gpu_regexes(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for pattern in value:
            _compile(pattern)
        return value

    @field_validator("cc_rest_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^/\s]+", value):
            # shown without what a password could be (the value may be a mistyped URL)
            raise ValueError(f"must be an http:// or https:// URL, got {safe_url(value)!r}")
        return value.rstrip("/")

    @field_validator("nats_server")
    @classmethod
    def _nats_server(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        bad = (scheme not in ("nats", "tls") or not rest) if sep else \
            any(c in value for c in "/@ ")
        if bad:  # the value is not echoed: a URL may carry user:password@
            raise ValueError("must be a host name (as in cc-slurm-adapter) or a nats:// or "
                             "tls:// URL")
        if not sep and ":" in value and not _ipv6(value):
            # host:port would become nats://[host:port]:4222, which no server answers
            raise ValueError(f"{value!r} holds a port: put the port in natsPort (or write "
                             f"nats://{value})")
        return value

    @field_validator("nats_node_state_subject")
    @classmethod
    def _publish_subject(cls, value: str) -> str:
        """A subject one can publish to: dot-separated tokens without wildcards (cc-backend
        subscribes to one literal subject) or white space (which would split the protocol's
        PUB line)."""
        if value and not all(tok and not set(tok) & set("*> \t\r\n")
                             for tok in value.split(".")):
            raise ValueError(f"must be a NATS subject to publish to, such as "
                             f"\"cc.node.state\" (no wildcards, spaces or empty tokens), "
                             f"got {value!r}")
        return value

    @field_validator("slurmctld_host_name")
    @classmethod
    def _host_name(cls, value: str) -> str:
        if value and not HOSTNAME.match(value):
            raise ValueError(f"must be a host name as SlurmctldHost spells it (without the "
                             f"address in parentheses), got {value!r}")
        return value

    @field_validator("slurm_clusters")
    @classmethod
    def _cluster_names(cls, value: list[str]) -> list[str]:
        if ALL_CLUSTERS in value and value != [ALL_CLUSTERS]:
            raise ValueError(f'"{ALL_CLUSTERS}" stands for every cluster and goes alone: '
                             f'["{ALL_CLUSTERS}"]')
        for name in value:
            if name != ALL_CLUSTERS and not valid_cluster_name(name):
                raise ValueError(f"{name[:80]!r} is not a Slurm cluster name (letters, digits, "
                                 "'_', '.', '-')")
        if len(set(value)) < len(value):
            raise ValueError("names a cluster twice")
        return value

    @field_validator("prep_sock_cluster_listen_paths")
    @classmethod
    def _cluster_sockets(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if not value:
            return value
        clusters = info.data.get("slurm_clusters")
        if not clusters:
            raise ValueError("needs slurmClusters: the default mode serves the local cluster "
                             "on prepSockListenPath alone")
        seen = {info.data.get("prep_sock_listen_path")}
        for name, spec in value.items():
            if clusters != [ALL_CLUSTERS] and name not in clusters:
                raise ValueError(f"{name[:80]!r} is not in slurmClusters")
            try:
                parse_spec(spec)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
            if spec in seen:
                raise ValueError(f"{name}: {spec} is prepSockListenPath or another cluster's "
                                 "socket; one socket serves every cluster already")
            seen.add(spec)
        return value

    @field_validator("cc_rest_jwt_file", "nats_password_file")
    @classmethod
    def _one_source(cls, value: str, info: ValidationInfo) -> str:
        secret = {"cc_rest_jwt_file": "cc_rest_jwt", "nats_password_file": "nats_password"}
        key = secret[info.field_name or ""]
        if value and info.data.get(key):
            raise ValueError(f"set either it or {_alias(key)}, not both")
        return value

    @field_validator("prep_sock_allowed_peers")
    @classmethod
    def _peers(cls, value: list[str]) -> list[str]:
        for peer in value:
            try:
                ipaddress.ip_network(peer, strict=False)
            except ValueError:
                raise ValueError(f"{peer[:80]!r} is not an IP address or network (such as "
                                 "127.0.0.1, 10.1.2.0/24 or ::1)") from None
        return value


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _alias(field: str) -> str:
    """The file's spelling of a field name (``cc_rest_jwt`` -> ``ccRestJwt``)."""
    return Config.model_fields[field].alias or field
