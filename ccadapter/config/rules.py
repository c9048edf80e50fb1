"""Rules across config keys: whether a config can deliver jobs at all, where node states go,
and what an admin may not expect of a combination. Each key alone is checked by the model
(:class:`ccadapter.config.keys.Config`); these need several keys and concern only the commands
that deliver (``daemon``, ``sync``, ``backfill``, ``recover``): ``jobs``, ``status`` and the
built-in defaults deliver nothing and must load whatever they say here."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from ccadapter.config.keys import Config
from ccadapter.errors import ConfigError


def check_delivery(config: Config) -> list[str]:
    """Raise :class:`ConfigError` (the key, what to do) for a config that cannot deliver
    jobs; return what it may deliver badly, one warning a line."""
    if not config.cc_rest_submit_jobs and not config.nats_server:
        raise ConfigError("ccRestSubmitJobs", "false and natsServer empty leave no way to "
                          "deliver jobs: enable one of them")
    if config.cc_rest_submit_jobs and not config.cc_rest_url:
        raise ConfigError("ccRestUrl", "needed to deliver jobs (it is empty); or set "
                          "ccRestSubmitJobs to false and deliver over NATS")
    for key, path in missing_files(config):
        if key in ("ccRestCaBundle", "ccRestJwtFile", "ccClusterJson") or (key.startswith("nats")
                                                         and config.nats_server):
            raise ConfigError(key, f"file {path} does not exist")
    warnings = []
    if not config.cc_rest_submit_jobs and not config.nats_jetstream:
        warnings.append("ccRestSubmitJobs is false and natsJetStream is off: jobs go out on "
                        "core NATS only, which keeps no message a subscriber misses; set "
                        "natsJetStream to true for delivery that is acknowledged and "
                        "deduplicated")
    return warnings + node_state_warnings(config)


class Target(StrEnum):
    """Where events go out: cc-backend's REST API or NATS."""

    REST = "rest"
    NATS = "nats"


def node_state_path(config: Config) -> Target | None:
    """Where node states go: REST (``/api/nodestate/``), NATS (natsNodeStateSubject) or
    None (nowhere: no nodestate reconciler). See :mod:`ccadapter.daemon.build`."""
    if not config.cc_rest_submit_jobs and config.nats_server and \
            config.nats_node_state_subject:
        return Target.NATS
    return Target.REST if config.cc_rest_url else None


def node_state_warnings(config: Config) -> list[str]:
    """What an admin may not expect of their node-state settings, one line each."""
    if config.nats_node_state_subject and node_state_path(config) != Target.NATS:
        return ["natsNodeStateSubject is used only when NATS is the job path "
                "(ccRestSubmitJobs: false, natsServer set); node states go to cc-backend's "
                "REST API (/api/nodestate/), as a cc-backend that takes jobs over REST does "
                "not read NATS"]
    if not config.cc_rest_submit_jobs and node_state_path(config) is None:
        return ["node states are not sent: set natsNodeStateSubject to cc-backend's "
                "subject-node-state (e.g. cc.node.state), or ccRestUrl for /api/nodestate/"]
    return []


def missing_files(config: Config) -> list[tuple[str, str]]:
    """Files the config names that do not exist, as (key, path)."""
    out = []
    for key, path in (
        ("ccRestCaBundle", config.cc_rest_ca_bundle),
        ("ccRestJwtFile", config.cc_rest_jwt_file),
        ("natsPasswordFile", config.nats_password_file),
        ("natsCredsFile", config.nats_creds_file),
        ("natsNKeySeedFile", config.nats_nkey_seed_file),
        ("natsTlsCaFile", config.nats_tls_ca_file),
        ("natsTlsCertFile", config.nats_tls_cert_file),
        ("natsTlsKeyFile", config.nats_tls_key_file),
        *(("ccClusterJson", p) for p in config.cc_cluster_json),
    ):
        if path and not Path(path).is_file():
            out.append((key, path))
    return out
