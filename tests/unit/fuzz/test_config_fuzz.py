"""Bad input for the config: random objects with the real key names, and random files.

Every case must end in a Config or a ConfigError naming a key, ``ccadapter check-config``
must exit 0 or 2 (never a traceback), and the values of secret keys (ccRestJwt,
natsPassword) must never appear in what is printed or logged.
"""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ccadapter.cli import main
from ccadapter.config.keys import Config
from ccadapter.config.load import load_config, parse_config
from ccadapter.config.secrets import SECRET_KEYS
from ccadapter.errors import ConfigError
from tests.conftest import whoami

pytestmark = pytest.mark.fuzz

KEYS = sorted({f.alias for f in Config.model_fields.values() if f.alias}
              | {"slurmQueryMaxRetries"})
# A key as written: the real spelling, another case (Go's encoding/json matches keys
# case-insensitively, and so do we), or a key no version knows.
KEY_SPELLINGS = (st.sampled_from(KEYS) | st.sampled_from(KEYS).map(str.upper)
                 | st.sampled_from(KEYS).map(str.lower) | st.text(max_size=10))
NASTY = st.sampled_from(["", " ", "(", "[a-", "*", "::", "http://", "nats://", "tls://x:1",
                         "[::1]:9102", ":0", ":65536", "/", "\x00", "²", "💥", "a" * 300])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([10**400, -(10**400)]) | st.floats() | st.text(max_size=12) | NASTY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=6,
)
# Distinctive, so that finding one in the output can only mean it leaked.
SECRETS = (st.from_regex(r"S3CRET-[a-z0-9]{8}", fullmatch=True)
           | st.sampled_from([7373555012345, ["S3CRET-list"], {"S3CRET-key": "S3CRET-v"}]))
ALLOWED_KEYS = {k.lower() for k in KEYS} | {"<top level>", "<file>"}


@st.composite
def config_object(draw: st.DrawFn) -> dict:
    raw = draw(st.dictionaries(KEY_SPELLINGS, VALUES, max_size=8))
    for key in SECRET_KEYS:
        if draw(st.booleans()):
            raw[key] = draw(SECRETS)
    return raw


def _secret_texts(raw: object) -> list[str]:
    """The secret values of ``raw`` as they could show up in text."""
    if not isinstance(raw, dict):
        return []
    out = []
    for key, value in raw.items():
        if isinstance(key, str) and key.lower() in {k.lower() for k in SECRET_KEYS}:
            out.extend([str(value), json.dumps(value)] if value not in ("", None) else [])
    return [t for t in out if len(t) >= 6]


def _check_error(exc: ConfigError, raw: object) -> None:
    assert exc.key.split(".")[0].lower() in ALLOWED_KEYS, exc.key
    assert str(exc).startswith(f"config key {exc.key!r}: ")
    for secret in _secret_texts(raw):
        assert secret not in str(exc)


@settings(max_examples=1500)
@given(config_object() | VALUES)
def test_parse_config_returns_config_or_names_a_key(raw: object) -> None:
    try:
        config = parse_config(raw)
    except ConfigError as exc:
        _check_error(exc, raw)
    else:
        assert isinstance(config, Config)
        for secret in _secret_texts(raw):
            assert secret not in repr(config) and secret not in json.dumps(config.redacted())


FILE_BODIES = (
    config_object().map(lambda raw: json.dumps(raw).encode())
    | st.text().map(str.encode)
    | st.binary(max_size=200)
    | st.integers(4301, 9000).map(lambda n: b'{"natsPort": ' + b"9" * n + b"}")
    | st.integers(1000, 50_000).map(lambda n: b"[" * n + b"]" * n)
    | config_object().map(lambda raw: json.dumps(raw).encode()[:-1])  # cut short
    | config_object().map(lambda raw: b"\xff" + json.dumps(raw).encode())  # not UTF-8
)


@settings(max_examples=300)
@given(body=FILE_BODIES)
def test_check_config_exits_0_or_2_and_keeps_secrets(tmp_path_factory: pytest.TempPathFactory,
                                                     body: bytes) -> None:
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_bytes(body)
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError):
        raw = None
    try:
        load_config(path)
    except ConfigError as exc:
        _check_error(exc, raw)
    logs = _Logs()
    logging.getLogger("ccadapter").addHandler(logs)
    try:
        result = CliRunner().invoke(main, ["check-config", str(path), *whoami()])
    finally:
        logging.getLogger("ccadapter").removeHandler(logs)
    assert result.exit_code in (0, 2), (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for secret in _secret_texts(raw):
        assert secret not in result.output and secret not in logs.text


class _Logs(logging.Handler):
    """Everything ccadapter logs during one command (warnings name keys, never values)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.text += record.getMessage() + "\n"

