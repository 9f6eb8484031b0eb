"""What the SQLite writer knows of each inbox's open mail without counting it: an upper bound.

Every send looks at whether its recipients' inboxes reached the cap on unacknowledged mail
(`mail.at_cap`), and that look walks the recipient's open mail, up to the cap: some 20 µs at
200 waiting, several times that near a cap of 1,000, on every send to that inbox. Open mail
grows only by deliveries; acks and expiry shrink it. So once counted, the count plus what the
same connection has delivered since stays at or above the truth, for as long as no other
connection commits: a bound under the cap needs no count.

The SQLite writer keeps bounds on its own connection (`keep`) and drops them all whenever it
sees another connection's commit (`forget`, from its look at `PRAGMA data_version`, which it
takes in every write transaction before anything is read). A count taken in a transaction that
then rolls back, or a delivery rolled back, leaves a bound too high, never too low: the next
look counts. A connection that keeps none (PostgreSQL's, beside other replicas) counts each
time.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection

_KEY = "agentpost.inbox_bounds"


def keep(conn: Connection) -> None:
    """Keep bounds on `conn` from now on: only for a connection that sees every other
    connection's commit before it reads (the SQLite writer's)."""
    conn.info[_KEY] = {}


def forget(conn: Connection) -> None:
    """Another connection committed: it may have delivered to any inbox."""
    bounds: dict[str, int] | None = conn.info.get(_KEY)
    if bounds is not None:
        bounds.clear()


def bound(conn: Connection, name: str) -> int | None:
    """At least as many open deliveries as `name` has, if known."""
    bounds: dict[str, int] | None = conn.info.get(_KEY)
    return None if bounds is None else bounds.get(name)


def counted(conn: Connection, name: str, open_mail: int) -> None:
    """`name` has exactly `open_mail` open deliveries as of this transaction."""
    bounds: dict[str, int] | None = conn.info.get(_KEY)
    if bounds is not None:
        bounds[name] = open_mail


def delivered(conn: Connection, names: Iterable[str]) -> None:
    """One more open delivery for each of `names` (a name twice: two)."""
    bounds: dict[str, int] | None = conn.info.get(_KEY)
    if bounds:
        for name in names:
            if name in bounds:
                bounds[name] += 1
