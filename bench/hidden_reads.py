"""Reads past mail they hide: expired unread mail, and a blocked sender's broadcasts.

Every read but the inbox (a thread, a channel's history, a search, one message) shows the
reader only what they may see: not mail whose TTL passed unread, nor a broadcast from someone
they block. Those rows are still in the channel and the thread, newest first, so a read walks
past them (one indexed probe of deliveries, withheld and blocks each) to reach the mail it
shows. This measures that walk at its worst: the reader's channel and thread end in
`HIDDEN` messages each that it may not see, after `PAGE` it may.

On SQLite, through the services, in one process. The reader `bench-reader` blocks
`bench-spammer`, whose `HIDDEN` broadcasts to `#ops` are then withheld from it;
`bench-friend` sends `HIDDEN` broadcasts to `#ops` and `HIDDEN` direct messages in one thread,
all with a TTL that the (injected) clock then passes. Each read is timed `RUNS` times (median)
while that mail is still queued past its TTL (no sweep yet), and again once the sweep made it
`expired` tombstones. Then the sweeper's look (`Mailbox.expire_due` with nothing left due),
which must step past no tombstone, nor mail read before its TTL passed: both stay until
retention removes them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from bench.common import RAISED_LIMITS, Report, log, median, ms, scratch_home, settings_for

NAME = "hidden_reads"
HIDDEN = 5_000
PAGE = 20
RUNS = 30
TASKS = 32
TTL_S = 60.0


class Clock:
    """The store's clock, moved on past the TTLs without waiting for them."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


async def _many(n: int, send: Callable[[int], Awaitable[Any]]) -> None:
    """`n` sends from `TASKS` concurrent tasks: the writer commits them in batches."""
    left = iter(range(n))

    async def worker() -> None:
        for i in left:
            await send(i)

    await asyncio.gather(*(worker() for _ in range(TASKS)))


async def _fill(office: PostOffice) -> tuple[Caller, str, str]:
    mailbox = office.mailbox
    ensure = office.presence.ensure_agent
    reader, friend, spammer = [await ensure(f"bench-{w}") for w in ("reader", "friend", "spammer")]
    for who in (reader, friend, spammer):
        await office.channels.join(who, "#ops")
    first = await mailbox.send(friend, "bench-reader", "the thread starts here")
    seen: list[str] = []
    for i in range(PAGE):
        await mailbox.send(friend, "#ops", f"visible broadcast {i} rollout")
        sent = await mailbox.send(friend, "bench-reader", f"visible {i} rollout", reply_to=first.id)
        seen.append(sent.id)
    await office.directory.block(reader, "bench-spammer")
    log(NAME, f"{HIDDEN:,} withheld broadcasts, {2 * HIDDEN:,} with a TTL")
    await _many(HIDDEN, lambda i: mailbox.send(spammer, "#ops", f"spam {i} rollout"))
    await _many(HIDDEN, lambda i: mailbox.send(friend, "#ops", f"lapsed {i} rollout", ttl_s=TTL_S))
    await _many(
        HIDDEN,
        lambda i: mailbox.send(
            friend, "bench-reader", f"lapsed {i} rollout", reply_to=first.id, ttl_s=TTL_S
        ),
    )
    return reader, first.thread_id, seen[0]


async def _time(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    times, found = [], None
    for _ in range(RUNS):
        start = time.perf_counter()
        found = await call()
        times.append(time.perf_counter() - start)
    return median(times), found


async def _reads(office: PostOffice, reader: Caller, thread: str, one: str) -> dict[str, float]:
    mailbox, history = office.mailbox, office.history
    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        f"channel history, newest {PAGE}": lambda: office.channels.history(reader, "#ops", PAGE),
        f"thread, newest {PAGE}": lambda: history.thread(reader, thread, PAGE),
        f"search, newest {PAGE}": lambda: history.search(reader, "rollout", PAGE),
        "one message by id": lambda: history.get(reader, one),
        f"inbox page of {PAGE} (peek)": lambda: mailbox.inbox(reader, limit=PAGE, peek=True),
    }
    out = {}
    for name, call in reads.items():
        seconds, found = await _time(call)
        shown = len(getattr(found, "messages", found)) if not hasattr(found, "body") else 1
        log(NAME, f"  {name}: {ms(seconds)} ({shown} shown)")
        out[name] = seconds
    return out


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    clock = Clock()
    with scratch_home(NAME) as home:
        office = await PostOffice.open(settings_for(home), clock=clock)
        try:
            reader, thread, one = await _fill(office)
            await office.history.search(reader, "rollout")  # the index takes the sends in
            clock.skew = TTL_S + 1
            log(NAME, "past the TTL, before any sweep")
            due = await _reads(office, reader, thread, one)
            await office.mailbox.expire_due()
            log(NAME, "after the sweep made tombstones")
            swept = await _reads(office, reader, thread, one)
            look, _ = await _time(office.mailbox.expire_due)
            log(NAME, f"  the sweeper's look, nothing due: {ms(look)}")
        finally:
            await office.aclose()
    for name in due:
        report.add(
            f"hidden_reads: {name}, past {HIDDEN:,} hidden in each of channel and thread",
            "(reported)",
            f"{ms(due[name])} before the sweep, {ms(swept[name])} after",
        )
    report.add(
        f"hidden_reads: the sweeper's look for due mail, past {2 * HIDDEN:,} expired tombstones",
        "(reported)",
        ms(look),
    )
    report.data = {
        "hidden": HIDDEN,
        "page": PAGE,
        "runs": RUNS,
        "due": due,
        "swept": swept,
        "look_s": look,
    }
    report.notes.append(f"median of {RUNS}; SQLite, services in one process")
    return report
