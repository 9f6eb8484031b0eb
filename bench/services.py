"""Figure 1: one-recipient sends per second through the services, in one process, on SQLite.

The services are called directly (no MCP): `Mailbox.send` from one sender to one recipient,
first one call at a time (sequential), then from many concurrent tasks, each its own sender
agent, which is where the SQLite writer's batching (concurrent writes committed together in one
transaction, a savepoint each) pays off.
"""

from __future__ import annotations

import asyncio
import time

from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from bench.common import RAISED_LIMITS, Report, log, rate, scratch_home, settings_for

NAME = "services"
TARGET_PER_S = 1000
SEQUENTIAL = 500
CONCURRENT_TASKS = 64
CONCURRENT_SENDS = 2048
ROUNDS = 3
WARMUP = 50
BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."


async def _sequential(office: PostOffice, sender: Caller, to: str, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        await office.mailbox.send(sender, to, f"{BODY} ({i})")
    return time.perf_counter() - start


async def _concurrent(office: PostOffice, senders: list[Caller], to: str, n: int) -> float:
    remaining = n

    async def worker(sender: Caller) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await office.mailbox.send(sender, to, f"{BODY} ({remaining})")

    start = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in senders))
    return time.perf_counter() - start


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    with scratch_home(NAME) as home:
        office = await PostOffice.open(settings_for(home))
        try:
            sender = await office.presence.ensure_agent("bench-sender")
            senders = [
                await office.presence.ensure_agent(f"bench-sender-{i:02d}")
                for i in range(CONCURRENT_TASKS)
            ]
            await office.presence.ensure_agent("bench-warmup")
            await _sequential(office, sender, "bench-warmup", WARMUP)
            seq: list[float] = []
            con: list[float] = []
            for n in range(ROUNDS):
                # A fresh recipient each round, so every round starts from an empty inbox.
                recipient = f"bench-inbox-{n}"
                await office.presence.ensure_agent(recipient)
                log(NAME, f"round {n + 1}: {SEQUENTIAL} sequential sends")
                seq.append(await _sequential(office, sender, recipient, SEQUENTIAL))
                log(NAME, f"round {n + 1}: {CONCURRENT_SENDS} sends, {CONCURRENT_TASKS} tasks")
                con.append(await _concurrent(office, senders, recipient, CONCURRENT_SENDS))
        finally:
            await office.aclose()
        seq_s, con_s = min(seq), min(con)

    con_rate = CONCURRENT_SENDS / con_s
    report.add(
        f"services: one-recipient sends, {CONCURRENT_TASKS} concurrent sender tasks",
        f"≥ {TARGET_PER_S:,}/s",
        rate(CONCURRENT_SENDS, con_s),
        con_rate >= TARGET_PER_S,
    )
    report.add(
        "services: one-recipient sends, one at a time",
        "(reported)",
        f"{rate(SEQUENTIAL, seq_s)} ({seq_s / SEQUENTIAL * 1000:.2f} ms each)",
    )
    report.data = {
        "sequential": {"sends": SEQUENTIAL, "seconds": seq},
        "concurrent": {"tasks": CONCURRENT_TASKS, "sends": CONCURRENT_SENDS, "seconds": con},
    }
    report.notes.append(
        f"best of {ROUNDS} rounds; each round's recipient starts empty and ends holding "
        f"{SEQUENTIAL + CONCURRENT_SENDS:,} unacknowledged messages"
    )
    return report
