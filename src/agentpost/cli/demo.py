"""`agentpost demo`: two agents on a scratch post office, each step shown as it happens.

Alice blocks in `wait` while Bob sends; the wait wakes at once, Alice reads, replies in the
thread and acknowledges; Bob sees the receipt turn from `queued` to `acked`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

from agentpost.cli.render import console, message_line, styled
from agentpost.config import load_settings
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from agentpost.services.local_identity import detect


async def run_demo(pause: float) -> None:
    with tempfile.TemporaryDirectory(prefix="agentpost-demo-") as folder:
        settings = load_settings(home=Path(folder), database_url=None, agent=None, agents=None)
        office = await PostOffice.open(settings)
        try:
            console.print(styled((f"scratch post office: {settings.resolved_database_url}", "dim")))
            await _story(office, pause)
        finally:
            await office.aclose()


def _step(text: str) -> None:
    console.print(styled("\n", ("▸", "bold blue"), f" {text}"))


async def _story(office: PostOffice, pause: float) -> None:
    context = detect()
    a = await office.presence.open_local_session(context, name="alice", objective="review #42")
    b = await office.presence.open_local_session(context, name="bob", objective="fix the parser")
    alice, bob = Caller("alice", a.id), Caller("bob", b.id)
    _step("alice and bob are at work:")
    for p in await office.presence.who():
        console.print(f"  {p.name}: {p.objective} ({'online' if p.online else 'offline'})")
    await anyio.sleep(pause)

    _step("alice waits for mail (no polling)…")
    async with anyio.create_task_group() as group:
        woke: list[str] = []

        async def alice_waits() -> None:
            found = await office.mailbox.wait(alice, timeout_s=30)
            woke.extend(m.id for m in found.messages)
            _step("alice's wait wakes with:")
            for m in found.messages:
                console.print(message_line(m))

        group.start_soon(alice_waits)
        await anyio.sleep(pause)
        _step("bob sends alice a message with structured data:")
        sent = await office.mailbox.send(
            bob,
            "alice",
            "The parser fix is on branch fix/parser; can you review it?",
            subject="review please",
            data={"branch": "fix/parser", "files": ["src/parser.py"]},
        )
        console.print(f"  sent {sent.id}")
    await anyio.sleep(pause)

    _step("alice replies in the thread and acknowledges bob's message:")
    await office.mailbox.send(alice, "bob", "Looks good, merging.", reply_to=sent.id)
    await office.mailbox.ack(alice, woke)
    await anyio.sleep(pause)

    _step("bob reads the reply and checks his receipt:")
    for m in (await office.mailbox.inbox(bob)).messages:
        console.print(message_line(m))
    for s in await office.history.sent(bob):
        for r in s.receipts:
            console.print(styled(f"  {s.message.id} → {r.to}: ", (r.state.value, "green")))
    await anyio.sleep(pause)

    _step("the whole thread, oldest first:")
    for m in await office.history.thread(bob, sent.thread_id):
        console.print(message_line(m))
    await office.presence.end_session(a.id)
    await office.presence.end_session(b.id)
    console.print(
        styled("\n", ("done.", "bold green"), " Wire `agentpost mcp` into your agents next.")
    )
