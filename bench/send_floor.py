"""The floor under a `send`: its transaction's own statements replayed on sqlite3 alone.

Not part of `python -m bench`. It asks what the one-client MCP figure (issue 3: `send` at 80%
of the SDK's echo tool) leaves a send's transaction, and what that transaction costs with
nothing of agentpost around it:

    .venv/bin/python -m bench.send_floor [--sends 2000]

It opens the post office on a scratch file, sends some mail, and records the statements one
direct send runs (the store's sqlite3 calls, captured in passing). Then, from that same state,
it times the store's own `Mailbox.send` one at a time, and (on a copy) the same statements run
straight on a sqlite3 connection with the same pragmas: each statement, `BEGIN IMMEDIATE`,
`COMMIT`, and the WAL frames (pages) each commit writes. Checkpoints run between the timed
transactions, as the store's checkpointer thread runs them beside its writes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import sqlite3
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from agentpost.store import sqlite as store_sqlite
from bench.common import scratch_home, settings_for

BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."
INBOXES = 8
WARM = 300
RECORDED_TO = "inbox-1"
CHECKPOINT_EVERY = 200  # as the store's checkpointer (store.sqlite_runner.CHECKPOINT_EVERY)

Statement = tuple[str, list[Any]]


@contextmanager
def captured() -> Iterator[list[Statement]]:
    """The statements the store hands sqlite3 meanwhile (transaction control included)."""
    seen: list[Statement] = []
    execute = store_sqlite._execute

    def recording(conn: Any, sql: str, values: Sequence[Any], *, many: bool = False) -> Any:
        if not many:
            seen.append((sql, list(values)))
        return execute(conn, sql, values, many=many)

    store_sqlite._execute = recording
    try:
        yield seen
    finally:
        store_sqlite._execute = execute


async def one_send(home: Path, copy: Path, sends: int) -> tuple[list[Statement], float]:
    """The statements of one direct send, and `Mailbox.send`'s time per call on this file;
    `copy` is left as the file stood before those calls, for the replay to start alike."""
    office = await PostOffice.open(settings_for(home))
    try:
        sender = await office.presence.ensure_agent("bench-sender")
        for i in range(INBOXES):
            await office.presence.ensure_agent(f"inbox-{i}")
        for i in range(WARM):
            await office.mailbox.send(sender, f"inbox-{i % INBOXES}", BODY)
        with captured() as statements:
            await office.mailbox.send(sender, RECORDED_TO, BODY)
        # SQLAlchemy commits through the sqlite3 connection itself, not through the capture.
        statements.append(("COMMIT", []))
        with (
            contextlib.closing(sqlite3.connect(home / "agentpost.db")) as source,
            contextlib.closing(sqlite3.connect(copy)) as target,
        ):
            source.backup(target)
        return statements, await _timed_sends(office, sender, sends)
    finally:
        await office.aclose()


async def _timed_sends(office: PostOffice, sender: Caller, sends: int) -> float:
    start = time.perf_counter()
    for i in range(sends):
        await office.mailbox.send(sender, f"inbox-{i % INBOXES}", BODY)
    return (time.perf_counter() - start) / sends


def replay(path: Path, statements: list[Statement], sends: int) -> tuple[dict[str, float], float]:
    """Seconds per transaction of each statement, replayed `sends` times on sqlite3 alone
    (fresh message ids, and the new message's seq where the recorded one stood); and the pages
    each commit wrote."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA foreign_keys=ON")
    db.execute("PRAGMA wal_autocheckpoint=0")
    recorded_seq = next(v[1] for sql, v in statements if sql.startswith("INSERT INTO deliveries"))
    spent: collections.Counter[str] = collections.Counter()
    for n in range(sends):
        seq = None
        for sql, values in statements:
            values = [_fresh(v, n, recorded_seq, seq) for v in values]
            began = time.perf_counter()
            rows = db.execute(sql, values).fetchall()
            spent[_name(sql)] += time.perf_counter() - began
            if sql.startswith("INSERT INTO messages"):
                seq = rows[0][0]
        if n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
            db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
    frames = frames_per_commit(path)  # before the last connection closes the WAL away
    db.close()
    return {name: total / sends for name, total in spent.items()}, frames


def _fresh(value: Any, n: int, recorded_seq: int, seq: int | None) -> Any:
    """As the store's timed sends do: a new message id, the inboxes in turn."""
    if isinstance(value, str) and value.startswith("m_"):
        return f"m_floor{n:019d}"
    if value == RECORDED_TO:
        return f"inbox-{n % INBOXES}"
    if seq is not None and value == recorded_seq:
        return seq
    return value


def _name(sql: str) -> str:
    words = sql.split()
    if words[0] in ("INSERT", "DELETE"):
        return f"{words[0]} {words[2]}"
    if words[0] == "SELECT":  # named for its table, inside any subquery
        tables = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "FROM"]
        return "SELECT " + next(t for t in tables if not t.startswith("("))
    return " ".join(words[:2])


def frames_per_commit(path: Path) -> float:
    """WAL frames per commit over the current WAL (each frame is one page written)."""
    data = (path.parent / (path.name + "-wal")).read_bytes()
    salt = data[16:24]
    commits, frames = 0, 0
    for offset in range(32, len(data) - 4119, 4120):
        if data[offset + 8 : offset + 16] != salt:
            break
        frames += 1
        if struct.unpack(">I", data[offset + 4 : offset + 8])[0]:
            commits += 1
    return frames / max(commits, 1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.send_floor", description=__doc__)
    parser.add_argument("--sends", type=int, default=2000)
    args = parser.parse_args()
    with scratch_home("floor") as home:
        copy = home / "replay.db"
        statements, store_s = asyncio.run(one_send(home, copy, args.sends))
        per, frames = replay(copy, statements, args.sends)
    total = sum(per.values())
    print(f"{len(statements)} statements in one direct send; {args.sends} transactions each\n")
    print(f"{'µs/send':>9}  statement")
    for name, seconds in sorted(per.items(), key=lambda item: -item[1]):
        print(f"{seconds * 1e6:9.1f}  {name}")
    print(f"{total * 1e6:9.1f}  the transaction on sqlite3 alone ({frames:.1f} pages a commit)")
    print(f"{store_s * 1e6:9.1f}  Mailbox.send, one at a time, in one process")


if __name__ == "__main__":
    main()
