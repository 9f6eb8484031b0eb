"""How the command line shows mail to a person: Rich text, or JSON for scripts.

Nearly every word shown comes from outside: bodies, names, objectives, branches, arguments echoed
in errors. So both consoles read no markup and no emoji codes, and a string always prints as
written, but for control characters, which are written out (`visible`); the command line's own
colours are spans of `Text` (`styled`), never markup in a string.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import typer
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from agentpost.cli.entry import EXIT_CODES
from agentpost.cli.literal import json_text, visible
from agentpost.domain.errors import AgentpostError
from agentpost.domain.leadership import Leader
from agentpost.domain.models import Message, Presence, SendResult, SentMessage, Trust
from agentpost.domain.requests import RequestAnswer
from agentpost.domain.reservations import Reservation
from agentpost.domain.tasks import Task


class _LiteralConsole(Console):
    """Prints every string, in a table's cells too, as `visible` writes it."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(visible(text), **options)


UNFOLDED = 1_000_000
"""The width of output to a file or a pipe: no line a script reads is folded or cut short."""


def _width() -> int | None:
    """A terminal's own width, or `COLUMNS` where it gives one (Rich reads both); else, writing
    to a file or a pipe, no limit: Rich's fallback, 80 columns, folded a long subject or body
    and cut a table's cells short in every script that read the output."""
    if os.environ.get("COLUMNS", "").strip().isdigit() or sys.stdout.isatty():
        return None
    return UNFOLDED


console = _LiteralConsole(highlight=False, markup=False, emoji=False, width=_width())
errors = _LiteralConsole(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)

Part = str | tuple[str, str]
"""Literal text, or (literal text, a Rich style)."""


def styled(*parts: Part) -> Text:
    """One line of output: every part shown literally, a style only where the code gives one."""
    return Text.assemble(
        *(visible(part) if isinstance(part, str) else (visible(part[0]), part[1]) for part in parts)
    )


def emit_json(value: Any) -> None:
    sys.stdout.write(json_text(value, indent=2) + "\n")


def refusal(err: AgentpostError, *, as_json: bool = False) -> typer.Exit:
    """Show a refusal (`error: <code>: <message>` on stderr, with how long to wait where
    waiting helps, or `{"error": …}` on stdout for a script); the exit to raise with the code's
    status."""
    if as_json:
        emit_json({"error": err.to_dict()})
    else:
        text = f" {err.code.value}: {err.message}"
        if err.retry_after_s is not None:
            text += f" (try again in {max(1, math.ceil(err.retry_after_s))} s)"
        errors.print(styled(("error:", "red"), text))
    return typer.Exit(EXIT_CODES[err.code])


def whole(header: str, values: Sequence[str] = ()) -> Column:
    """A table's column of what a person types back (a key id, a name, a path): a narrow
    terminal (or a `COLUMNS` that says it is narrow) has Rich cut a cell short with an
    ellipsis, and an id cut so cannot be used. Values up to the longest of `values` stay whole
    on one line (as a key id does); a longer one folds onto the next line rather than lose its
    end."""
    if values:
        return Column(header, no_wrap=True, min_width=max(len(v) for v in values))
    return Column(header, overflow="fold")


def when(ts: float) -> str:
    """A clock time, dated when it is not today's: a reservation lasts up to a week, and its
    expiry shown as a bare time would read as today's."""
    shown = time.localtime(ts)
    if shown[:3] == time.localtime()[:3]:
        return time.strftime("%H:%M:%S", shown)
    return time.strftime("%Y-%m-%d %H:%M:%S", shown)


_PLAIN_THREAD = re.compile(r'[^\s(),"]+')


def _place(m: Message) -> str:
    """Where a message sits, for `thread ID` and `--reply-to ID`: its thread, what it answers."""
    # A thread id is whatever label its sender chose: one that is no plain token is quoted,
    # so that its line breaks cannot begin a made-up message of their own, nor its brackets
    # end this list early.
    plain = _PLAIN_THREAD.fullmatch(m.thread_id)
    thread = m.thread_id if plain else json.dumps(m.thread_id, ensure_ascii=False)
    where = [f"thread {thread}"] if m.thread_id != m.id else []
    if m.reply_to is not None:
        where.append(f"re {m.reply_to}")
    return f" ({', '.join(where)})" if where else ""


def _named(name: str, trust: Trust, style: str = "cyan") -> list[Part]:
    """An agent's name, marked when the owner has not vouched for it: its words that follow
    are a stranger's, as an untrusted message is marked."""
    mark: list[Part] = [] if trust is Trust.VERIFIED else [(f" {trust.value}", "yellow")]
    return [(name, style), *mark]


def message_line(m: Message) -> Text:
    # A request's asker waits for an answer (`agentpost respond`); a task's, a response's
    # and the post office's own messages read differently from a colleague's note too.
    flags: list[Part] = [] if m.kind.value == "message" else [(f" {m.kind.value}", "magenta")]
    if m.priority.value == "urgent":
        flags.append((" urgent", "red"))
    if m.must_read:
        flags.append((" must-read", "magenta"))
    if m.trust.value != "verified":
        flags.append((f" {m.trust.value}", "yellow"))
    if m.state:
        flags.append((f" ({m.state.value})", "dim"))
    data: list[Part] = []
    if m.data:
        data = ["\n  ", (f"data: {json.dumps(m.data, ensure_ascii=False)}", "dim")]
    return styled(
        (f"{when(m.created_at)} {m.id}{_place(m)}", "dim"),
        " ",
        (m.sender, "cyan"),
        " → ",
        (", ".join(m.to), "green"),
        (f" {m.subject}" if m.subject else "", "bold"),
        *flags,
        "\n  " + m.body.replace("\n", "\n  "),  # no line of it where a header starts
        *data,
    )


def sent_line(result: SendResult) -> str:
    """A broadcast is said to go to its channel, members in brackets: the names alone read as
    a direct message to them, and an empty channel as mail sent to nobody."""
    names = ", ".join(result.to)
    to = f"#{result.channel} ({names or 'no other member yet'})" if result.channel else names
    skipped = result.skipped_full
    unless = f"; not delivered to {', '.join(skipped)}: inbox full" if skipped else ""
    return f"sent {result.id} to {to}{unless}"


def show_messages(messages: Sequence[Message], empty: str = "No messages.") -> None:
    if not messages:
        console.print(styled((empty, "dim")))
    for m in messages:
        console.print(message_line(m))


def _ago(seconds: float) -> str:
    """How long ago, in the largest whole unit: `17m ago`, not `1042s ago`."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def _tagged(name: str, trust: Trust) -> str:
    """An agent's name in a table's cell, marked when the owner has not vouched for it."""
    return name if trust is Trust.VERIFIED else f"{name} ({trust.value})"


def show_presence(agents: Sequence[Presence], include_offline: bool = False) -> None:
    if not agents:
        empty = (
            "No agents." if include_offline else "Nobody at work (--all shows offline agents too)."
        )
        console.print(styled((empty, "dim")))
        return
    table = Table(whole("agent"), "project", "branch", "status", "objective", "seen")
    for p in agents:
        seen = "online" if p.online else "never"
        if not p.online and p.last_seen_s is not None:  # 0.0 is a moment ago
            seen = _ago(p.last_seen_s)
        where = (p.project or "", p.branch or "")
        table.add_row(_tagged(p.name, p.trust), *where, p.status.value, p.objective, seen)
    console.print(table)  # plain strings in cells: the console reads no markup


def show_sent(sent: Sequence[SentMessage]) -> None:
    if not sent:
        console.print(styled(("Nothing sent.", "dim")))
    for s in sent:
        console.print(message_line(s.message))
        for r in s.receipts:
            console.print(f"    {r.to}: {r.state.value}")


def show_leaders(seats: Sequence[Leader]) -> None:
    if not seats:
        console.print(styled(("No project has had a leader yet.", "dim")))
        return
    table = Table(whole("project"), whole("leader"), "term", "branch", "since")
    for s in seats:
        since = when(s.since) if s.since else ""
        table.add_row(s.project, s.leader or "(free)", str(s.term), s.branch or "", since)
    console.print(table)


def task_line(t: Task) -> Text:
    flags: list[Part] = [(" overdue", "red")] if t.overdue else []
    if t.priority.value == "urgent":
        flags.append((" urgent", "red"))
    return styled(
        (f"{when(t.updated_at)} {t.id}", "dim"),
        (f" [{t.status.value}]", "bold"),
        *flags,
        " ",
        *_named(t.creator, t.creator_trust),
        " → ",
        *_named(t.assignee, t.assignee_trust, "green"),
        f" {t.title}",
    )


def show_tasks(tasks: Sequence[Task]) -> None:
    if not tasks:
        console.print(styled(("No tasks.", "dim")))
    for t in tasks:
        console.print(task_line(t))


def show_task(t: Task) -> None:
    """One task with all it holds: detail, data, result, and each change with its note."""
    console.print(task_line(t))
    due = "" if t.due is None else f", due {time.strftime('%Y-%m-%d %H:%M', time.localtime(t.due))}"
    parts: list[Part] = [(f"  thread {t.thread_id}{due}", "dim")]
    if t.detail:
        parts.append("\n  " + t.detail.replace("\n", "\n  "))
    # The result is the assignee's words, marked as its notes are when it gave them unvouched.
    given = t.result_trust or Trust.UNTRUSTED
    result = "result" if given is Trust.VERIFIED else f"result ({given.value})"
    for name, value in (("data", t.data), (result, t.result)):
        if value is not None:
            parts += ["\n  ", (f"{name}: {json.dumps(value, ensure_ascii=False)}", "dim")]
    if t.result_withheld:
        parts += ["\n  ", ("result withheld: given while you blocked its assignee", "dim")]
    console.print(styled(*parts))
    for c in t.history:
        moved = c.to_status.value
        if c.from_status is not None:
            moved = f"{c.from_status.value} → {moved}"
        note = "\n    " + c.note.replace("\n", "\n    ") if c.note else ""
        if c.withheld:
            note = " (note withheld: written while you blocked its writer)"
        actor = _named(c.actor, c.trust)
        console.print(styled((f"  {when(c.at)} ", "dim"), *actor, f" {moved}{note}"))


def show_answer(found: RequestAnswer) -> None:
    """A question's answer as the mail that carries it, or that none came yet."""
    if found.response is None:
        console.print(styled((f"No answer to {found.request_id} yet.", "dim")))
    else:
        console.print(message_line(found.response))


def show_reservations(held: Sequence[Reservation], project: str) -> None:
    if not held:
        console.print(styled((f"No live reservations in {project}.", "dim")))
        return
    table = Table(
        whole("path"), whole("agent"), "kind", "until", "reason", title=f"reservations in {project}"
    )
    for r in held:
        kind = "exclusive" if r.exclusive else "shared"
        table.add_row(r.path, _tagged(r.agent, r.trust), kind, when(r.expires_at), r.reason)
    console.print(table)
