"""The two databases every store and service test runs on: a SQLite file and the real PostgreSQL.

`backend` is parametrised over both. PostgreSQL is the server of the development machine
(127.0.0.1:5432, trust auth; `AGENTPOST_TEST_POSTGRES` overrides the admin URL). One scratch
database is created for the whole test session and dropped at its end; each test starts from
empty tables. When the server is unreachable the PostgreSQL half of the suite fails: CI has
it, so a missing server is a broken machine, never a skip.

Time is a `FakeClock` handed to the store, so TTLs, rate windows and heartbeats move when a
test says so, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Connection, select

import processes
from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from agentpost.services.local_identity import LocalContext, this_host
from agentpost.store import agents as agent_rows
from agentpost.store import leases
from agentpost.store.database import Store
from agentpost.store.schema import metadata

PG_ADMIN_URL = os.environ.get(
    "AGENTPOST_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
START = 1_800_000_000.0
"""The fake clock's first reading (2027-01-15): far from the machine's own time on purpose."""

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


class FakeClock:
    """A clock that moves only when told: `clock()` reads it, `clock.advance(s)` moves it."""

    def __init__(self, start: float = START) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


# -- PostgreSQL scratch databases ------------------------------------------------------------------


def pg_url(database: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_pg_database(prefix: str = "agentpost_test", options: str = "") -> str:
    """A new, empty database (`options` of CREATE DATABASE, from template0, if any); returns
    its name. Fails loudly when the server is not there."""
    name = f"{prefix}_{secrets.token_hex(6)}"
    template = f" TEMPLATE template0 {options}" if options else ""
    try:
        asyncio.run(_admin(f'CREATE DATABASE "{name}"{template}'))
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is needed by these tests: {exc!r}")
    return name


HUMAN_COLLATIONS = (
    "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'",
    "LC_COLLATE 'en_US.utf8' LC_CTYPE 'en_US.utf8'",
)
"""Ways to create a database that orders text as people read it (`_` before `-`, both
before digits and letters), not by code point: an ICU locale (PostgreSQL 15), else glibc's."""


def create_human_collated_pg_database() -> str:
    """A new, empty database whose collation is not C, as many servers' default is."""
    name = f"agentpost_collated_{secrets.token_hex(6)}"
    errors = []
    for collation in HUMAN_COLLATIONS:
        try:
            asyncio.run(_admin(f'CREATE DATABASE "{name}" TEMPLATE template0 {collation}'))
            return name
        except (OSError, asyncpg.PostgresError) as exc:
            errors.append(exc)
    pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} can make no database collated for people: {errors}")


def drop_pg_database(name: str) -> None:
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def refuse_connections(url: str, refuse: bool = True) -> None:
    """Have PostgreSQL refuse every new connection to `url`'s database and end those open (as
    a database gone out of reach does), or take them again."""
    name = url.rsplit("/", 1)[1]
    await _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {"false" if refuse else "true"}')
    if refuse:
        await _admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        )


async def refuse_writes(url: str, refuse: bool = True) -> None:
    """Have PostgreSQL take no write to `url`'s database (as a standby server, or one set
    read-only, does), or take them again; the connections open end, so the new ones obey."""
    name = url.rsplit("/", 1)[1]
    await _admin(
        f'ALTER DATABASE "{name}" SET default_transaction_read_only = {"on" if refuse else "off"}'
    )
    await _admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )


_session_db: dict[str, str] = {}


@pytest.fixture(scope="session")
def pg_session_database() -> Iterator[str]:
    """The session's scratch database, migrated to head (shared by every conftest using it)."""
    if "url" in _session_db:
        yield _session_db["url"]
        return
    name = create_pg_database()
    url = pg_url(name)

    async def migrate() -> None:
        store = await Store.open(url)
        await store.aclose()

    try:
        asyncio.run(migrate())
        _session_db["url"] = url
        yield url
    finally:
        _session_db.clear()
        drop_pg_database(name)


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """An empty PostgreSQL database of this test's own (for tests of migrations)."""
    name = create_pg_database("agentpost_fresh")
    try:
        yield pg_url(name)
    finally:
        drop_pg_database(name)


@pytest.fixture
def human_collated_pg_url() -> Iterator[str]:
    """An empty PostgreSQL database of this test's own, collated as people read (not C)."""
    name = create_human_collated_pg_database()
    try:
        yield pg_url(name)
    finally:
        drop_pg_database(name)


# -- the parametrised backend ----------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A database nobody has opened yet: a new SQLite path, or an empty PostgreSQL database."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh' / 'agentpost.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session; each test gets a copy (no alembic per test)."""
    path = tmp_path_factory.mktemp("template") / "agentpost.db"

    async def migrate() -> None:
        store = await Store.open(f"sqlite:///{path}")
        await store.aclose()

    asyncio.run(migrate())
    assert not path.with_name(path.name + "-wal").exists(), "closing checkpoints the WAL"
    return path


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """This test's post office: a SQLite file of its own, or the session's PostgreSQL."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        folder = tmp_path / "store"
        folder.mkdir(mode=0o700)
        path = folder / "agentpost.db"
        shutil.copyfile(template, path)
        path.chmod(0o600)
        return f"sqlite:///{path}"
    return str(request.getfixturevalue("pg_session_database"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def collated_database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A database that orders text as people read it when it can (PostgreSQL collated for
    English; SQLite has no such collation): what user-visible orders must not depend on."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'agentpost.db'}"
    return str(request.getfixturevalue("human_collated_pg_url"))


@pytest.fixture
async def collated_store(collated_database_url: str, clock: FakeClock) -> AsyncIterator[Store]:
    """A store on `collated_database_url`."""
    opened = await Store.open(collated_database_url, clock=clock)
    try:
        yield opened
    finally:
        await opened.aclose()


def _delete_all(conn: Connection) -> None:
    for table in reversed(metadata.sorted_tables):  # children before parents
        conn.execute(table.delete())


async def empty_tables(store: Store) -> None:
    """Leave the session's PostgreSQL database as empty as a new SQLite file.

    DELETE, not TRUNCATE: on tables this small it is several times faster. Sequences go on
    counting, so no test may expect a particular `seq`, only their order.
    """
    if not store.is_sqlite:
        await store.write(_delete_all)


@pytest.fixture
async def store(database_url: str, clock: FakeClock) -> AsyncIterator[Store]:
    opened = await Store.open(database_url, clock=clock)
    try:
        await empty_tables(opened)
        yield opened
    finally:
        await opened.aclose()


# -- looking at everything -------------------------------------------------------------------------


def _dump(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for table in metadata.sorted_tables:
        rows = conn.execute(select(table).order_by(*table.primary_key.columns))
        out[table.name] = [tuple(row) for row in rows]
    return out


async def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table: what "nothing changed" compares."""
    return await store.read(_dump)


# -- a whole post office -----------------------------------------------------------------------

OpenOffice = Callable[..., Awaitable[PostOffice]]


@pytest.fixture
async def open_office(database_url: str, clock: FakeClock) -> AsyncIterator[OpenOffice]:
    """`await open_office(**settings)`: a post office on this test's database and clock."""
    opened: list[PostOffice] = []

    async def open_(**settings: Any) -> PostOffice:
        office = await PostOffice.open(Settings(database_url=database_url, **settings), clock=clock)
        if not opened:
            await empty_tables(office.store)
        opened.append(office)
        return office

    try:
        yield open_
    finally:
        for office in reversed(opened):
            await office.aclose()


@pytest.fixture
async def office(open_office: OpenOffice) -> PostOffice:
    return await open_office()


def local_context(
    project: str = "shop", branch: str | None = "main", *, pid: int | None = None
) -> LocalContext:
    """Where a local session runs: this host, and a live pid (this process) unless told."""
    return LocalContext(
        host=this_host(),
        pid=os.getpid() if pid is None else pid,
        project=project,
        worktree=f"/src/{project}",
        branch=branch,
    )


async def session_caller(
    office: PostOffice,
    name: str | None = None,
    project: str = "shop",
    branch: str | None = "main",
    *,
    pid: int | None = None,
) -> Caller:
    """A caller with a live local session in `project` (its name derived from git when None)."""
    session = await office.presence.open_local_session(
        local_context(project, branch, pid=pid), name=name
    )
    return Caller(agent=session.agent, session_id=session.id)


async def agents(office: PostOffice, *names: str) -> list[Caller]:
    """A caller for each name, its agent made if new (no session: as the command line is)."""
    return [await office.presence.ensure_agent(name) for name in names]


async def bodies(office: PostOffice, caller: Caller, **options: Any) -> list[str]:
    """The bodies of the caller's inbox (marked read unless `peek=True`), oldest first."""
    inbox = await office.mailbox.inbox(caller, **options)
    return [m.body for m in inbox.messages]


async def disable_agent(store: Store, name: str) -> None:
    """What an administrator does (no service offers it yet): the agent stays, disabled."""
    await store.write(lambda conn: agent_rows.update_agent(conn, name, disabled_at=store.clock()))


async def seat_directly(office: PostOffice, caller: Caller, project: str = "shop") -> None:
    """Hand the caller's session the seat in the store, past every rule a claim checks: a seat
    taken by a process that died since, or before a rule existed."""
    await office.store.write(
        lambda conn: leases.claim(
            conn,
            office.store.dialect,
            f"leader:{project}",
            holder=caller.agent,
            session_id=caller.session_id or "",
            now=office.store.clock(),
            ttl_s=office.settings.offline_after_s,
        )
    )


async def hand_pid_on(office: PostOffice, caller: Caller) -> None:
    """Make the caller's session look as it does once its process died unended and the system
    gave its pid to another: the pid runs, but the start the session recorded is another's."""
    start = processes.another_start()
    await office.store.write(
        lambda conn: agent_rows.update_session(conn, caller.session_id or "", pid_start=start)
    )


async def refused_without_change(
    office: PostOffice, code: ErrorCode, call: Awaitable[Any]
) -> AgentpostError:
    """`call` is refused with `code`, and afterwards every table is as it was before."""
    before = await snapshot(office.store)
    with pytest.raises(AgentpostError) as caught:
        await call
    assert caught.value.code is code, caught.value
    assert await snapshot(office.store) == before
    return caught.value
