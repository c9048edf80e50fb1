"""Reading the config file: decoded JSON to a :class:`~ccadapter.config.keys.Config`, keys
matched case-insensitively, aliases taken, unknown keys warned about, the first bad key named."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ccadapter.config.keys import Config
from ccadapter.config.secrets import SECRET_KEYS
from ccadapter.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = "/etc/cc-slurm-adapter/config.json"

# Keys we accept under another spelling; value is the canonical key.
_ALIASES = {"slurmQueryMaxRetries": "slurmMaxRetries"}


def _canonical_keys() -> dict[str, str]:
    """Lower-cased spelling -> the spelling the model knows, for case-insensitive matching."""
    keys = {f.alias: f.alias for f in Config.model_fields.values() if f.alias}
    keys.update(_ALIASES)
    return {k.lower(): v for k, v in keys.items()}


def _normalise(raw: dict[str, Any]) -> dict[str, Any]:
    canon = _canonical_keys()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        target = canon.get(key.lower())
        if target is None:
            log.warning("config: unknown key %r ignored", key)
            continue
        if target in out:
            log.warning("config: key %r given twice (as %r); the later one wins", target, key)
        out[target] = value
    return out


def parse_config(raw: Any, source: str = "<config>") -> Config:
    """Validate decoded JSON; raises :class:`ConfigError` naming the first bad key."""
    if not isinstance(raw, dict):
        raise ConfigError("<top level>", f"{source} must hold a JSON object")
    try:
        return Config.model_validate(_normalise(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "<top level>"
        msg = err["msg"].removeprefix("Value error, ")
        if key.split(".")[0] in SECRET_KEYS:
            msg = "invalid value (not shown: it is a secret)"
        raise ConfigError(key, msg) from None


def load_config(path: str | Path) -> Config:
    """Read and validate the config file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("<file>", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("<file>", f"{path} is not UTF-8 text (byte {exc.start})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError("<file>", f"{path} is not valid JSON: {exc}") from None
    except ValueError:
        # A number past Python's 4,300-digit limit. Not echoed: it may sit in a secret.
        raise ConfigError("<file>", f"{path} holds a number too long to read") from None
    except RecursionError:
        raise ConfigError("<file>", f"{path} is nested too deeply to read") from None
    return parse_config(raw, str(path))
