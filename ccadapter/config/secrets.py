"""What of the config is secret, and how a secret is kept out of what is shown: the secret
keys, the passwords inside URLs, and the scrubbing of other programs' texts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

# Keys whose values are secrets: never logged, never echoed in errors.
SECRET_KEYS = frozenset({"ccRestJwt", "natsPassword"})
# The files a secret may be kept in instead, so that the config file holds none and may be
# read by the hook (which runs as SlurmUser) and by admins: secret key -> its file's key.
SECRET_FILE_KEYS = {"ccRestJwt": "ccRestJwtFile", "natsPassword": "natsPasswordFile"}
# Keys holding a URL, which may carry user:password@ (the password is a secret too).
URL_KEYS = ("ccRestUrl", "natsServer")
REDACTED = "<redacted>"


def url_password(url: str) -> str:
    """The password of ``scheme://user:password@host...``; "" when there is none."""
    netloc = urlsplit(url).netloc if "://" in url else ""
    userinfo, at, _ = netloc.rpartition("@")
    return userinfo.partition(":")[2] if at else ""


def safe_url(url: str) -> str:
    """The URL as it may be shown: without its user:password@ part."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{slash}{path}"


def scrub(obj: Any, secrets: Iterable[str]) -> Any:
    """``obj`` with every occurrence of a secret in its strings replaced. A status shows
    error texts of other programs (cc-backend's answers, exceptions); none may carry one."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return obj
    if isinstance(obj, str):
        for secret in secrets:
            obj = obj.replace(secret, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {k: scrub(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub(v, secrets) for v in obj]
    return obj
