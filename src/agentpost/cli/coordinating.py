"""The coordination commands: `delegate`, `update-task`, `ask`, `check-request`, and the file
reservations: `reserve`, `release`, `reservations`.

What the MCP tools and REST let an agent do, for a person or a script at the command line,
locally (`--as`) or remotely (`--url/--key`), as every mailbox command (agentpost.cli.speaking).

`ask` asks first with no wait at all, so that it knows the request's id before it blocks: a
person who stops waiting (Ctrl-C), or whose `--timeout` runs out, is told the id to follow up
with. It then waits by asking again under the same idempotency key, which asks nothing twice
(services.requests) and, asked again after the service's own ceiling on one wait, lets the
command wait as long as `--timeout` says, up to a day: the key's lifetime, after which asking
again would ask a second question.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from agentpost.cli.entry import EXIT_CODES
from agentpost.cli.guard import acting_here
from agentpost.cli.speaking import (
    AsOption,
    JsonOption,
    KeyOption,
    Speaker,
    UrlOption,
    parse_data,
    run,
    seconds,
)
from agentpost.config import load_settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import IDEMPOTENCY_S
from agentpost.domain.requests import RequestAnswer

if TYPE_CHECKING:  # the services are imported when a command runs: --help is quick
    from agentpost.client import AsyncClient
    from agentpost.domain.models import Caller
    from agentpost.domain.reservations import Reservation, ReservationsChanged, ReserveResult
    from agentpost.services import PostOffice

TIMED_OUT = 124
"""`ask`'s exit status when no answer came in time, as timeout(1) exits."""
INTERRUPTED = 130
"""`ask`'s exit status when stopped with Ctrl-C, as a shell reports SIGINT."""

DataOption = Annotated[str | None, typer.Option("--data", help="Structured data as JSON.")]


def delegate(
    agent: Annotated[str, typer.Argument(help="The agent to hand the task to.")],
    title: Annotated[str, typer.Argument(help="The task in one line.")],
    detail: Annotated[str | None, typer.Option(help="What to do, in full.")] = None,
    data: DataOption = None,
    urgent: Annotated[bool, typer.Option(help="Mark urgent.")] = False,
    due_in: Annotated[
        float | None, typer.Option("--due-in", help="Due this many seconds from now.")
    ] = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Hand a task to an agent. Each change the assignee makes is told to you."""
    import time

    from agentpost.cli.render import console, emit_json

    def fields() -> dict[str, Any]:
        """Read inside `run`, so that a bad `--data` or `--due-in` is refused as any input."""
        due = None if due_in is None else time.time() + seconds(due_in, "--due-in")
        return {
            "detail": detail,
            "priority": "urgent" if urgent else "normal",
            "data": parse_data(data, "--data"),
            "due": due,
        }

    task = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.tasks.delegate(c, agent, title, **fields()),
        lambda client: client.delegate(agent, title, **fields()),
    )
    if as_json:
        emit_json(task.to_dict())
    else:
        console.print(f"delegated {task.id} to {task.assignee}", soft_wrap=True)


def update_task(
    task_id: Annotated[str, typer.Argument(help="The task's id.")],
    status: Annotated[
        str,
        typer.Argument(help="accepted, in_progress, done, failed; or cancelled (the creator)."),
    ],
    note: Annotated[str | None, typer.Option(help="A word on the change.")] = None,
    result: Annotated[
        str | None, typer.Option(help="The work's result as JSON (not on a cancel).")
    ] = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Move a task you were given (or cancel one you made); the other side is told."""
    from agentpost.cli.render import console, emit_json, task_line

    task = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.tasks.update_task(
            c, task_id, status, note=note, result=parse_data(result, "--result")
        ),
        lambda client: client.update_task(
            task_id,
            status,  # type: ignore[arg-type]  # the service names the statuses it knows
            note=note,
            result=parse_data(result, "--result"),
        ),
    )
    if as_json:
        emit_json(task.to_dict())
    else:
        console.print(task_line(task))


Ask = Callable[[float], Awaitable[RequestAnswer]]
"""The question asked (again) under one idempotency key, waiting at most this many seconds."""


def ask(
    agent: Annotated[str, typer.Argument(help="The agent to ask.")],
    question: Annotated[str, typer.Argument(help="The question.")],
    data: DataOption = None,
    timeout: Annotated[
        float, typer.Option(help="Wait at most this many seconds (0: do not wait).")
    ] = 60,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Ask an agent a question and wait for its answer (exit 124 when none came in time)."""
    from agentpost.cli.render import emit_json, errors, show_answer, styled

    asked: list[str] = []  # the request's id once it is known: what a Ctrl-C names
    once = f"cli-ask-{secrets.token_hex(16)}"

    async def asking(again: Ask) -> RequestAnswer:
        waiting = seconds(timeout, "--timeout")
        if waiting > IDEMPOTENCY_S:  # asked again after that, it would be a second question
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT,
                f"--timeout is at most {IDEMPOTENCY_S:g} s (a day); "
                "`agentpost check-request ID` follows a question for longer",
            )
        until = anyio.current_time() + waiting
        found = await again(0)
        asked.append(found.request_id)
        if not found.answered and waiting > 0:
            errors.print(
                styled(f"asked {agent}: {found.request_id}; waiting for the answer…"), style="dim"
            )
        while not found.answered and (left := until - anyio.current_time()) > 0:
            found = await again(left)
        return found

    async def local(office: PostOffice, caller: Caller) -> RequestAnswer:
        def again(wait_s: float) -> Awaitable[RequestAnswer]:
            return office.requests.request(
                caller, agent, question, parse_data(data, "--data"), wait_s, once
            )

        return await asking(again)

    async def remote(client: AsyncClient) -> RequestAnswer:
        def again(wait_s: float) -> Awaitable[RequestAnswer]:
            return client.request(
                agent,
                question,
                data=parse_data(data, "--data"),
                timeout_s=wait_s,
                idempotency_key=once,
            )

        return await asking(again)

    try:
        found = run(Speaker(as_, as_json, url, key), local, remote)
    except KeyboardInterrupt:
        if asked:
            stopped = RequestAnswer(asked[0], answered=False)
            _follow_up(stopped, f"stopped waiting for the answer to {asked[0]}", as_json)
        else:
            errors.print("stopped while asking: `agentpost sent` shows whether the question went")
        raise typer.Exit(INTERRUPTED) from None
    if not found.answered:
        _follow_up(found, f"no answer to {found.request_id} within {timeout:g} s", as_json)
        raise typer.Exit(TIMED_OUT)
    if as_json:
        emit_json(found.to_dict())
    else:
        show_answer(found)


def _follow_up(found: RequestAnswer, why: str, as_json: bool) -> None:
    """Tell how to fetch the answer later: an unanswered question stays open."""
    from agentpost.cli.render import emit_json, errors, styled

    if as_json:
        emit_json(found.to_dict())
    later = f"agentpost check-request {found.request_id}"
    errors.print(styled(f"{why}; `{later}` shows it once it comes"))


def check_request(
    request_id: Annotated[str, typer.Argument(help="The request's id (`ask` printed it).")],
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Whether a question you asked has been answered, and the answer."""
    from agentpost.cli.render import emit_json, show_answer

    found = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.requests.check_request(c, request_id),
        lambda client: client.check_request(request_id),
    )
    if as_json:
        emit_json(found.to_dict())
    else:
        show_answer(found)


def reservations(
    project: Annotated[
        str | None,
        typer.Option(
            help="This project (default: AGENTPOST_PROJECT, else that of the agentpost mcp the "
            "same client started, else the current directory's; with --url, your agent's, "
            "where reserve claims)."
        ),
    ] = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """The live file reservations of a project: who holds which paths, until when."""
    from agentpost.cli.render import emit_json, show_reservations

    @functools.cache
    def folder() -> str:
        """--project, else the project the current directory belongs to, as `agentpost mcp`
        names it (AGENTPOST_PROJECT first); asked inside `run`, so that a configuration mistake
        is refused as any."""
        from agentpost.services.local_identity import detect

        return project or detect(project_override=load_settings().project).project

    async def local(office: PostOffice, caller: Caller) -> tuple[str, list[Reservation]]:
        # Run by a Claude Code (or another client) whose `agentpost mcp` was given its project in
        # the client's settings alone, the project is that session's, as the commit guard's.
        here = folder()
        if project is None:
            _, here = await acting_here(office, load_settings(), here)
        return here, await office.reservations.reservations(caller, here)

    async def remote(client: AsyncClient) -> tuple[str | None, list[Reservation]]:
        # As the service's own tool: no project named is the key's session's, where `reserve
        # --url` claims; the folder here says nothing of the remote agent.
        found = await client.reservations(project=project)
        return found.project or project, found

    here, found = run(Speaker(as_, as_json, url, key), local, remote)
    if as_json:
        emit_json({"project": here, "reservations": [r.to_dict() for r in found]})
    else:
        show_reservations(found, here or "your agent's project")


PathsArgument = Annotated[
    list[str],
    typer.Argument(
        help="Paths or git-style globs relative to the project root (src/api/**, docs/*.md; "
        "a folder covers what is in it)."
    ),
]


def reserve(
    paths: PathsArgument,
    exclusive: Annotated[
        bool, typer.Option("--exclusive/--shared", help="Exclusive (default); shared coexist.")
    ] = True,
    ttl: Annotated[
        float,
        typer.Option(
            "--ttl",
            help="Lapse after this many seconds, or sooner: offline_after_s (45 s by default) "
            "after your agent's last session went offline. With --url, this command's own "
            "goes offline soon after it: unless another is online, it says when they lapse.",
        ),
    ] = 3600,
    reason: Annotated[str | None, typer.Option(help="Why, for the others to read.")] = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Claim files before you edit them; one another agent holds is refused, naming it (exit 5).

    A claim holds while your agent has a session online; with --url, this says which, or when."""
    from agentpost.cli.render import console, emit_json, errors, styled, when

    def local(office: PostOffice, caller: Caller) -> Awaitable[ReserveResult]:
        return office.reservations.reserve(
            caller, paths, exclusive=exclusive, ttl_s=ttl, reason=reason
        )

    remotely: list[bool] = []  # whether the claims rest on the key's session: see _held_while

    def remote(client: AsyncClient) -> Awaitable[ReserveResult]:
        remotely.append(True)
        return client.reserve(paths, exclusive=exclusive, ttl_s=ttl, reason=reason)

    done = run(Speaker(as_, as_json, url, key), local, remote)
    if as_json:
        emit_json(done.to_dict())
    else:
        for r in done.granted:
            kind = "exclusively" if r.exclusive else "shared"
            line = f"reserved {r.path} {kind} until {when(r.expires_at)} ({r.id})"
            console.print(styled(line), soft_wrap=True)
        if remotely and done.granted:
            console.print(styled(_held_while(done)), soft_wrap=True)
        for c in done.conflicts:
            held = "exclusively" if c.exclusive else "shared"
            holder = c.holder if c.trust.value == "verified" else f"{c.holder} ({c.trust.value})"
            errors.print(
                styled(
                    ("error:", "red"),
                    f" {ErrorCode.CONFLICT.value}: {c.path} is held by {holder} as {c.held!r} "
                    f"{held} until {when(c.expires_at)}",
                )
            )
    if done.conflicts:
        raise typer.Exit(EXIT_CODES[ErrorCode.CONFLICT])


def _held_while(done: ReserveResult) -> str:
    """How long claims made over HTTP really hold. A command speaks for its key's own session,
    which goes offline soon after the command ends, and with it the claims, unless another
    session of the agent is online: saying "until" their TTL alone would promise an hour that
    lasts a minute. Locally a command reserves in a session that goes on (its agentpost mcp),
    or, with none, is refused."""
    from agentpost.cli.render import when

    agent = done.granted[0].agent
    held = f"held while {agent} has a session online"
    if done.other_sessions:
        return f"{held}: {', '.join(done.other_sessions)} besides this command's"
    if done.lapses_with_caller() and done.lapse_unheard_at is not None:
        return (
            f"{held}, and none is but this command's: these lapse about "
            f"{when(done.lapse_unheard_at)}, not at their --ttl, unless {agent} is heard from "
            f"by then (a request with this key, or an agentpost mcp --url of {agent}'s running)"
        )
    return held


def release(
    paths: Annotated[
        list[str] | None, typer.Argument(help="Paths as you reserved them.", show_default=False)
    ] = None,
    ids: Annotated[
        list[str] | None, typer.Option("--id", help="A reservation's id (repeat for more).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="All of yours in your project.")] = False,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Give up your reservations by path (as reserved), --id or --all (exit 4: none was yours)."""
    from agentpost.cli.render import console, emit_json, errors, styled

    def chosen() -> tuple[list[str] | None, list[str] | None]:
        """(paths, ids), both None for --all; asked inside `run`, so a mistake is refused."""
        if every == bool(paths or ids):
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT,
                "name the paths or --id to release, or --all for every one of yours",
            )
        return (paths or None, ids or None) if not every else (None, None)

    def local(office: PostOffice, caller: Caller) -> Awaitable[ReservationsChanged]:
        named, numbered = chosen()
        return office.reservations.release_reservations(caller, paths=named, ids=numbered)

    def remote(client: AsyncClient) -> Awaitable[ReservationsChanged]:
        named, numbered = chosen()
        return client.release_reservations(paths=named, ids=numbered)

    done = run(Speaker(as_, as_json, url, key), local, remote)
    if as_json:
        emit_json(done.to_dict())
    else:
        for r in done.reservations:
            console.print(styled(f"released {r.path} ({r.id})"), soft_wrap=True)
        if done.not_found:
            errors.print(styled(f"not yours or not live: {', '.join(done.not_found)}"))
        elif not done.reservations:
            console.print(styled(("no live reservations of yours to release", "dim")))
    if done.not_found and not done.reservations:
        raise typer.Exit(EXIT_CODES[ErrorCode.NOT_FOUND])


COMMANDS = (delegate, update_task, ask, check_request, reserve, release, reservations)
"""This module's commands, in the order `agentpost --help` lists them."""
