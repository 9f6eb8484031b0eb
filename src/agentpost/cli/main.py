"""`agentpost`: the command line. Each command is one service call, shown as text or JSON.

Acts as `--as NAME` (default `AGENTPOST_AGENT`, else `owner`). Exit status 0 on success; a
refusal prints `error: <code>: <message>` and exits with the code's status (see EXIT_CODES).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import typer

from agentpost.cli.entry import EXIT_CODES, serve_mcp
from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller
from agentpost.domain.names import OWNER

T = TypeVar("T")


app = typer.Typer(
    name="agentpost",
    help="A post office for AI agents: identities, inboxes, channels and threads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

AsOption = Annotated[
    str | None,
    typer.Option("--as", help="Act as this agent (default AGENTPOST_AGENT, else owner)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

if TYPE_CHECKING:  # the services are imported when a command runs, to keep --help quick
    from agentpost.services import PostOffice


def _run(
    as_: str | None,
    as_json: bool,
    action: Callable[[PostOffice, Caller], Awaitable[T]],
    *,
    create: bool = False,
) -> T:
    """Open the post office, act as the chosen agent, close; refusals become an exit status.

    Only a command that sends (`create`) brings a new identity into being; reading as a name
    nobody has used is `not_found`, so a typo in `--as` leaves no agent behind.
    """
    from agentpost.cli.render import emit_json, errors
    from agentpost.services import PostOffice

    async def main() -> T:
        settings = Settings()
        office = await PostOffice.open(settings)
        try:
            name = as_ or settings.agent or OWNER
            if create or name == OWNER:
                caller = await office.presence.ensure_agent(name)
            else:
                caller = await office.presence.existing_agent(name)
            return await action(office, caller)
        finally:
            await office.aclose()

    try:
        return anyio.run(main)
    except AgentpostError as err:
        if as_json:
            emit_json({"error": err.to_dict()})
        else:
            errors.print(f"[red]error:[/red] {err.code.value}: {err.message}", markup=True)
        raise typer.Exit(EXIT_CODES[err.code]) from None


@app.command()
def mcp() -> None:
    """Serve this agent session's mailbox over MCP on stdio (started by the MCP client)."""
    raise typer.Exit(serve_mcp())


@app.command()
def who(
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include offline agents.")] = False,
    as_: AsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Who is at work: agents, projects, branches, objectives, presence."""
    from agentpost.cli.render import emit_json, show_presence

    found = _run(as_, as_json, lambda o, c: o.presence.who(project, all_))
    if as_json:
        emit_json({"agents": [p.to_dict() for p in found]})
    else:
        show_presence(found)


def _parse_data(data: str | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"--data is not JSON: {exc}") from None


@app.command()
def send(
    to: Annotated[str, typer.Argument(help="A name, names separated by commas, or #channel.")],
    body: Annotated[str, typer.Argument(help="The message text.")],
    subject: Annotated[str | None, typer.Option(help="One-line subject.")] = None,
    data: Annotated[str | None, typer.Option(help="Structured data as JSON.")] = None,
    thread: Annotated[str | None, typer.Option(help="Thread id to post in.")] = None,
    reply_to: Annotated[str | None, typer.Option(help="Message id this answers.")] = None,
    urgent: Annotated[bool, typer.Option(help="Mark urgent.")] = False,
    ttl: Annotated[
        float | None, typer.Option(help="Expire unread after this many seconds.")
    ] = None,
    must_read: Annotated[bool, typer.Option(help="Never expires unread.")] = False,
    as_: AsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send a message to agents or a #channel."""
    from agentpost.cli.render import console, emit_json

    targets: str | list[str] = to if to.startswith("#") or "," not in to else to.split(",")

    async def action(office: PostOffice, caller: Caller) -> Any:
        return await office.mailbox.send(
            caller,
            targets,
            body,
            subject=subject,
            data=_parse_data(data),
            thread_id=thread,
            reply_to=reply_to,
            priority="urgent" if urgent else "normal",
            ttl_s=ttl,
            must_read=must_read,
        )

    result = _run(as_, as_json, action, create=True)
    if as_json:
        emit_json(result.to_dict())
    else:
        console.print(f"sent {result.id} to {', '.join(result.to) or 'nobody yet'}")


@app.command()
def inbox(
    all_: Annotated[bool, typer.Option("--all", help="Read and acked mail too.")] = False,
    peek: Annotated[bool, typer.Option(help="Do not mark as read.")] = False,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    as_: AsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Read your mail, oldest first (marked read unless --peek)."""
    from agentpost.cli.render import emit_json, show_messages

    found = _run(
        as_,
        as_json,
        lambda o, c: o.mailbox.inbox(c, unread_only=not all_, limit=limit, peek=peek),
    )
    if as_json:
        emit_json({"messages": [m.to_dict() for m in found.messages], "unread": found.unread})
    else:
        show_messages(found.messages, "No new mail.")


@app.command()
def ack(
    ids: Annotated[list[str], typer.Argument(help="Message ids you handled.")],
    as_: AsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Acknowledge messages you handled."""
    from agentpost.cli.render import console, emit_json

    done = _run(as_, as_json, lambda o, c: o.mailbox.ack(c, ids))
    if as_json:
        emit_json(done.to_dict())
    else:
        console.print(f"acked {len(done.acked)}; not found: {', '.join(done.not_found) or '-'}")
    if done.not_found and not done.acked:
        raise typer.Exit(EXIT_CODES[ErrorCode.NOT_FOUND])


@app.command()
def thread(
    thread_id: Annotated[str, typer.Argument(help="The thread id.")],
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    as_: AsOption = None,
    as_json: JsonOption = False,
) -> None:
    """A thread's messages, oldest first."""
    from agentpost.cli.render import emit_json, show_messages

    found = _run(as_, as_json, lambda o, c: o.mailbox.thread(c, thread_id, limit))
    if as_json:
        emit_json({"thread_id": thread_id, "messages": [m.to_dict() for m in found]})
    else:
        show_messages(found)


@app.command()
def sent(
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    as_: AsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Your sent messages with each recipient's state."""
    from agentpost.cli.render import emit_json, show_sent

    found = _run(as_, as_json, lambda o, c: o.mailbox.sent(c, limit))
    if as_json:
        emit_json({"messages": [s.to_dict() for s in found]})
    else:
        show_sent(found)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to find.")],
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    as_: AsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Full-text search over the messages you may see."""
    from agentpost.cli.render import emit_json, show_messages

    found = _run(as_, as_json, lambda o, c: o.mailbox.search(c, query, limit))
    if as_json:
        emit_json({"messages": [m.to_dict() for m in found]})
    else:
        show_messages(found, "No match.")


@app.command()
def channels(as_: AsOption = None, as_json: JsonOption = False) -> None:
    """The channels and their member counts."""
    from agentpost.cli.render import console, emit_json

    found = _run(as_, as_json, lambda o, c: o.channels.overview(c))
    if as_json:
        emit_json({"channels": [c.to_dict() for c in found]})
    else:
        for c in found:
            console.print(f"#{c.name}  {c.members} members{'  (joined)' if c.joined else ''}")


@app.command()
def tail(
    backlog: Annotated[int, typer.Option(help="Show this many earlier messages first.")] = 10,
    as_json: JsonOption = False,
) -> None:
    """Follow every new message of the post office, live, until Ctrl-C."""
    from agentpost.cli.render import console, message_line
    from agentpost.services import PostOffice

    async def main() -> None:
        office = await PostOffice.open(Settings())
        try:
            async for message in office.mailbox.follow(backlog=backlog):
                if as_json:
                    print(json.dumps(message.to_dict(), ensure_ascii=False), flush=True)
                else:
                    console.print(message_line(message))
        finally:
            with anyio.CancelScope(shield=True):
                await office.aclose()

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@app.command()
def demo(
    pause: Annotated[float, typer.Option(help="Seconds between steps.")] = 0.6,
) -> None:
    """Watch two local agents exchange, read and acknowledge messages (on a scratch database)."""
    from agentpost.cli.demo import run_demo

    anyio.run(run_demo, pause)
