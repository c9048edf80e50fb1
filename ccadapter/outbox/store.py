"""The outbox's SQLite file: schema and its upgrades, transactions, key-value state.

WAL mode, one connection and one lock per process (the state directory's ``outbox.lock``
keeps other processes out, :mod:`ccadapter.runtime.statelock`). ``synchronous=FULL``: a committed
event survives power loss, not only a crash of the process.

A reader (``status``, ``queue list``, the metrics of another process) opens it read-only
(:meth:`Store.reader`): no schema statement, no upgrade, no file created, so that it works
for a user who may only read the state directory and never changes the file under the
daemon's feet.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ccadapter.errors import OutboxError

# The events table, by name: an outbox made before 'energy' events existed has it with a
# narrower CHECK on kind and is rebuilt once from this (see _widen_kinds).
_EVENTS = """
CREATE TABLE IF NOT EXISTS {table} (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster         TEXT    NOT NULL,
    job_id          INTEGER NOT NULL,
    start_time      INTEGER NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('start', 'stop', 'nodestate', 'energy')),
    payload         TEXT    NOT NULL,
    rich            INTEGER NOT NULL DEFAULT 0,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'rejected')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL    NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      REAL    NOT NULL,
    delivered_at    REAL,
    UNIQUE (cluster, job_id, start_time, kind)
);
"""
_EVENTS_INDEXES = """
CREATE INDEX IF NOT EXISTS events_due ON events (status, next_attempt_at);
-- pending events in id order: due() reads the first few due ones without sorting them all
CREATE INDEX IF NOT EXISTS events_pending ON events (status, id);
-- delivered events by age: compaction reads the old ones only, not the whole history
CREATE INDEX IF NOT EXISTS events_delivered ON events (status, delivered_at);
-- the starts of runs cc-backend holds no job of (queue.NOT_HELD): few, counted by status
CREATE INDEX IF NOT EXISTS events_not_held ON events (cluster, job_id)
    WHERE kind = 'start' AND last_error LIKE 'not held: %';
"""
SCHEMA = _EVENTS.format(table="events") + _EVENTS_INDEXES + """
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notify (
    event_id        INTEGER PRIMARY KEY,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'rejected')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL    NOT NULL DEFAULT 0,
    last_error      TEXT,
    delivered_at    REAL
);
CREATE INDEX IF NOT EXISTS notify_due ON notify (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS notify_pending ON notify (status, event_id);
-- runs whose start is stored and whose stop is not: what cc-backend shows as running. Kept
-- by enqueue, so that stale-jobs and nodestate cost what runs, not what ever ran (a week of
-- history at 5 jobs/s is six million events).
CREATE TABLE IF NOT EXISTS runs (
    cluster         TEXT    NOT NULL,
    job_id          INTEGER NOT NULL,
    start_time      INTEGER NOT NULL,
    hosts           TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, job_id, start_time)
) WITHOUT ROWID;
-- the body of each start event (kilobytes: the batch script, slurmInfo), apart from its
-- row: the events table keeps small rows, densely packed, for a week, while a body goes an
-- hour after its run's stop (events.py, compact), freeing whole pages. A row shrunk in
-- place would keep its page for the week.
CREATE TABLE IF NOT EXISTS bodies (
    event_id        INTEGER PRIMARY KEY,
    body            TEXT    NOT NULL
);
"""
# An event forgotten takes its body along (also for a table rebuilt by _widen_kinds).
_BODY_FOLLOWS = """
CREATE TRIGGER IF NOT EXISTS events_gone AFTER DELETE ON events
BEGIN DELETE FROM bodies WHERE event_id = old.id; END
"""

# An outbox written before the bodies table kept each start's body in its row, and a copy
# of it in its stop's: moved once (the stop keeps its own body only).
_MOVE_BODIES = (
    "INSERT OR IGNORE INTO bodies (event_id, body) SELECT id, payload FROM events "
    "WHERE kind = 'start' AND payload != ''",
    "UPDATE events SET payload = '' WHERE kind = 'start' AND payload != ''",
    "UPDATE events SET payload = json_remove(payload, '$.start') WHERE kind = 'stop' "
    "AND payload != ''",
)

# An outbox written before the runs table existed gets it filled once, from its events (the
# start bodies in their rows then, or in the bodies table since).
_FILL_RUNS = """
INSERT OR IGNORE INTO runs (cluster, job_id, start_time, hosts)
SELECT e.cluster, e.job_id, e.start_time, coalesce((SELECT group_concat(
           json_extract(r.value, '$.hostname'), ',') FROM json_each(coalesce((
               SELECT b.body FROM bodies b WHERE b.event_id = e.id), e.payload),
           '$.resources') r), '')
FROM events e WHERE e.kind = 'start' AND (e.payload != '' OR EXISTS (
    SELECT 1 FROM bodies b WHERE b.event_id = e.id)) AND NOT EXISTS (
    SELECT 1 FROM events s WHERE s.cluster = e.cluster AND s.job_id = e.job_id
      AND s.start_time = e.start_time AND s.kind = 'stop')
"""


class Store:
    """Thread-safe: one connection, one lock; writes are batched by the callers."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time,
                 db: sqlite3.Connection | None = None) -> None:
        """``db``: a connection opened already (:meth:`reader`): used as it is."""
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.Lock()
        if db is not None:
            self._db = db
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=30)
        self._incremental_vacuum()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        with self.tx() as db:
            if db.execute("SELECT 1 FROM state WHERE key = 'schema.runs'").fetchone() is None:
                db.execute(_FILL_RUNS)
                db.execute("INSERT INTO state (key, value) VALUES ('schema.runs', '1')")
            if get_state(db, "schema.bodies") is None:
                for statement in _MOVE_BODIES:
                    db.execute(statement)
                put_state(db, "schema.bodies", "1")
            _widen_kinds(db)
            db.execute(_BODY_FOLLOWS)

    def _incremental_vacuum(self) -> None:
        """Pages that compaction frees go back to the file system (:meth:`vacuum`), which
        needs ``auto_vacuum=INCREMENTAL``: set before the first table of a new file, or set
        and applied by one VACUUM for a file made before (seconds for a large one, once)."""
        if self._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
            return
        self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        if self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            self._db.execute("VACUUM")

    def vacuum(self, pages: int = 0) -> None:
        """Give the free pages back to the file system (0: all of them). A failure (a full
        disk) leaves them for the next time. Run by ``executescript``: the pragma frees a
        page per step, and ``execute`` would take one step only."""
        with self._lock, suppress(sqlite3.Error):
            if self._db.execute("PRAGMA freelist_count").fetchone()[0]:
                self._db.executescript(f"PRAGMA incremental_vacuum({int(pages)});")

    @classmethod
    def reader(cls, path: str | Path, clock: Callable[[], float] = time.time) -> Store:
        """The file opened read-only, as it is. A WAL file is read through its ``-shm``
        index, which SQLite must create when no writer has it open; where the directory is
        not writable and there is none, no writer has uncommitted pages either, and the
        file is read as it stands (``immutable``). Raises sqlite3.Error when unreadable."""
        uri = Path(path).absolute().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False,
                             isolation_level=None, timeout=30)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            db.close()
            if Path(f"{path}-wal").exists() or not Path(path).exists():
                raise
            db = sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False,
                                 isolation_level=None)
        return cls(path, clock, db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. A failing COMMIT (disk full) is rolled back too: a
        transaction left open would make every later BEGIN fail, for good."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        with suppress(sqlite3.Error):
                            self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise OutboxError(str(self.path), str(exc)) from None

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads, under the lock (the delivery workers share it)."""
        with self._lock:
            yield self._db

    # --- key-value state (window origins, cycle records, the controller's view) ---------

    def get_state(self, key: str) -> str | None:
        with self.read() as db:
            return get_state(db, key)

    def set_state(self, key: str, value: str) -> None:
        with self.tx() as db:
            put_state(db, key, value)

    def del_state(self, key: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM state WHERE key = ?", (key,))

    def state_items(self, prefix: str) -> dict[str, str]:
        """Every state entry whose key starts with ``prefix``."""
        with self.read() as db:
            rows = db.execute("SELECT key, value FROM state WHERE substr(key, 1, ?) = ? "
                              "ORDER BY key", (len(prefix), prefix)).fetchall()
        return dict(rows)


def get_state(db: sqlite3.Connection, key: str) -> str | None:
    """A state entry read inside a caller's transaction."""
    row = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def put_state(db: sqlite3.Connection, key: str, value: str) -> None:
    """A state entry written inside a caller's transaction."""
    db.execute("INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT (key) "
               "DO UPDATE SET value = excluded.value", (key, value))


def copy_file(source: str | Path, target: str | Path) -> None:
    """Copy an outbox through a read-only connection: the source is neither changed nor
    created (a missing one is an error)."""
    src = sqlite3.connect(f"{Path(source).resolve().as_uri()}?mode=ro", uri=True)
    try:
        dest = sqlite3.connect(target)
        src.backup(dest)
        dest.close()
    finally:
        src.close()


# the lengths of a batch of ids (see batches); the last is the most per statement
BATCH_LENGTHS = (8, 64, 512)


def batches(ids: list[int]) -> Iterator[list[int]]:
    """The ids in order, at most 512 at a time (SQLite limits the parameters of one
    statement), each batch padded with repeats of its last id to one of BATCH_LENGTHS.

    Why the padding: a statement ``... IN (?, ?, ...)`` is prepared once per distinct
    text, and the sqlite3 module keeps up to 128 prepared statements per connection, each
    holding its IN list's program (the longer the list, the larger). With one text per
    length, a daemon whose windows list a different number of runs each cycle fills that
    cache over hours, its memory growing with it (tests/unit/test_outbox_memory.py). With
    three lengths, each query has at most three texts.
    A repeated id changes no answer of ``IN`` and no row an ``UPDATE ... IN`` touches."""
    top = BATCH_LENGTHS[-1]
    for i in range(0, len(ids), top):
        chunk = ids[i:i + top]
        length = next(n for n in BATCH_LENGTHS if n >= len(chunk))
        yield chunk + chunk[-1:] * (length - len(chunk))


def marks(ids: list[int]) -> str:
    return ", ".join("?" * len(ids))


def existing(db: sqlite3.Connection, ids: Iterable[int], condition: str) -> list[int]:
    """Which of ``ids`` exist and meet ``condition`` (a fixed SQL fragment of ours)."""
    found: list[int] = []
    for chunk in batches(sorted(set(ids))):
        found += [r[0] for r in db.execute(
            f"SELECT id FROM events WHERE id IN ({marks(chunk)}) AND {condition} ORDER BY id",
            chunk)]
    return found


def _widen_kinds(db: sqlite3.Connection) -> None:
    """An outbox made before 'energy' events existed refuses them (a CHECK on kind), and
    SQLite cannot alter a CHECK: the events table is copied once into one made from
    :data:`_EVENTS`, in the caller's transaction (seconds for millions of events), keeping
    every row and id and the AUTOINCREMENT counter (ids are never reused: notify rows name
    events by id)."""
    (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' "
                        "AND name = 'events'").fetchone()
    if "'energy'" in sql:
        return
    row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    db.execute(_EVENTS.format(table="events_widened"))
    db.execute("INSERT INTO events_widened SELECT * FROM events")
    db.execute("DROP TABLE events")
    db.execute("ALTER TABLE events_widened RENAME TO events")
    for statement in _EVENTS_INDEXES.split(";"):
        if "CREATE" in statement:
            db.execute(statement)
    if row is not None:  # the copy has no counter if it copied no row
        db.execute("INSERT INTO sqlite_sequence (name, seq) SELECT 'events', 0 WHERE NOT "
                   "EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')")
        db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'events'", row)
