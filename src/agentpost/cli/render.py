"""How the command line shows mail to a person: Rich text, or JSON for scripts."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentpost.domain.leadership import Leader
from agentpost.domain.models import Message, Presence, SentMessage

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def _when(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def message_line(m: Message) -> str:
    to = ", ".join(m.to)
    subject = f" [bold]{escape(m.subject)}[/bold]" if m.subject else ""
    flags = "".join(
        [
            " [red]urgent[/red]" if m.priority.value == "urgent" else "",
            " [magenta]must-read[/magenta]" if m.must_read else "",
            f" [yellow]{m.trust.value}[/yellow]" if m.trust.value != "verified" else "",
            f" [dim]({m.state.value})[/dim]" if m.state else "",
        ]
    )
    head = (
        f"[dim]{_when(m.created_at)} {m.id}[/dim] [cyan]{escape(m.sender)}[/cyan] → "
        f"[green]{escape(to)}[/green]{subject}{flags}"
    )
    body = escape(m.body)
    data = (
        f"\n  [dim]data: {escape(json.dumps(m.data, ensure_ascii=False))}[/dim]" if m.data else ""
    )
    return f"{head}\n  {body}{data}"


def show_messages(messages: Sequence[Message], empty: str = "No messages.") -> None:
    if not messages:
        console.print(f"[dim]{empty}[/dim]")
    for m in messages:
        console.print(message_line(m))


def show_presence(agents: Sequence[Presence]) -> None:
    table = Table("agent", "project", "branch", "status", "objective", "seen")
    for p in agents:
        seen = "online" if p.online else (f"{p.last_seen_s:.0f}s ago" if p.last_seen_s else "never")
        table.add_row(p.name, p.project or "", p.branch or "", p.status.value, p.objective, seen)
    console.print(table)


def show_sent(sent: Sequence[SentMessage]) -> None:
    for s in sent:
        console.print(message_line(s.message))
        for r in s.receipts:
            console.print(f"    {r.to}: {r.state.value}")


def show_leaders(seats: Sequence[Leader]) -> None:
    if not seats:
        console.print("[dim]No project has had a leader yet.[/dim]")
        return
    table = Table("project", "leader", "term", "branch", "since")
    for s in seats:
        since = _when(s.since) if s.since else ""
        table.add_row(s.project, s.leader or "(free)", str(s.term), s.branch or "", since)
    console.print(table)
