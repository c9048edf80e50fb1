"""What the components read from the config beyond its keys as written: patterns compiled,
addresses parsed, secrets read from their files, the state directory and the outbox in it.
:class:`ConfigViews` is a base of :class:`~ccadapter.config.keys.Config`, which declares
the keys these read."""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path
from typing import Any

from ccadapter.config.secrets import (
    REDACTED,
    SECRET_FILE_KEYS,
    SECRET_KEYS,
    URL_KEYS,
    url_password,
)
from ccadapter.errors import ConfigError

OUTBOX_FILE = "outbox.sqlite"

HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def parse_listen_address(value: str) -> tuple[str, int] | None:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` -> (host, port); ``""`` -> None.

    Checked when the file is loaded, so a typo exits 2 naming the key instead of failing
    (or listening somewhere unexpected) when the daemon binds. ``:PORT`` is every IPv4
    address, as for Python's servers; ``[::]:PORT`` asks for IPv6.
    """
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be HOST:PORT, [IPv6]:PORT or :PORT with a port from 1 to "
                         f"65535, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError(f"{host} is not an IPv6 address") from None
        return host[1:-1], int(port)
    if ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, e.g. [::1]:{port}; got {value!r}")
    if host and not HOSTNAME.match(host):
        raise ValueError(f"{host!r} is neither an IP address nor a host name")
    return host or "0.0.0.0", int(port)


class ConfigViews:
    """The derived views of :class:`~ccadapter.config.keys.Config` (its base: the model
    declares the keys, these read them)."""

    def gpu_pci_patterns(self) -> list[tuple[re.Pattern[str], list[str]]]:
        """Host regexes in file order; the first match wins."""
        return [(re.compile(p), addrs) for p, addrs in self.gpu_pci_addrs.items()]

    def ignore_hosts_pattern(self) -> re.Pattern[str] | None:
        return re.compile(self.ignore_hosts) if self.ignore_hosts else None

    def nats_url(self) -> str:
        """natsServer and natsPort as one URL: cc-slurm-adapter's host name form, or a URL
        (which then brings its own port)."""
        if "://" in self.nats_server:
            return self.nats_server
        host = self.nats_server
        if ":" in host and not host.startswith("["):  # an IPv6 address
            host = f"[{host}]"
        tls = self.nats_tls_ca_file or self.nats_tls_cert_file
        return f"{'tls' if tls else 'nats'}://{host}:{self.nats_port}"

    def state_dir(self) -> Path:
        """The directory of the outbox and its lock: ``stateDirectory``, or when that is
        empty the directory of ``lastRunPath``."""
        if self.state_directory:
            return Path(self.state_directory)
        return Path(self.last_run_path).parent

    def multi_cluster(self) -> bool:
        """Whether clusters are named (``slurmClusters`` set): then every Slurm command
        carries ``--clusters NAME`` and each cluster's state its name."""
        return bool(self.slurm_clusters)

    def controller_host(self) -> str:
        """This host as a SlurmctldHost: ``slurmctldHostName`` or the system's host name."""
        return self.slurmctld_host_name or socket.gethostname()

    def rest_jwt(self) -> str:
        """ccRestJwt, from the config or from ccRestJwtFile (read now: a token renewed on
        disk is taken at the next start). Raises ConfigError naming the key."""
        return self._secret("ccRestJwt", self.cc_rest_jwt, self.cc_rest_jwt_file)

    def nats_secret(self) -> str:
        """natsPassword, from the config or from natsPasswordFile."""
        return self._secret("natsPassword", self.nats_password, self.nats_password_file)

    def _secret(self, key: str, value: str, path: str) -> str:
        if not path:
            return value
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(SECRET_FILE_KEYS[key], f"cannot read {path}: "
                              f"{exc.strerror or type(exc).__name__}") from None
        except UnicodeDecodeError:
            raise ConfigError(SECRET_FILE_KEYS[key], f"{path} is not UTF-8 text") from None
        lines = text.strip().splitlines()
        if not lines or not lines[0].strip():
            raise ConfigError(SECRET_FILE_KEYS[key], f"{path} is empty")
        return lines[0].strip()

    def allowed_peers(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """prepSockAllowedPeers as networks (an address is a network of one)."""
        return [ipaddress.ip_network(peer, strict=False) for peer in self.prep_sock_allowed_peers]

    def metrics_address(self) -> tuple[str, int] | None:
        """(host, port) to serve metrics on; None when metrics are off."""
        return parse_listen_address(self.metrics_listen)

    def redacted(self) -> dict[str, Any]:
        """The config as the file would spell it, secrets replaced (a password inside a
        URL too), for display."""
        data = self.model_dump(by_alias=True)
        for key in SECRET_KEYS:
            if data.get(key):
                data[key] = REDACTED
        for key in URL_KEYS:
            if password := url_password(data[key]):
                data[key] = data[key].replace(f":{password}@", f":{REDACTED}@", 1)
        return data

    def secret_values(self) -> list[str]:
        """Every secret the config holds (the secret keys' values, those of their files
        where this process may read them, and the passwords inside its URLs), for scrubbing
        texts of other programs before they are shown."""
        values = []
        for read in (self.rest_jwt, self.nats_secret):
            try:
                values.append(read())
            except ConfigError:
                continue  # a file this user may not read: nothing of it can be shown
        data = self.model_dump(by_alias=True)
        return [v for v in values if v] + [pw for k in URL_KEYS if (pw := url_password(data[k]))]


def outbox_path(config: ConfigViews) -> Path:
    """The outbox file of a config (``stateDirectory``, or lastRunPath's directory)."""
    return config.state_dir() / OUTBOX_FILE
