"""Which live local session a process acts for, read from the SQLite file and /proc as the hook,
the commit guard and the command line read it."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from pathlib import Path

from agentpost.store import notes
from processes import another_start, sleeping
from store.test_fulltext import alembic_on


def _with_session(path: Path, revision: str, pid: int, pid_start: str | None = None) -> None:
    """A file at `revision` holding one live stdio session of alice's on this host."""
    alembic_on(path, "upgrade", revision)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO agents (name, created_at) VALUES ('alice', 1.0)")
        db.execute(
            "INSERT INTO sessions (id, agent, transport, host, pid, started_at, heartbeat_at)"
            " VALUES ('s_1', 'alice', 'stdio', ?, ?, 1.0, 1.0)",
            (socket.gethostname(), pid),
        )
        if pid_start is not None:
            db.execute("UPDATE sessions SET pid_start = ?", (pid_start,))


def test_a_session_is_its_processs_while_that_process_holds_its_pid(tmp_path: Path) -> None:
    """The command and the session's server are children of one parent (Claude Code)."""
    path = tmp_path / "agentpost.db"
    with sleeping() as server, sleeping() as command:
        _with_session(path, "head", server.pid, notes.process_start(server.pid))
        (session,) = notes.live_local_sessions(path, socket.gethostname())
        assert notes.agent_of_this_session([session], command.pid) == "alice"


def test_a_session_whose_pid_another_process_holds_now_is_no_processs(tmp_path: Path) -> None:
    """After a reboot an old row's pid can name a new process under the same parent: the hook
    and the commands it runs would act as that row's agent."""
    path = tmp_path / "agentpost.db"
    with sleeping() as reused, sleeping() as command:
        _with_session(path, "head", reused.pid, another_start())
        sessions = notes.live_local_sessions(path, socket.gethostname())
        assert notes.session_of_this_process(sessions, command.pid) is None


def test_a_file_an_older_agentpost_left_is_read_and_its_sessions_judged_by_pid(
    tmp_path: Path,
) -> None:
    """The hook runs the installed agentpost while a session's server, still the older one,
    has not migrated the file: it reads the sessions as before, with no start to compare."""
    path = tmp_path / "agentpost.db"
    with sleeping() as server, sleeping() as command:
        _with_session(path, "0020", server.pid)
        (session,) = notes.live_local_sessions(path, socket.gethostname())
        assert session.pid_start is None
        assert notes.agent_of_this_session([session], command.pid) == "alice"
