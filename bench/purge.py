"""The purge of wiped words from SQLite's full-text index, on a large file, while sends go on.

A body wiped on ack (`AGENTPOST_CLEAR_ON_ACK`) or mail purged by retention leaves its words in
the index's older segments, so the store merges the whole index, `fulltext.PURGE_PAGES` pages
a write transaction on the writer thread, until none are left (`store.fulltext`,
`Store.purge_wiped`). This measures that purge on a file of `MESSAGES` messages (inbox_1m's
generator and fast build, cached under bench/.cache/; `BENCH_PURGE_MESSAGES` sets another
size), through the services in one process, in three cases, each on its own copy of the file:

- a file of schema 0013 opened for the first time: the migration to 0014, which marks the
  index as holding wiped words, then the first purge, which merges it all (nothing is wiped);
- `SHARES` of the (acknowledged) messages wiped, as `clear_on_ack` does, then purged.

Sends go on all along, `SENDERS` tasks each sending one message then pausing `SEND_GAP_S`:
their latencies while the purge runs are set beside those of the same sends before it. The
purge starts as it does in a server, in the background within a second of a send's commit
(`Store._purge_in_turn`). Each step's merge is timed on the writer thread; the WAL's size is
sampled every `SAMPLE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text

from agentpost.services import PostOffice
from agentpost.store import database, fulltext, migrate, sqlite
from bench.common import RAISED_LIMITS, Report, expect, log, ms, pct, scratch_home, settings_for
from bench.inbox_1m import cached_database

NAME = "purge"
MESSAGES = int(os.environ.get("BENCH_PURGE_MESSAGES", "200000"))
SHARES = (0.01, 0.10)
SENDERS = 4
SEND_GAP_S = 0.01
BEFORE_S = 3.0
"""How long sends are timed before the wipe, for the figures beside."""
AFTER_S = 1.0
"""How long sends go on once the purge is done."""
SAMPLE_S = 0.01
WIPE_BATCH = 1_000
"""Bodies wiped a transaction: an ack of many messages at once."""
PURGE_LIMIT_S = 600.0
STEP_TARGET_S = 0.1
"""A step holds the write lock (every process's) for its merge: beyond this, sends stall."""
MB = 1e6
WAL_CUT = 1_000_000
"""The WAL counts as cut once it is smaller (the sends after the purge write it again)."""

PROBE = """
import json, sqlite3, sys, threading, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
gap, stop, times = float(sys.argv[2]), threading.Event(), []
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
while not stop.is_set():
    t0 = time.perf_counter()
    db.execute("BEGIN IMMEDIATE")
    db.execute("COMMIT")
    times.append((t0, time.perf_counter() - t0))
    time.sleep(gap)
print(json.dumps(times))
"""
"""Another process's writer: it takes the write lock (as its send would), with the store's
busy timeout (30 s), every `SEND_GAP_S`, and times the wait (perf_counter: the same clock as
this process's on Linux)."""


@dataclass
class Case:
    """What one case measured."""

    label: str
    migrate_s: float = 0.0
    wipe_s: float = 0.0
    wiped: int = 0
    steps: list[tuple[float, float, bool]] = field(default_factory=list)
    """(start, end, more) of each `purge_step` call, perf_counter seconds."""
    sends: list[tuple[float, float]] = field(default_factory=list)
    """(start, seconds) of each send since the wipe (or the open)."""
    probes: list[tuple[float, float]] = field(default_factory=list)
    """(start, seconds) of each of another process's takes of the write lock, meanwhile."""
    before: list[float] = field(default_factory=list)
    """Seconds of each send before the wipe."""
    wal_peak: int = 0
    truncated_s: float | None = None
    sizes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """When -> (file bytes, free pages, index bytes)."""

    @property
    def merges(self) -> list[float]:
        return [end - start for start, end, _ in self.steps]

    @property
    def purge_span(self) -> tuple[float, float]:
        return self.steps[0][0], self.steps[-1][1]

    def sends_between(self, start: float, end: float) -> list[float]:
        return [s for t, s in self.sends if start <= t < end]

    def probes_between(self, start: float, end: float) -> list[float]:
        return [s for t, s in self.probes if start <= t < end]


class Senders:
    """`SENDERS` tasks sending paced one-recipient mail, each send timed."""

    def __init__(self, office: PostOffice, case: Case) -> None:
        self._office = office
        self._case = case
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        sender = await self._office.presence.ensure_agent("bench-sender")
        self._stop.clear()
        self._tasks = [asyncio.create_task(self._send(sender, n)) for n in range(SENDERS)]

    async def _send(self, sender: Any, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            t0 = time.perf_counter()
            await self._office.mailbox.send(sender, "agent-001", f"status {n} {i} deploy ready")
            self._case.sends.append((t0, time.perf_counter() - t0))
            i += 1
            await asyncio.sleep(SEND_GAP_S)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


async def _sample_wal(path: Path, case: Case, stop: asyncio.Event, cut: asyncio.Event) -> None:
    """The WAL's peak; and, once the purge is over, how soon after its end the WAL is cut."""
    wal = Path(f"{path}-wal")
    while not stop.is_set():
        size = _size(wal)
        case.wal_peak = max(case.wal_peak, size)
        if case.steps and not case.steps[-1][2] and case.truncated_s is None and size < WAL_CUT:
            case.truncated_s = time.perf_counter() - case.steps[-1][1]
            cut.set()
        await asyncio.sleep(SAMPLE_S)


def _sizes(path: Path) -> Callable[[Connection], tuple[int, int, int]]:
    def read(conn: Connection) -> tuple[int, int, int]:
        free = conn.execute(text("PRAGMA freelist_count")).scalar_one()
        index = conn.execute(text("SELECT sum(length(block)) FROM messages_fts_data")).scalar_one()
        return path.stat().st_size, int(free), int(index or 0)

    return read


def _start_probe(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, str(path), str(SEND_GAP_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def _probe_results(probe: subprocess.Popen[str]) -> list[tuple[float, float]]:
    out, _ = await asyncio.to_thread(probe.communicate, "")
    expect(probe.returncode == 0, f"the other process's writer exited {probe.returncode}")
    return [(t, s) for t, s in json.loads(out)]


def _to_0013(path: Path) -> None:
    """The file as an agentpost of schema 0013 left it (before wiped words were purged)."""
    engine = sqlite.make_engine(path, pooled=False)
    try:
        with engine.connect() as conn, sqlite.transaction(conn, immediate=True):
            migrate.downgrade(conn, "0013")
    finally:
        engine.dispose()


def _wipe_batches(share: float) -> list[list[int]]:
    """A random `share` of all messages, among the older 90% (acknowledged, in the build)."""
    rng = random.Random(20261204)
    chosen = rng.sample(range(1, int(MESSAGES * 0.9) + 1), int(MESSAGES * share))
    return [chosen[i : i + WIPE_BATCH] for i in range(0, len(chosen), WIPE_BATCH)]


def _wipe(seqs: list[int]) -> Callable[[Connection], int]:
    """What `clearing.clear_handled` does to a body once its last reader acked it."""

    def tx(conn: Connection) -> int:
        marks = ",".join(str(seq) for seq in seqs)
        update = text(f"UPDATE messages SET body = '', data = NULL WHERE seq IN ({marks})")
        return int(conn.execute(update).rowcount)

    return tx


async def _wipe_share(office: PostOffice, case: Case, share: float) -> None:
    """Sends timed before, then `share` of the messages wiped."""
    senders = Senders(office, case)
    await senders.start()
    await asyncio.sleep(BEFORE_S)
    await senders.stop()
    await asyncio.sleep(database.INDEX_AFTER_S + 0.5)  # their indexing is over
    case.before = [seconds for _, seconds in case.sends]
    case.sends.clear()
    t0 = time.perf_counter()
    for batch in _wipe_batches(share):
        case.wiped += await office.store.write(_wipe(batch), lengthy=True)
    case.wipe_s = time.perf_counter() - t0


async def _purge(office: PostOffice, case: Case, db: Path, cut: asyncio.Event) -> None:
    """Sends, and another process's writes, until the background's purge is over."""
    store = office.store
    expect(await store.read(fulltext.wiped), "the index holds wiped words")
    expect(not case.steps, "no purge before the next send")
    probe = _start_probe(db)
    senders = Senders(office, case)
    try:
        await senders.start()  # the first send's commit has the background purge soon
        deadline = time.monotonic() + PURGE_LIMIT_S
        while not case.steps or case.steps[-1][2] or await store.read(fulltext.wiped):
            expect(time.monotonic() < deadline, f"a purge within {PURGE_LIMIT_S:.0f} s")
            await asyncio.sleep(SAMPLE_S)
        await asyncio.sleep(AFTER_S)
        await senders.stop()
        case.probes = await _probe_results(probe)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cut.wait(), 30)


async def _case(source: Path, label: str, share: float | None) -> Case:
    """One copy of `source`: wiped by `share` (None: taken back to schema 0013), then purged."""
    case = Case(label)
    with scratch_home(NAME) as home:
        db = home / "agentpost.db"
        shutil.copyfile(source, db)
        if share is None:
            _to_0013(db)
            t0 = time.perf_counter()
            migrate.migrate_sqlite(db)
            case.migrate_s = time.perf_counter() - t0
        office = await PostOffice.open(settings_for(home))
        real_step = fulltext.purge_step

        def timed_step(conn: Connection) -> bool:
            t0 = time.perf_counter()
            more = real_step(conn)
            case.steps.append((t0, time.perf_counter(), more))
            return more

        fulltext.purge_step = timed_step
        stop_sampling, cut = asyncio.Event(), asyncio.Event()
        sampling = asyncio.create_task(_sample_wal(db, case, stop_sampling, cut))
        try:
            case.sizes["before"] = await office.store.read(_sizes(db))
            if share is not None:
                await _wipe_share(office, case, share)
                case.sizes["wiped"] = await office.store.read(_sizes(db))
            await _purge(office, case, db, cut)
            case.sizes["purged"] = await office.store.read(_sizes(db))
            await office.store.write(
                lambda c: c.execute(
                    text("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
                ),
                lengthy=True,
            )
        finally:
            fulltext.purge_step = real_step
            stop_sampling.set()
            await sampling
            await office.aclose()
    return case


def _mb(n: int) -> str:
    return f"{n / MB:,.1f} MB"


def _sends(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {ms(pct(values, 50))}, p99 {ms(pct(values, 99))}, max {ms(max(values))}"


def _report(report: Report, case: Case) -> None:
    start, end = case.purge_span
    merges = case.merges
    during = case.sends_between(start, end)
    after = case.sends_between(end, end + AFTER_S)
    file0, _, index0 = case.sizes["before"]
    file1, free1, index1 = case.sizes["purged"]
    where = f"purge: {case.label}"
    if case.migrate_s:
        report.add(f"{where}: the migration 0013 -> 0014", "(reported)", ms(case.migrate_s))
    if case.wiped:
        index_w = case.sizes["wiped"][2]
        report.add(
            f"{where}: wiping {case.wiped:,} bodies ({WIPE_BATCH:,} a transaction)",
            "(reported)",
            f"{case.wipe_s:.2f} s; index {_mb(index0)} -> {_mb(index_w)}",
        )
    report.add(
        f"{where}: the purge, {len(merges)} steps of {fulltext.PURGE_PAGES} pages",
        "(reported)",
        f"{end - start:.2f} s, {sum(merges):.2f} s merging",
    )
    report.add(
        f"{where}: one step's merge (the write lock held)",
        f"≤ {ms(STEP_TARGET_S)} max",
        f"p50 {ms(pct(merges, 50))}, max {ms(max(merges))}",
        max(merges) <= STEP_TARGET_S,
    )
    report.add(f"{where}: a send meanwhile ({len(during):,} sends)", "(reported)", _sends(during))
    others = case.probes_between(start, end)
    report.add(
        f"{where}: another process's write meanwhile ({len(others):,} writes)",
        "(reported)",
        _sends(others),
    )
    report.add(
        f"{where}: a send before the wipe / after the purge",
        "(reported)",
        f"{_sends(case.before)} / {_sends(after)}" if case.before else f"- / {_sends(after)}",
    )
    truncated = "not in 30 s" if case.truncated_s is None else f"{case.truncated_s:.1f} s after"
    report.add(
        f"{where}: the WAL's peak, and cut to nothing",
        "(reported)",
        f"{_mb(case.wal_peak)}; cut {truncated}",
    )
    report.add(
        f"{where}: file, and index, before -> after",
        "(reported)",
        f"file {_mb(file0)} -> {_mb(file1)} ({_mb(free1 * 4096)} free pages); "
        f"index {_mb(index0)} -> {_mb(index1)}",
    )


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    source = cached_database(MESSAGES, kind=f"purge-{MESSAGES}", who=NAME)
    log(NAME, "a file of schema 0013 opened, migrated, purged")
    cases = [await _case(source, "first open after 0014", None)]
    for share in SHARES:
        log(NAME, f"{share:.0%} wiped, then purged")
        cases.append(await _case(source, f"{share:.0%} wiped", share))
    for case in cases:
        _report(report, case)
    report.config["BENCH_PURGE_MESSAGES"] = str(MESSAGES)
    report.notes.append(
        f"{MESSAGES:,} messages (inbox_1m's generator), SQLite {sqlite3.sqlite_version}, "
        f"{SENDERS} senders pausing {ms(SEND_GAP_S)} after each send; services in one process"
    )
    report.data = {
        case.label: {
            "migrate_s": case.migrate_s,
            "wipe_s": case.wipe_s,
            "wiped": case.wiped,
            "steps": case.steps,
            "sends": case.sends,
            "probes": case.probes,
            "before_s": case.before,
            "wal_peak": case.wal_peak,
            "truncated_s": case.truncated_s,
            "sizes": case.sizes,
        }
        for case in cases
    }
    return report
