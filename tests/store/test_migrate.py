"""Migrations: an empty database reaches the head schema, once, however many start at once."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import migrate
from agentpost.store.database import Store
from agentpost.store.postgres import async_url
from agentpost.store.schema import metadata

T = TypeVar("T")

pytestmark = pytest.mark.anyio


def _default(value: str | None) -> str | None:
    """A server default as both dialects spell it: no casts, quotes or brackets; 0/1 booleans."""
    if value is None:
        return None
    bare = re.sub(r"::[a-z ]+$", "", value.strip()).strip("()'\"")
    return {"false": "0", "true": "1"}.get(bare, bare)


def _differs(
    _context: Any,
    _inspected_column: Any,
    _metadata_column: Any,
    inspected: str | None,
    _metadata_default: Any,
    rendered: str | None,
) -> bool:
    return _default(inspected) != _default(rendered)


def _not_fts(_obj: Any, name: str | None, type_: str, _reflected: bool, _compare_to: Any) -> bool:
    """Each database's own full-text index stands outside the schema module: SQLite's FTS5
    tables, PostgreSQL's index of the words (`test_postgresql_search_reads_its_index`)."""
    if type_ == "index" and name == "ix_messages_search":
        return False
    return not (type_ == "table" and (name or "").startswith("messages_fts"))


def schema_diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn,
        opts={
            "compare_type": True,
            "compare_server_default": _differs,
            "include_object": _not_fts,
        },
    )
    return list(compare_metadata(context, metadata))


async def migrated_diff(url: str) -> list[Any]:
    if url.startswith("sqlite"):
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                return schema_diff(conn)
        finally:
            engine.dispose()
    async_engine = create_async_engine(async_url(url))
    try:
        async with async_engine.connect() as conn:
            return await conn.run_sync(schema_diff)
    finally:
        await async_engine.dispose()


async def revision(url: str) -> str | None:
    store = await Store.open(url)
    try:
        return await store.read(migrate.current_revision)
    finally:
        await store.aclose()


async def test_opening_an_empty_database_migrates_it_to_the_head_schema(
    fresh_database_url: str,
) -> None:
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD
    assert await migrated_diff(fresh_database_url) == []


async def inspected(url: str, look: Callable[[Connection], T]) -> T:
    """What `look` finds on a connection of its own to the database at `url`."""
    if url.startswith("sqlite"):
        engine = create_engine(url)
        with engine.connect() as conn:
            found = look(conn)
        engine.dispose()
        return found
    async_engine = create_async_engine(async_url(url))
    async with async_engine.connect() as conn:
        found = await conn.run_sync(look)
    await async_engine.dispose()
    return found


async def test_the_schema_module_and_the_migrations_describe_the_same_tables(
    fresh_database_url: str,
) -> None:
    await revision(fresh_database_url)

    def tables(conn: Connection) -> set[str]:
        return {t for t in inspect(conn).get_table_names() if not t.startswith("messages_fts")}

    assert await inspected(fresh_database_url, tables) == {*metadata.tables, "alembic_version"}


def partial_indexes() -> dict[str, tuple[str, str]]:
    """The schema's partial indexes: name -> (table, the rows it holds, as SQLite says it)."""
    return {
        str(index.name): (table.name, str(index.dialect_options["sqlite"]["where"]))
        for table in metadata.tables.values()
        for index in table.indexes
        if index.dialect_options["sqlite"]["where"] is not None
    }


def test_each_partial_index_holds_the_same_rows_on_postgresql() -> None:
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateIndex

    import agentpost.store.postgres  # noqa: F401  (it says the rows for PostgreSQL)

    indexes = {str(i.name): i for t in metadata.tables.values() for i in t.indexes}
    assert set(partial_indexes()) == {"ix_deliveries_expiry", "ux_messages_response"}
    for name, (_table, where) in partial_indexes().items():
        ddl = str(CreateIndex(indexes[name]).compile(dialect=postgresql.dialect()))
        assert ddl.endswith(f"WHERE {where}"), ddl


async def test_the_migrations_make_each_partial_index_partial(fresh_database_url: str) -> None:
    await revision(fresh_database_url)
    option = "sqlite_where" if fresh_database_url.startswith("sqlite") else "postgresql_where"

    def wheres(conn: Connection) -> dict[str, Any]:
        found = {}
        for name, (table, _where) in partial_indexes().items():
            (index,) = [i for i in inspect(conn).get_indexes(table) if i["name"] == name]
            where = index.get("dialect_options", {}).get(option)
            found[name] = None if where is None else str(where)
        return found

    found = await inspected(fresh_database_url, wheres)
    assert set(found) == set(partial_indexes())
    assert all(found.values()), found


def test_schema_head_is_the_newest_revision_in_the_migrations_folder() -> None:
    scripts = ScriptDirectory(str(migrate.MIGRATIONS))
    assert scripts.get_heads() == [migrate.SCHEMA_HEAD]


def test_a_sqlite_file_is_migrated_once_and_then_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    from agentpost.store import sqlite

    sqlite.prepare_file(path)
    assert migrate.migrate_sqlite(path) is True
    assert migrate.migrate_sqlite(path) is False


def test_sqlite_full_text_search_is_created_with_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    from agentpost.store import sqlite

    sqlite.prepare_file(path)
    migrate.migrate_sqlite(path)
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        names = {
            row[0]
            for row in conn.execute(text("SELECT name FROM sqlite_master WHERE name LIKE '%fts%'"))
        }
    engine.dispose()
    assert {"messages_fts", "messages_fts_cursor", "messages_fts_ad", "messages_fts_au"} <= names
    assert "messages_fts_ai" not in names  # sends are indexed in batches (store.fulltext)


OPEN_ONCE = """
import anyio, sys
from agentpost.store.database import Store

async def main():
    store = await Store.open(sys.argv[1])
    await store.aclose()

anyio.run(main)
print("alembic" in sys.modules)
"""


def run_opens(url: str, count: int) -> list[subprocess.CompletedProcess[str]]:
    """`count` processes opening `url` at the same moment; their outcomes."""
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_ONCE, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(count)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


async def test_opening_a_current_database_does_not_import_alembic(fresh_database_url: str) -> None:
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD
    (second,) = run_opens(fresh_database_url, 1)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "False"


async def test_many_processes_opening_a_fresh_database_at_once_all_start(
    fresh_database_url: str,
) -> None:
    outcomes = run_opens(fresh_database_url, 8)
    assert [o.returncode for o in outcomes] == [0] * 8, [o.stderr for o in outcomes]
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD


def test_a_sqlite_file_in_rollback_journal_mode_is_switched_to_wal(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("CREATE TABLE kept (x)")
    (opened,) = run_opens(f"sqlite:///{path}", 1)
    assert opened.returncode == 0, opened.stderr
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.fixture
def private_umask() -> Iterator[None]:
    """A permissive umask, as some shells have: privacy must not depend on the user's."""
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("private_umask")
async def test_the_database_file_and_its_folder_are_private_to_the_user(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "agentpost"
    store = await Store.open(f"sqlite:///{folder / 'agentpost.db'}")
    try:
        await store.write(lambda conn: conn.execute(text("SELECT 1")))
        assert (folder / "agentpost.db").stat().st_mode & 0o777 == 0o600
        assert folder.stat().st_mode & 0o777 == 0o700
        # -wal and -shm hold the same data; the migration's lock file lies beside them
        companions = [*folder.glob("agentpost.db-*"), *folder.glob("agentpost.db.*")]
        assert folder / "agentpost.db.migrate-lock" in companions
        for companion in companions:
            assert companion.stat().st_mode & 0o077 == 0, companion
    finally:
        await store.aclose()


async def test_an_existing_database_file_is_made_private_again(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    store = await Store.open(f"sqlite:///{path}")
    await store.aclose()
    assert path.stat().st_mode & 0o777 == 0o600


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


async def test_a_schema_newer_than_this_agentpost_knows_is_refused_with_the_way_out(
    fresh_database_url: str,
) -> None:
    """A newer replica migrated the database: an older one says so, and leaves it alone."""
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD
    await inspected(fresh_database_url, _pretend_newer)
    with pytest.raises(AgentpostError) as refused:
        await Store.open(fresh_database_url)
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert "schema (9999) is newer than this agentpost knows" in refused.value.message
    assert "upgrade agentpost" in refused.value.message
    assert await inspected(fresh_database_url, migrate.current_revision) == "9999"


def _pretend_newer(conn: Connection) -> None:
    conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    conn.commit()


def test_the_known_revisions_are_the_migration_files() -> None:
    assert migrate.SCHEMA_HEAD in migrate.known_revisions()
    assert len(migrate.known_revisions()) == int(migrate.SCHEMA_HEAD)


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


async def migrate_to(url: str, target: str, *, back: bool = False) -> None:
    """Alembic's upgrade to `target` on the database at `url`, as a start would run it (its
    downgrade, going `back`)."""
    if url.startswith("sqlite"):
        from agentpost.store import sqlite
        from store.test_fulltext import alembic_on

        path = Path(url.removeprefix("sqlite:///"))
        sqlite.prepare_file(path)
        alembic_on(path, "downgrade" if back else "upgrade", target)
        return

    def move(conn: Connection) -> None:
        (migrate.downgrade if back else migrate.upgrade)(conn, target)

    async_engine = create_async_engine(async_url(url))
    try:
        async with async_engine.begin() as conn:
            await conn.run_sync(move)
    finally:
        await async_engine.dispose()


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
