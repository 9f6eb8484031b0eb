"""Each revision's own change: what it does to rows written before it, and what its downgrade
keeps. (`test_migrate` holds what holds of every revision: the head, once, at once.)"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, inspect, text

from store.test_migrate import inspected, migrate_to

pytestmark = pytest.mark.anyio


def test_0006_keeps_every_task_in_view_and_its_downgrade_keeps_every_task(
    tmp_path: Path,
) -> None:
    """Tasks made before it were never withheld; going back drops only the new column."""
    from store.test_fulltext import alembic_on

    path = tmp_path / "agentpost.db"
    alembic_on(path, "upgrade", "0005")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "INSERT INTO tasks (id, creator, assignee, title, priority, status, message_id,"
            " created_at, updated_at) VALUES ('t_1', 'boss', 'worker', 'Fix it', 'normal',"
            " 'open', 'm_1', 1.0, 1.0)"
        )
        db.execute(
            "INSERT INTO task_history (task_id, at, actor, to_status) "
            "VALUES ('t_1', 1.0, 'boss', 'open')"
        )
    alembic_on(path, "upgrade", "0006")
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT id, withheld FROM tasks").fetchall() == [("t_1", 0)]
    alembic_on(path, "downgrade", "0005")
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT id, title FROM tasks").fetchall() == [("t_1", "Fix it")]
        assert db.execute("SELECT task_id FROM task_history").fetchall() == [("t_1",)]
        columns = [row[1] for row in db.execute("PRAGMA table_info(tasks)")]
        assert "withheld" not in columns


def test_0009_keeps_every_webhook_and_its_downgrade_keeps_them_and_their_deliveries(
    tmp_path: Path,
) -> None:
    """Webhooks made before it have no key (revoking one deletes none of them); going back
    drops only the new column, which a webhook with deliveries must not stop."""
    from store.test_fulltext import alembic_on

    path = tmp_path / "agentpost.db"
    alembic_on(path, "upgrade", "0008")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO agents (name, created_at) VALUES ('bob', 1.0)")
        db.execute(
            "INSERT INTO webhooks (id, agent, url, events, secret, created_at)"
            " VALUES ('wh_1', 'bob', 'http://127.0.0.1:9/', '[]', 'whsec_x', 1.0)"
        )
        db.execute(
            "INSERT INTO webhook_deliveries (id, webhook_id, event_seq, event, payload, state,"
            " created_at) VALUES ('d_1', 'wh_1', 1, 'message.created', '{}', 'pending', 1.0)"
        )
    alembic_on(path, "upgrade", "0009")
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT id, key_id FROM webhooks").fetchall() == [("wh_1", None)]
    alembic_on(path, "downgrade", "0008")
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT id FROM webhooks").fetchall() == [("wh_1",)]
        assert db.execute("SELECT webhook_id FROM webhook_deliveries").fetchall() == [("wh_1",)]
        assert "key_id" not in [row[1] for row in db.execute("PRAGMA table_info(webhooks)")]


def _members_before_0010(conn: Connection) -> None:
    """dev joined #shop while of project shop (the membership 0010 drops), and #ops; web,
    of project blog, joined #shop; solo has no project."""
    for name, project in [("dev", "shop"), ("web", "blog"), ("solo", None)]:
        conn.execute(
            text("INSERT INTO agents (name, project, created_at) VALUES (:n, :p, 1.0)"),
            {"n": name, "p": project},
        )
    for channel, agent in [("shop", "dev"), ("ops", "dev"), ("shop", "web"), ("shop", "solo")]:
        conn.execute(
            text("INSERT INTO channel_members (channel, agent, joined_at) VALUES (:c, :a, 1.0)"),
            {"c": channel, "a": agent},
        )
    conn.commit()


def _memberships(conn: Connection) -> list[tuple[str, str]]:
    rows = conn.execute(text("SELECT channel, agent FROM channel_members"))
    return sorted((row.channel, row.agent) for row in rows)


async def test_0010_drops_memberships_of_an_agents_own_project_channel_and_keeps_the_rest(
    fresh_database_url: str,
) -> None:
    """Recorded before joining one's own project's channel recorded nothing, they kept an
    agent in that channel after it moved to another project."""
    await migrate_to(fresh_database_url, "0009")
    await inspected(fresh_database_url, _members_before_0010)
    await migrate_to(fresh_database_url, "0010")
    assert await inspected(fresh_database_url, _memberships) == [
        ("ops", "dev"),
        ("shop", "solo"),
        ("shop", "web"),
    ]


def _sessions_before_0012(conn: Connection) -> None:
    conn.execute(text("INSERT INTO agents (name, created_at) VALUES ('dev', 1.0)"))
    for session, started in [("s1", 10.0), ("s2", 20.0)]:
        conn.execute(
            text(
                "INSERT INTO sessions (id, agent, transport, host, started_at, heartbeat_at)"
                " VALUES (:s, 'dev', 'stdio', 'h', :t, 99.0)"
            ),
            {"s": session, "t": started},
        )
    conn.commit()


def _said(conn: Connection) -> list[tuple[str, float]]:
    rows = conn.execute(text("SELECT id, said_at FROM sessions ORDER BY id"))
    return [(row.id, row.said_at) for row in rows]


async def test_0012_has_each_session_say_what_it_does_when_it_started(
    fresh_database_url: str,
) -> None:
    await migrate_to(fresh_database_url, "0011")
    await inspected(fresh_database_url, _sessions_before_0012)
    await migrate_to(fresh_database_url, "0012")
    assert await inspected(fresh_database_url, _said) == [("s1", 10.0), ("s2", 20.0)]


def _reservations_before_0013(conn: Connection) -> None:
    for rid, pattern in [("r1", "cafe\u0301.py"), ("r2", "src/**")]:
        conn.execute(
            text(
                "INSERT INTO reservations (id, project, agent, pattern, exclusive, reason,"
                " created_at, expires_at) VALUES (:id, 'shop', 'dev', :p, true, '', 1.0, 9.0)"
            ),
            {"id": rid, "p": pattern},
        )
    conn.commit()


def _patterns(conn: Connection) -> list[tuple[str, str]]:
    rows = conn.execute(text("SELECT id, pattern FROM reservations ORDER BY id"))
    return [(row.id, row.pattern) for row in rows]


async def test_0013_spells_each_live_claim_as_claims_are_compared_now(
    fresh_database_url: str,
) -> None:
    """Claims are compared in NFC since 0013: one made in NFD before (macOS spells `é` so)
    would else neither conflict with nor be released by its NFC spelling until it lapsed."""
    await migrate_to(fresh_database_url, "0012")
    await inspected(fresh_database_url, _reservations_before_0013)
    await migrate_to(fresh_database_url, "0013")
    assert await inspected(fresh_database_url, _patterns) == [
        ("r1", "caf\u00e9.py"),
        ("r2", "src/**"),
    ]


def _tasks_before_0015(conn: Connection) -> None:
    """boss (verified) gave drifter (untrusted now) two tasks; one drifter finished with a
    result; `gone` noted on one, with no agent row left to say its trust."""
    for name, trust in [("boss", "verified"), ("drifter", "untrusted")]:
        conn.execute(
            text("INSERT INTO agents (name, trust, created_at) VALUES (:n, :t, 1.0)"),
            {"n": name, "t": trust},
        )
    for tid, status, result, due in [
        ("t_1", "done", '"tidied"', 2.0),  # long past
        ("t_2", "open", None, 4_000_000_000.0),  # in 2096
    ]:
        conn.execute(
            text(
                "INSERT INTO tasks (id, creator, assignee, title, priority, status, result,"
                " due, message_id, created_at, updated_at) VALUES (:id, 'boss', 'drifter',"
                " 'T', 'normal', :s, :r, :due, 'm_1', 1.0, 1.0)"
            ),
            {"id": tid, "s": status, "r": result, "due": due},
        )
    for tid, actor, status in [("t_1", "boss", "open"), ("t_1", "drifter", "done")]:
        conn.execute(
            text(
                "INSERT INTO task_history (task_id, at, actor, to_status) VALUES (:id, 1.0, :a, :s)"
            ),
            {"id": tid, "a": actor, "s": status},
        )
    conn.execute(
        text(
            "INSERT INTO task_history (task_id, at, actor, to_status)"
            " VALUES ('t_2', 1.0, 'gone', 'open')"
        )
    )
    conn.commit()


def _task_trusts(conn: Connection) -> list[tuple[str, ...]]:
    rows = conn.execute(text("SELECT id, creator_trust, result_trust FROM tasks ORDER BY id"))
    changes = conn.execute(text("SELECT task_id, actor, trust FROM task_history ORDER BY seq"))
    return [tuple(row) for row in rows] + [tuple(row) for row in changes]


async def test_0015_gives_tasks_words_their_authors_trust_and_marks_past_dues_passed(
    fresh_database_url: str,
) -> None:
    """Nothing recorded the trust they were written with: the trust their author has at the
    upgrade is the best that is known; an author no longer found vouches for nothing. A due
    passed before it is marked passed, not told of at the first sweep."""
    await migrate_to(fresh_database_url, "0014")
    await inspected(fresh_database_url, _tasks_before_0015)
    await migrate_to(fresh_database_url, "0015")
    assert await inspected(fresh_database_url, _task_trusts) == [
        ("t_1", "verified", "untrusted"),
        ("t_2", "verified", None),
        ("t_1", "boss", "verified"),
        ("t_1", "drifter", "untrusted"),
        ("t_2", "gone", "untrusted"),
    ]
    assert await inspected(fresh_database_url, _dues_passed) == [("t_1", True), ("t_2", False)]


def _dues_passed(conn: Connection) -> list[tuple[str, bool]]:
    rows = conn.execute(text("SELECT id, due_passed_at FROM tasks ORDER BY id"))
    return [(row.id, row.due_passed_at is not None) for row in rows]


def _limits_of_three(conn: Connection) -> None:
    """solo's only override is the task cap; both's a send rate beside it; other's a send rate."""
    for name in ("solo", "both", "other"):
        conn.execute(text("INSERT INTO agents (name, created_at) VALUES (:n, 1.0)"), {"n": name})
    conn.execute(
        text(
            "INSERT INTO agent_limits (agent, send_rate_per_minute, max_open_tasks_per_agent)"
            " VALUES ('solo', NULL, 5), ('both', 30, 5), ('other', 20, NULL)"
        )
    )
    conn.commit()


def _limits(conn: Connection) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        text("SELECT agent, send_rate_per_minute FROM agent_limits ORDER BY agent")
    ).all()
    return [tuple(row) for row in rows]


async def test_0017_downgrade_drops_only_the_rows_that_held_no_other_override(
    fresh_database_url: str,
) -> None:
    """A row of NULLs would say "the settings" as no row does; the others keep their limits."""
    await migrate_to(fresh_database_url, "0017")
    await inspected(fresh_database_url, _limits_of_three)
    await migrate_to(fresh_database_url, "0016", back=True)
    assert await inspected(fresh_database_url, _limits) == [("both", 30), ("other", 20)]


def _a_task_with_words(conn: Connection) -> None:
    """boss gave worker a task; worker finished it with a note and a result."""
    conn.execute(
        text(
            "INSERT INTO tasks (id, creator, assignee, title, priority, status, result,"
            " message_id, created_at, updated_at) VALUES ('t_1', 'boss', 'worker', 'T',"
            " 'normal', 'done', '\"fixed\"', 'm_1', 1.0, 1.0)"
        )
    )
    conn.execute(
        text(
            "INSERT INTO task_history (task_id, at, actor, to_status, note)"
            " VALUES ('t_1', 1.0, 'worker', 'done', 'all good')"
        )
    )
    conn.commit()


def _task_words(conn: Connection) -> list[tuple[Any, ...]]:
    result = conn.execute(text("SELECT id, result FROM tasks")).all()
    notes = conn.execute(text("SELECT task_id, note FROM task_history")).all()
    return [tuple(row) for row in [*result, *notes]]


def _withheld(conn: Connection) -> list[bool]:
    result = conn.execute(text("SELECT result_withheld FROM tasks")).scalar_one()
    note = conn.execute(text("SELECT withheld FROM task_history")).scalar_one()
    return [bool(result), bool(note)]


def _task_columns(conn: Connection) -> set[str]:
    """The columns of tasks and of their history, each as `table.column`."""
    found = inspect(conn)
    return {
        f"{table}.{c['name']}"
        for table in ("tasks", "task_history")
        for c in found.get_columns(table)
    }


async def test_0018_withholds_no_words_written_before_it_and_its_downgrade_keeps_them(
    fresh_database_url: str,
) -> None:
    """Nobody knows who blocked whom when earlier words were written: they stay in view, as
    mail delivered before a block does. Going back drops only the two new columns."""
    await migrate_to(fresh_database_url, "0017")
    await inspected(fresh_database_url, _a_task_with_words)
    await migrate_to(fresh_database_url, "0018")
    assert await inspected(fresh_database_url, _withheld) == [False, False]
    await migrate_to(fresh_database_url, "0017", back=True)
    assert await inspected(fresh_database_url, _task_words) == [
        ("t_1", '"fixed"'),
        ("t_1", "all good"),
    ]
    columns = await inspected(fresh_database_url, _task_columns)
    assert {"tasks.result_withheld", "task_history.withheld"} & columns == set()
    assert {"tasks.withheld", "tasks.result_trust", "task_history.trust"} <= columns


def _expiry_index_columns(conn: Connection) -> list[str]:
    (index,) = [
        i for i in inspect(conn).get_indexes("deliveries") if i["name"] == "ix_deliveries_expiry"
    ]
    return [str(column) for column in index["column_names"]]


async def test_0019_leads_the_expiry_index_with_the_state_and_its_downgrade_puts_it_back(
    fresh_database_url: str,
) -> None:
    await migrate_to(fresh_database_url, "0018")
    assert await inspected(fresh_database_url, _expiry_index_columns) == ["expires_at"]
    await migrate_to(fresh_database_url, "0019")
    assert await inspected(fresh_database_url, _expiry_index_columns) == ["state", "expires_at"]
    await migrate_to(fresh_database_url, "0018", back=True)
    assert await inspected(fresh_database_url, _expiry_index_columns) == ["expires_at"]


def _dues_of_every_kind(conn: Connection) -> None:
    """Four tasks: no due, one in range, and one past each end of what a date can spell."""
    conn.execute(text("INSERT INTO agents (name, created_at) VALUES ('boss', 1.0)"))
    for tid, due in [("t_1", None), ("t_2", 4_000_000_000.0), ("t_3", -1e308), ("t_4", 1e300)]:
        conn.execute(
            text(
                "INSERT INTO tasks (id, creator, assignee, title, priority, status, due,"
                " message_id, created_at, updated_at) VALUES (:id, 'boss', 'boss', 'T',"
                " 'normal', 'open', :due, 'm_1', 1.0, 1.0)"
            ),
            {"id": tid, "due": due},
        )
    conn.commit()


def _dues(conn: Connection) -> list[tuple[str, float | None]]:
    return [tuple(row) for row in conn.execute(text("SELECT id, due FROM tasks ORDER BY id"))]


async def test_0020_brings_dues_no_date_can_spell_to_the_nearest_end_of_the_calendar(
    fresh_database_url: str,
) -> None:
    """Those stopped the post office at each start (its overdue notice could not write
    them); a due in range, or none, is left as it was."""
    await migrate_to(fresh_database_url, "0019")
    await inspected(fresh_database_url, _dues_of_every_kind)
    await migrate_to(fresh_database_url, "0020")
    assert await inspected(fresh_database_url, _dues) == [
        ("t_1", None),
        ("t_2", 4_000_000_000.0),
        ("t_3", 0.0),
        ("t_4", 253402300799.0),
    ]
    await migrate_to(fresh_database_url, "0019", back=True)
    assert (await inspected(fresh_database_url, _dues))[2:] == [
        ("t_3", 0.0),
        ("t_4", 253402300799.0),
    ]


def _a_local_session(conn: Connection) -> None:
    conn.execute(text("INSERT INTO agents (name, created_at) VALUES ('alice', 1.0)"))
    conn.execute(
        text(
            "INSERT INTO sessions (id, agent, transport, host, pid, started_at, heartbeat_at)"
            " VALUES ('s_1', 'alice', 'stdio', 'box', 4242, 1.0, 1.0)"
        )
    )
    conn.commit()


def _sessions(conn: Connection) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in conn.execute(text("SELECT id, pid FROM sessions"))]


def _pid_starts(conn: Connection) -> list[Any]:
    return list(conn.execute(text("SELECT pid_start FROM sessions")).scalars())


def _session_columns(conn: Connection) -> set[str]:
    return {c["name"] for c in inspect(conn).get_columns("sessions")}


async def test_0021_records_no_start_for_sessions_opened_before_it_and_its_downgrade_keeps_them(
    fresh_database_url: str,
) -> None:
    """Their process's start was never read: they are judged by their pid alone, as before.
    Going back drops only the new column."""
    await migrate_to(fresh_database_url, "0020")
    await inspected(fresh_database_url, _a_local_session)
    await migrate_to(fresh_database_url, "0021")
    assert await inspected(fresh_database_url, _pid_starts) == [None]
    await migrate_to(fresh_database_url, "0020", back=True)
    assert await inspected(fresh_database_url, _sessions) == [("s_1", 4242)]
    assert "pid_start" not in await inspected(fresh_database_url, _session_columns)


def _sessions_disabling_ended_before_0022(conn: Connection) -> None:
    """zed, disabled at 5, had a session end then (s_1), one end before (s_2), one over HTTP
    end then (s_3) and one live (s_4); amy, enabled, had one end at 5 too (s_5)."""
    conn.execute(
        text(
            "INSERT INTO agents (name, created_at, disabled_at) VALUES ('zed', 1.0, 5.0),"
            " ('amy', 1.0, NULL)"
        )
    )
    for sid, agent, transport, ended in [
        ("s_1", "zed", "stdio", 5.0),
        ("s_2", "zed", "stdio", 4.0),
        ("s_3", "zed", "http", 5.0),
        ("s_4", "zed", "stdio", None),
        ("s_5", "amy", "stdio", 5.0),
    ]:
        conn.execute(
            text(
                "INSERT INTO sessions (id, agent, transport, host, pid, started_at, heartbeat_at,"
                " ended_at) VALUES (:sid, :agent, :transport, 'box', 4242, 1.0, 1.0, :ended)"
            ),
            {"sid": sid, "agent": agent, "transport": transport, "ended": ended},
        )
    conn.commit()


def _ended_by_owner(conn: Connection) -> list[Any]:
    query = "SELECT id FROM sessions WHERE ended_by_owner ORDER BY id"
    return list(conn.execute(text(query)).scalars())


async def test_0022_marks_the_local_sessions_disabling_ended_and_its_downgrade_keeps_them(
    fresh_database_url: str,
) -> None:
    """Those the code before it read as ended by disabling: of an agent disabled now, a local
    session that ended as it was disabled, or since. Going back drops only the new column."""
    await migrate_to(fresh_database_url, "0021")
    await inspected(fresh_database_url, _sessions_disabling_ended_before_0022)
    await migrate_to(fresh_database_url, "0022")
    assert await inspected(fresh_database_url, _ended_by_owner) == ["s_1"]
    await migrate_to(fresh_database_url, "0021", back=True)
    assert len(await inspected(fresh_database_url, _sessions)) == 5
    assert "ended_by_owner" not in await inspected(fresh_database_url, _session_columns)


def _indexes_a_send_writes_to(conn: Connection) -> dict[str, str | None]:
    """The indexes of the tables a send writes a row to: each name, and which rows it holds."""
    option = "sqlite_where" if conn.dialect.name == "sqlite" else "postgresql_where"
    found = {}
    for table in ("messages", "events", "audit"):
        for index in inspect(conn).get_indexes(table):
            where = index.get("dialect_options", {}).get(option)
            found[str(index["name"])] = None if where is None else str(where)
    return found


async def test_0023_drops_the_indexes_by_time_and_keeps_direct_mail_out_of_the_channel_index(
    fresh_database_url: str,
) -> None:
    by_time = {"ix_messages_created", "ix_events_at", "ix_audit_at"}
    await migrate_to(fresh_database_url, "0022")
    before = await inspected(fresh_database_url, _indexes_a_send_writes_to)
    assert by_time <= set(before)
    assert before["ix_messages_channel"] is None

    await migrate_to(fresh_database_url, "0023")
    after = await inspected(fresh_database_url, _indexes_a_send_writes_to)
    assert not by_time & set(after)
    assert "channel IS NOT NULL" in str(after["ix_messages_channel"])

    await migrate_to(fresh_database_url, "0022", back=True)
    assert await inspected(fresh_database_url, _indexes_a_send_writes_to) == before
