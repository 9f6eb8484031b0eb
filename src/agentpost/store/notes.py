"""The read behind `agentpost hook claude`: new mail for one agent, on the SQLite file directly.

A Claude Code hook runs before every prompt and after every tool call, so it must cost next to
nothing: this module uses only the standard library (sqlite3, no SQLAlchemy, no event loop), opens
the database read-only, and never writes to it. What the hook has already told is kept beside the
database in small files (`hook-cursors/<agent>`, written atomically, one lock per agent), so two
hooks running at once still tell each message once. A cursor remembers the start of the session
it was kept for: a newer session of the agent starts afresh at its own start, unless that one
still runs.

The queries name the tables and columns of `agentpost.store.schema`; tests/cli/test_hook.py runs
them on a database the real store made.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CURSORS_DIR = "hook-cursors"
BUSY_MS = 100
"""A reader of a WAL database waits only for a checkpoint's brief lock; the hook gives up fast."""
LOCK_WAIT_S = 2.0
"""How long a hook waits for another hook of the agent (which takes milliseconds) to finish:
one stuck must not hold every prompt and tool call of the session up to Claude Code's timeout."""


@dataclass(frozen=True, slots=True)
class LiveSession:
    agent: str
    pid: int
    started_at: float
    project: str | None = None
    """Read by the commit guard only (the hook has no use for it)."""
    id: str | None = None
    """Read by the command line only, which acts in the session it runs under."""
    pid_start: str | None = None
    """Its process's `process_start` when it opened (None: unknown, as before 0021)."""


@dataclass(frozen=True, slots=True)
class Note:
    """One new message, as much as a one-line note needs."""

    seq: int
    id: str
    sender: str
    kind: str
    channel: str | None
    subject: str
    body: str
    priority: str
    trust: str


def database_path(url: str) -> Path:
    """The file of a `sqlite:///…` URL (as `agentpost.store.sqlite` reads it)."""
    return Path(url.removeprefix("sqlite:///")).expanduser()


@contextlib.contextmanager
def _reader(path: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_MS / 1000)
    try:
        yield db
    finally:
        db.close()


# `*`, read by name: the hook runs the installed agentpost, while a session's server that is
# older may not have migrated the file yet (0021 added `pid_start`).
_LIVE_SESSIONS = """
SELECT * FROM sessions
WHERE ended_at IS NULL AND transport = 'stdio' AND host = ? AND pid IS NOT NULL
ORDER BY started_at DESC
"""
_STARTED_AT = """
SELECT max(started_at) FROM sessions
WHERE agent = ? AND ended_at IS NULL AND transport = 'stdio' AND host = ?
"""
_LIVE_SINCE = """
SELECT 1 FROM sessions
WHERE agent = ? AND ended_at IS NULL AND transport = 'stdio' AND host = ? AND started_at <= ?
LIMIT 1
"""
_AGENT = "SELECT 1 FROM agents WHERE name = ?"
# From the newest back: a session's start is recent, and no index orders messages by time.
_SEQ_BEFORE = (
    "SELECT coalesce((SELECT seq FROM messages WHERE created_at <= ? ORDER BY seq DESC LIMIT 1), 0)"
)
_NEWEST_SEQ = "SELECT coalesce(max(message_seq), 0) FROM deliveries WHERE recipient = ?"
_DELIVERED_AFTER = """
SELECT m.seq, m.id, m.sender, m.kind, m.channel, m.subject, substr(m.body, 1, 400), m.priority,
       m.trust, d.state, d.expires_at
FROM deliveries d JOIN messages m ON m.seq = d.message_seq
WHERE d.recipient = ? AND d.message_seq > ?
ORDER BY d.message_seq
LIMIT ?
"""


def live_local_sessions(path: Path, host: str) -> list[LiveSession]:
    """Open stdio sessions of this host, newest first."""
    with _reader(path) as db:
        db.row_factory = sqlite3.Row
        rows = [dict(row) for row in db.execute(_LIVE_SESSIONS, (host,))]
    return [
        LiveSession(r["agent"], int(r["pid"]), float(r["started_at"]), pid_start=r.get("pid_start"))
        for r in rows
    ]


def has_agent(path: Path, agent: str) -> bool:
    with _reader(path) as db:
        return db.execute(_AGENT, (agent,)).fetchone() is not None


def session_started(path: Path, agent: str, host: str) -> float | None:
    """When the agent's newest live stdio session here began (None: it has none)."""
    with _reader(path) as db:
        (started,) = db.execute(_STARTED_AT, (agent, host)).fetchone()
    return None if started is None else float(started)


def lives_since(path: Path, agent: str, host: str, started: float) -> bool:
    """Whether a live stdio session of the agent here began by `started`: the one a cursor was
    kept for (or an older one) still runs."""
    with _reader(path) as db:
        return db.execute(_LIVE_SINCE, (agent, host, started)).fetchone() is not None


def start_cursor(path: Path, agent: str, started: float | None) -> int:
    """Where a session's first note starts: the newest message stored before the session began
    at `started` (its backlog is the session's to read, not the hook's to dump); without a
    session, now."""
    with _reader(path) as db:
        if started is None:
            (seq,) = db.execute(_NEWEST_SEQ, (agent,)).fetchone()
        else:
            (seq,) = db.execute(_SEQ_BEFORE, (started,)).fetchone()
    return int(seq)


def unread_after(
    path: Path, agent: str, after_seq: int, now: float, limit: int
) -> tuple[list[Note], int]:
    """Unread, unexpired mail of `agent` delivered after `after_seq`, oldest first, and the new
    cursor: the last delivery looked at, read or not (mail already read needs no note)."""
    with _reader(path) as db:
        rows = db.execute(_DELIVERED_AFTER, (agent, after_seq, limit)).fetchall()
    notes = [
        Note(seq, id_, sender, kind, channel, subject or "", body or "", priority, trust)
        for seq, id_, sender, kind, channel, subject, body, priority, trust, state, expires in rows
        if state == "queued" and (expires is None or expires > now)
    ]
    return notes, (rows[-1][0] if rows else after_seq)


@dataclass(frozen=True, slots=True)
class Told:
    """How far the hook has told an agent's mail, and the start of the session it told (0: none
    was live), so a newer session is recognised."""

    seq: int
    session_started: float


class Cursors:
    """Per-agent cursors of what the hook has told, as files under `home/hook-cursors`."""

    def __init__(self, home: Path) -> None:
        self.folder = home / CURSORS_DIR

    def _file(self, agent: str) -> Path:
        return self.folder / agent  # agent names are [a-z0-9_-]: safe as file names

    @contextlib.contextmanager
    def held(self, agent: str) -> Iterator[None]:
        """Hold this agent's lock: a second hook waits, then sees the first one's cursor; after
        LOCK_WAIT_S it gives up (TimeoutError), moving no cursor."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.folder / f".{agent}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(
                            f"another hook of {agent} held its cursor lock for {LOCK_WAIT_S} s"
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # releases the lock

    def get(self, agent: str) -> Told | None:
        """The agent's cursor; one from before sessions were kept (a bare seq) counts as kept
        for no session."""
        try:
            seq, _, started = self._file(agent).read_text().strip().partition(" ")
            return Told(int(seq), float(started or 0))
        except (OSError, ValueError):
            return None

    def put(self, agent: str, told: Told) -> None:
        """Atomically: a reader sees the old cursor or the new one, never half of one."""
        target = self._file(agent)
        partial = target.with_name(f".{agent}.{os.getpid()}.tmp")
        # repr: the float reads back exactly, so the same session is recognised.
        partial.write_text(f"{told.seq} {told.session_started!r}\n")
        os.replace(partial, target)


# -- which session is this process's ----------------------------------------------------------
# Claude Code starts both `agentpost mcp` and the hooks and commands it runs: the agent a process
# of the session acts for is the session started by the same parent. The hook, the commit guard
# and the command line (the last two through `agentpost.services.presence`) all ask here.
#
# A pid alone does not name a process: once one exits, the system hands its pid to another (soon
# on a busy machine, always after a reboot). A session records its process's `process_start`
# when it opens, and a process whose start differs is not the session's.


def _stat(pid: int) -> list[str] | None:
    """`pid`'s /proc stat from its state on (field 3), None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    return stat[stat.rindex(")") + 2 :].split()


@functools.cache  # one boot per process's life
def _boot() -> str:
    """This boot's id: a start counted in ticks since boot is the same only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start(fields: list[str]) -> str:
    # Field 22: clock ticks since boot, which no step of the wall clock moves.
    return f"{fields[19]}@{_boot()}"


def process_start(pid: int) -> str | None:
    """What tells `pid`'s process from any later one given the same pid: its start in clock
    ticks since boot, and the boot; None where there is no /proc (macOS) or no such process."""
    fields = _stat(pid)
    return None if fields is None else _start(fields)


def _is_running(fields: list[str], start: str | None) -> bool:
    """Not a zombie (dead, and only its parent's process table holds it yet), and, when
    `start` is known, the process that started then."""
    return fields[0] not in ("Z", "X") and (start is None or _start(fields) == start)


def process_runs(pid: int, start: str | None = None) -> bool | None:
    """Whether `pid` runs and, given its `process_start`, is still that process; None when
    /proc cannot say (no /proc, or no such process: the caller asked the kernel first)."""
    fields = _stat(pid)
    return None if fields is None else _is_running(fields, start)


def parent_of(pid: int) -> int | None:
    """The parent pid of `pid`, from /proc (None when the process is gone)."""
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def _running_parent(session: LiveSession) -> int | None:
    """The parent of the session's process while it runs: None when it is gone, a zombie, or
    another process now holds its pid: a session whose process died is over, whatever its row
    says until the post office notices."""
    fields = _stat(session.pid)
    return None if fields is None or not _is_running(fields, session.pid_start) else int(fields[1])


def ancestors(pid: int) -> list[int]:
    """`pid`'s parent, grandparent, … nearest first; init (1) is left out: it adopts orphans."""
    chain: list[int] = []
    current = parent_of(pid)
    while current is not None and current > 1 and current not in chain:
        chain.append(current)
        current = parent_of(current)
    return chain


def session_of_this_process(sessions: Sequence[LiveSession], pid: int) -> LiveSession | None:
    """The session whose process, still running, is a child of `pid`'s nearest ancestor that has
    one (newest first when several are); None when no ancestor has."""
    parents = [(s, _running_parent(s)) for s in sessions]  # newest first
    for ancestor in ancestors(pid):
        for session, parent in parents:
            if parent == ancestor:
                return session
    return None


def agent_of_this_session(sessions: Sequence[LiveSession], pid: int) -> str | None:
    """The agent of `session_of_this_process`."""
    session = session_of_this_process(sessions, pid)
    return None if session is None else session.agent
