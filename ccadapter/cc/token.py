"""The JWT cc-backend is sent, as the site keeps it now.

A site rotates tokens: a new one is written into ``ccRestJwtFile`` and the old one expires
or is revoked. Read once at start, every request after the rotation would be refused (401)
until someone restarts the daemon, with events waiting meanwhile. So the file is looked at
again (a ``stat``, at most once a second) and read again when it changed -- its inode, size,
or modification time, as a rename, an in-place write or a copy that keeps the old mtime
each change one of them -- and at once after a refusal (a 401 may come before the second is
over). A file that cannot be read (half-rotated, permissions) keeps the token read before,
said once until it reads again. A token given in the config itself (``ccRestJwt``) is fixed.

:attr:`TokenSource.key` names where the token comes from, so that a refusal tells the
operator which key to look at. The token itself never leaves :meth:`TokenSource.current`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ccadapter.errors import ConfigError

log = logging.getLogger(__name__)

CHECK_EVERY = 1.0  # seconds between two looks at the file


class TokenSource:
    def __init__(self, read: Callable[[], str], path: str = "", key: str = "ccRestJwt",
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``read``: the token from the config (raises ConfigError naming the key);
        ``path``: the file it is kept in ("" when it is in the config itself)."""
        self._read = read
        self.path = path
        self.key = key
        self.clock = clock
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._token = read()
        self._looked = clock()
        self._failing = False

    @classmethod
    def fixed(cls, token: str) -> TokenSource:
        """A token that never changes (tests, one-shot clients)."""
        return cls(lambda: token)

    @property
    def where(self) -> str:
        """How a message names the token's origin: ``ccRestJwtFile (/etc/...)``."""
        return f"{self.key} ({self.path})" if self.path else self.key

    def current(self) -> str:
        """The token to send now."""
        if not self.path:
            return self._token
        with self._lock:
            now = self.clock()
            if now - self._looked >= CHECK_EVERY:
                self._looked = now
                self._reload_if_changed()
            return self._token

    def refused(self, sent: str) -> bool:
        """cc-backend refused the token ``sent``: look at the file now, not a second later.
        True when a token other than the refused one is to be sent now."""
        if not self.path:
            return False
        with self._lock:
            self._looked = self.clock()
            self._reload_if_changed(force=True)
            return self._token != sent

    def _reload_if_changed(self, force: bool = False) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp and not self._failing and not force:
            return
        try:
            token = self._read()
        except ConfigError as exc:
            if not self._failing:
                log.error("%s; the token read before is sent until it reads again", exc)
            self._failing = True
            return
        if self._failing:
            log.info("%s reads again", self.where)
        self._failing = False
        self._stamp = stamp
        if token != self._token:
            self._token = token
            log.info("%s changed: the new token is sent from now on", self.where)

    def _file_stamp(self) -> tuple[int, int, int] | None:
        if not self.path:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns
