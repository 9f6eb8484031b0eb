"""`agentpost`: the command line. Each command is one service call, shown as text or JSON.

The mailbox commands act on the local post office as `--as NAME` (default `AGENTPOST_AGENT`,
else the agent of the `agentpost mcp` session the command runs under, else `owner`), or given
`--url` (or `AGENTPOST_URL`) as the agent of `--key` (or `AGENTPOST_KEY`) on that remote service
(agentpost.cli.speaking; `whoami` says which). Exit status 0 on success; a refusal prints
`error: <code>: <message>` and exits with the code's status (see EXIT_CODES).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from agentpost.cli.admin import admin_app
from agentpost.cli.answering import respond
from agentpost.cli.coordinating import COMMANDS as COORDINATING
from agentpost.cli.entry import EXIT_CODES, key_for, serve_mcp
from agentpost.cli.guard import guard_app
from agentpost.cli.install import install_app, uninstall_app
from agentpost.cli.speaking import (
    AsOption,
    BeforeOption,
    JsonOption,
    KeyOption,
    Speaker,
    UrlOption,
    parse_data,
    run,
    seconds,
    whole_inbox_cursor,
)
from agentpost.cli.whoami import whoami
from agentpost.config import load_settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller, Inbox, Message

if TYPE_CHECKING:  # the services are imported when a command runs: --help is quick
    from agentpost.services import PostOffice

app = typer.Typer(
    name="agentpost",
    help="A post office for AI agents: identities, inboxes, channels and threads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(shown: bool) -> None:
    if shown:
        from agentpost import __version__

        print(f"agentpost {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_show_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


@app.command()
def mcp(
    url: Annotated[
        str | None,
        typer.Option(help="Serve the tools of this remote post office (default AGENTPOST_URL)."),
    ] = None,
    key: KeyOption = None,
) -> None:
    """Serve this agent session's mailbox over MCP on stdio (started by the MCP client)."""
    raise typer.Exit(serve_mcp(url=url, key=key))


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free one).")
    ] = 8470,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow listening beyond loopback.")
    ] = False,
) -> None:
    """Serve the post office: REST under /v1, MCP at /mcp, /health; keys required."""
    from agentpost.cli.install import executable
    from agentpost.cli.render import refusal
    from agentpost.service import serve as run_service

    try:
        settings = load_settings()
        run_service(settings, host=host, port=port, allow_remote=allow_remote, cli=executable())
    except AgentpostError as err:
        raise refusal(err) from None


@app.command()
def who(
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include offline agents.")] = False,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Who is at work: agents, projects, branches, objectives, presence."""
    from agentpost.cli.render import emit_json, show_presence

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.presence.who(project, all_),
        lambda client: client.who(project, include_offline=all_),
    )
    if as_json:
        emit_json({"agents": [p.to_dict() for p in found]})
    else:
        show_presence(found, include_offline=all_)


app.command()(whoami)


@app.command()
def leader(
    project: Annotated[
        str | None, typer.Argument(help="This project only (default: every project).")
    ] = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Who leads each project, under which term (agents claim the seat themselves)."""
    from agentpost.cli.render import emit_json, show_leaders

    if project is None:
        seats = run(
            Speaker(as_, as_json, url, key),
            lambda o, c: o.leadership.leaders(),
            lambda client: client.leaders(),
        )
    else:
        seats = [
            run(
                Speaker(as_, as_json, url, key),
                lambda o, c: o.leadership.leader(c, project),
                lambda client: client.leader(project),
            )
        ]
    if as_json:
        emit_json({"leaders": [s.to_dict() for s in seats]})
    else:
        show_leaders(seats)


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
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Send a message to agents or a #channel."""
    from agentpost.cli.render import console, emit_json, sent_line

    targets: str | list[str] = to
    if not to.startswith("#") and "," in to:  # "bob, carol" as a person writes a list
        targets = [name.strip() for name in to.split(",")]

    def fields() -> dict[str, Any]:
        """Read inside `_run`, so that `--data` that is not JSON is refused like any input."""
        return {
            "subject": subject,
            "data": parse_data(data, "--data"),
            "thread_id": thread,
            "reply_to": reply_to,
            "priority": "urgent" if urgent else "normal",
            "ttl_s": ttl,
            "must_read": must_read,
        }

    result = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.mailbox.send(c, targets, body, create_sender=True, **fields()),
        lambda client: client.send(targets, body, **fields()),
        creates_sender=True,
    )
    if as_json:
        emit_json(result.to_dict())
    else:
        console.print(sent_line(result))


@app.command()
def inbox(
    all_: Annotated[bool, typer.Option("--all", help="Read and acked mail too.")] = False,
    peek: Annotated[bool, typer.Option(help="Do not mark as read.")] = False,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    thread: Annotated[
        str | None, typer.Option(help="Only this thread: its id, or any of its messages'.")
    ] = None,
    before: BeforeOption = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Read your mail, oldest first (marked read unless --peek); --all --before pages back."""
    from agentpost.cli.render import emit_json, show_messages

    def fields() -> dict[str, Any]:
        """Read inside `run`, so that `--before` without `--all` is refused as any input."""
        cursor = whole_inbox_cursor(before, all_)
        return {"unread_only": not all_, "limit": limit, "thread_id": thread, "peek": peek} | cursor

    found: Inbox = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.mailbox.inbox(c, **fields()),
        lambda client: client.inbox(**fields()),
    )
    if as_json:
        emit_json({"messages": [m.to_dict() for m in found.messages], "unread": found.unread})
    else:
        empty = "No older mail." if before else "No mail." if all_ else "No new mail."
        show_messages(found.messages, empty)  # the whole inbox holds read mail too


@app.command()
def ack(
    ids: Annotated[list[str], typer.Argument(help="Message ids you handled.")],
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Acknowledge messages you handled."""
    from agentpost.cli.render import console, emit_json

    done = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.mailbox.ack(c, ids),
        lambda client: client.ack(ids),
    )
    if as_json:
        emit_json(done.to_dict())
    else:
        console.print(f"acked {len(done.acked)}; not found: {', '.join(done.not_found) or '-'}")
    if done.not_found and not done.acked:
        raise typer.Exit(EXIT_CODES[ErrorCode.NOT_FOUND])


app.command()(respond)


@app.command()
def thread(
    thread_id: Annotated[str, typer.Argument(help="The thread's id, or any of its messages'.")],
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    before: BeforeOption = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """A thread's messages, oldest first (its newest LIMIT)."""
    from agentpost.cli.render import emit_json, show_messages

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.history.thread(c, thread_id, limit, before),
        lambda client: client.thread(thread_id, limit=limit, before=before),
    )
    if as_json:
        named = found[0].thread_id if found else thread_id  # a message's id names its thread
        emit_json({"thread_id": named, "messages": [m.to_dict() for m in found]})
    else:
        show_messages(found)


@app.command()
def sent(
    limit: Annotated[int, typer.Option(help="At most this many, the newest.")] = 20,
    before: BeforeOption = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Your sent messages with each recipient's state."""
    from agentpost.cli.render import emit_json, show_sent

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.history.sent(c, limit, before),
        lambda client: client.sent(limit=limit, before=before),
    )
    if as_json:
        emit_json({"messages": [s.to_dict() for s in found]})
    else:
        show_sent(found)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to find.")],
    limit: Annotated[int, typer.Option(help="At most this many, the newest.")] = 20,
    before: BeforeOption = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Full-text search over the messages you may see, newest first."""
    from agentpost.cli.render import emit_json, show_messages

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.history.search(c, query, limit, before),
        lambda client: client.search(query, limit=limit, before=before),
    )
    if as_json:
        emit_json({"messages": [m.to_dict() for m in found]})
    else:
        show_messages(found, "No match.")


@app.command()
def channels(
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """The channels and their member counts."""
    from agentpost.cli.render import console, emit_json

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.channels.overview(c),
        lambda client: client.channels(),
    )
    if as_json:
        emit_json({"channels": [c.to_dict() for c in found]})
    else:
        for c in found:
            console.print(f"#{c.name}  {_members(c.members)}{'  (joined)' if c.joined else ''}")


ChannelArgument = Annotated[str, typer.Argument(help="The channel, as #name (or name).")]


@app.command()
def join(
    channel: ChannelArgument,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Join a channel (made if new): its broadcasts reach you, and you may post to it."""
    from agentpost.cli.render import console, emit_json

    joined = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.channels.join(c, channel),
        lambda client: client.join_channel(channel),
    )
    if as_json:
        emit_json(joined.to_dict())
    else:
        console.print(f"joined #{joined.name} ({_members(joined.members)})")


@app.command()
def leave(
    channel: ChannelArgument,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Leave a channel you joined."""
    from agentpost.cli.render import console, emit_json

    async def local(office: PostOffice, caller: Caller) -> str:
        return str((await office.channels.leave(caller, channel))["left"])

    left = run(Speaker(as_, as_json, url, key), local, lambda c: c.leave_channel(channel))
    if as_json:
        emit_json({"left": left})
    else:
        console.print(f"left {left}")


@app.command()
def history(
    channel: ChannelArgument,
    limit: Annotated[int, typer.Option(help="At most this many, the newest.")] = 20,
    before: BeforeOption = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """A channel's newest messages, oldest first (you must be a member); marks nothing read."""
    from agentpost.cli.render import emit_json, show_messages

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.channels.history(c, channel, limit, before),
        lambda client: client.channel_history(channel, limit=limit, before=before),
    )
    if as_json:
        emit_json({"messages": [m.to_dict() for m in found]})
    else:
        show_messages(found, "No messages.")


@app.command()
def tasks(
    role: Annotated[str, typer.Option(help="assigned (to you), created (by you) or all.")] = "all",
    status: Annotated[str | None, typer.Option(help="Only tasks with this status.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, the newest.")] = 50,
    before: Annotated[
        str | None, typer.Option(help="Only tasks older than this task id (a page's last).")
    ] = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Your delegated tasks, newest first: given to you, made by you, or both."""
    from agentpost.cli.render import emit_json, show_tasks

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.tasks.tasks(c, role, status, limit, before),
        lambda client: client.tasks(role, status=status, limit=limit, before=before),  # type: ignore[arg-type]
    )
    if as_json:
        emit_json({"tasks": [t.to_dict() for t in found]})
    else:
        show_tasks(found)


@app.command()
def task(
    task_id: Annotated[str, typer.Argument(help="The task's id.")],
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """One task you made or were given: detail, result, and every change with its note."""
    from agentpost.cli.render import emit_json, show_task

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.tasks.task(c, task_id),
        lambda client: client.task(task_id),
    )
    if as_json:
        emit_json(found.to_dict())
    else:
        show_task(found)


for coordinating in COORDINATING:
    app.command()(coordinating)


def _members(count: int) -> str:
    return f"{count} member{'' if count == 1 else 's'}"


@app.command()
def tail(
    backlog: Annotated[
        int, typer.Option(min=0, help="Show this many earlier messages first.")
    ] = 10,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Follow new messages live until Ctrl-C: all of the post office's (--url: your mail there)."""
    from agentpost.cli.literal import json_text
    from agentpost.cli.render import console, message_line, refusal

    def show(message: Message) -> None:
        if as_json:
            print(json_text(message.to_dict()), flush=True)
        else:
            console.print(message_line(message))

    async def main() -> None:
        settings = load_settings()
        if service := url or settings.url:  # as every mailbox command: the remote service
            from agentpost.cli.follow import follow_remote
            from agentpost.client import AsyncClient

            async with AsyncClient(service, key_for(service, key, settings)) as client:
                await follow_remote(client, backlog, show)
            return
        if key:
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT, "--key is for a remote post office: add --url"
            )
        from agentpost.services import PostOffice

        office = await PostOffice.open(settings)
        try:
            async for message in office.mailbox.follow(backlog=backlog):
                show(message)
        finally:
            with anyio.CancelScope(shield=True):
                await office.aclose()

    try:
        anyio.run(main)
    except AgentpostError as err:
        raise refusal(err, as_json=as_json) from None
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@app.command()
def demo(
    pause: Annotated[float, typer.Option(help="Seconds between steps.")] = 0.6,
) -> None:
    """Watch two local agents exchange, read and acknowledge messages (on a scratch database)."""
    from agentpost.cli.demo import run_demo
    from agentpost.cli.render import refusal

    try:
        anyio.run(run_demo, seconds(pause, "--pause"))
    except AgentpostError as err:
        raise refusal(err) from None


@app.command()
def hook(
    client: Annotated[str, typer.Argument(help="The agent client calling: claude.")],
) -> None:
    """Note new mail for a Claude Code hook (SessionStart, UserPromptSubmit, PostToolUse)."""
    from agentpost.cli.hook import main as run_hook  # `agentpost hook` skips Typer: cli/entry.py

    raise typer.Exit(run_hook([client]))


app.add_typer(install_app, name="install")
app.add_typer(uninstall_app, name="uninstall")
app.add_typer(guard_app, name="guard")
app.add_typer(admin_app, name="admin")


def command_line(args: list[str]) -> int:
    """Run the command line on `args`; returns the exit status.

    A usage mistake (a missing argument, an unknown option or command, a value of the wrong
    type) is a refusal as any other: `error: invalid_argument: …` in one line (JSON with
    `--json`) and status 2, where Typer would draw a boxed panel a script cannot read.
    """
    from typer._click.exceptions import NoArgsIsHelpError, UsageError  # Typer's own Click

    from agentpost.cli.render import refusal

    try:
        status = app(args, prog_name="agentpost", standalone_mode=False)
    except NoArgsIsHelpError:  # the help is shown already
        return EXIT_CODES[ErrorCode.INVALID_ARGUMENT]
    except UsageError as exc:
        see = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        mistake = AgentpostError(ErrorCode.INVALID_ARGUMENT, exc.format_message() + see)
        options = args[: args.index("--")] if "--" in args else args
        return refusal(mistake, as_json="--json" in options).exit_code
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        return 1
    return status if isinstance(status, int) else 0
