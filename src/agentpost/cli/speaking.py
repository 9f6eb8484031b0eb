"""Who a mailbox command speaks as, and where: on the local post office `--as` (else
AGENTPOST_AGENT, else the agent whose `agentpost mcp` session the command runs under, else the
owner), or the key's agent on a remote service through the Python client; the options every
such command takes."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import typer

from agentpost.cli.entry import key_for
from agentpost.config import Settings, load_settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import MAX_DATA_DEPTH
from agentpost.domain.models import Caller
from agentpost.domain.names import OWNER

T = TypeVar("T")

AsOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Act as this agent (default AGENTPOST_AGENT, else the agent whose session runs "
        "this command, else owner).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
BeforeOption = Annotated[
    str | None, typer.Option(help="Only messages older than this id (a page's oldest).")
]
UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="Act on this remote post office (default AGENTPOST_URL)."),
]
KeyOption = Annotated[
    str | None,
    typer.Option("--key", help="Your agent key for --url (default AGENTPOST_KEY)."),
]

if TYPE_CHECKING:  # the services and the client are imported when a command runs: --help is quick
    from agentpost.client import AsyncClient
    from agentpost.services import PostOffice

Local = Callable[["PostOffice", Caller], Awaitable[T]]
Remote = Callable[["AsyncClient"], Awaitable[T]]


@dataclass(frozen=True)
class Speaker:
    """Who a mailbox command speaks as, and where: the options every mailbox command takes."""

    as_: str | None
    as_json: bool
    url: str | None
    key: str | None


def parse_data(value: str | None, option: str) -> Any:
    """An option's JSON (`--data`, `--result`); called inside `run`, so that JSON it is not is
    refused as any input, naming the option typed."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{option} is not JSON: {exc}") from None
    except RecursionError:  # far past the limit the service would hold it to
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT, f"{option} nests deeper than {MAX_DATA_DEPTH} levels"
        ) from None


def seconds(value: float, option: str) -> float:
    """A length of time an option gives: finite, 0 or more."""
    if not (math.isfinite(value) and value >= 0):
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{option} must be seconds, 0 or more")
    return value


def whole_inbox_cursor(before: str | None, whole: bool) -> dict[str, str]:
    """`inbox`'s `--before` as the services take it, refused without `--all`, naming the options
    typed: it pages back through the whole inbox alone (unread mail is read from the oldest on),
    and the services' own refusal names `unread_only`, which appears nowhere on the command
    line."""
    if before is None:
        return {}
    if not whole:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            "--before pages back through the whole inbox: add --all (unread mail is read from "
            "the oldest on, each page moving on to the next)",
        )
    return {"before": before}


OPTIONS = {"ttl_s": "--ttl", "thread_id": "--thread", "reply_to": "--reply-to"}
"""The services' names of arguments the command line spells otherwise."""


def as_spelled(err: AgentpostError) -> AgentpostError:
    """`err` naming the option the person typed (`--ttl must be…`), not the argument the
    services know it by (`ttl_s must be…`), which appears nowhere on the command line."""
    field, _, rest = err.message.partition(" ")
    if err.code is not ErrorCode.INVALID_ARGUMENT or field not in OPTIONS:
        return err
    return AgentpostError(
        err.code,
        f"{OPTIONS[field]} {rest}",
        details=err.details,
        retry_after_s=err.retry_after_s,
    )


def run(
    speaker: Speaker,
    local: Local[T],
    remote: Remote[T],
    *,
    creates_sender: bool = False,
    as_admin: bool = False,
) -> T:
    """Act as the speaker, on the local post office or a remote one; refusals (a configuration
    mistake among them) become an exit status.

    Locally, only a send brings a new identity into being, and it does so itself, in the
    transaction that stores the message (`creates_sender`: the caller is passed on unchecked):
    a refused send, like a read as a name nobody has used (`not_found`), leaves no agent
    behind. Run under an agent's session with no name given, it speaks as that agent in that
    session (`local_caller`). Remotely the key says who speaks, so `--as` is refused there
    rather than ignored.

    `as_admin` (the `admin` commands) speaks locally as the owner holding admin rights: whoever
    opens the post office's own files holds its admin key too (`admin.key` lives beside the
    database), so the services' admin gate lets the act through as it would that key. Remotely
    the key decides, and the service refuses a key that is not an admin's.
    """
    from agentpost.cli.render import refusal

    async def main() -> T:
        if speaker.as_ is not None and not speaker.as_.strip():
            raise AgentpostError(ErrorCode.INVALID_ARGUMENT, "--as must name an agent")
        settings = load_settings()
        url = speaker.url or settings.url
        if url:
            return await remote_run(url, speaker, settings, remote)
        if speaker.key:
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT, "--key is for a remote post office: add --url"
            )
        from agentpost.services import PostOffice

        office = await PostOffice.open(settings)
        try:
            if as_admin:
                owner = await office.presence.ensure_agent(OWNER)
                caller = replace(owner, admin=True)
            else:
                caller = await local_caller(office, speaker.as_ or settings.agent, creates_sender)
            return await local(office, caller)
        finally:
            await office.aclose()

    try:
        return anyio.run(main)
    except AgentpostError as err:
        raise refusal(as_spelled(err), as_json=speaker.as_json) from None


async def local_caller(office: PostOffice, named: str | None, creates_sender: bool) -> Caller:
    """Who a local command speaks as: the agent `--as` (or AGENTPOST_AGENT) names; else, run
    under an agent's session (a command its Claude Code runs), that session's agent, in that
    session: an agent's words never reach a colleague as the owner's. A session the owner ended
    by disabling its agent, its `agentpost mcp` running on, refuses the command as it refuses
    that process's calls: `gone` while the agent is disabled, `not_found` once it is enabled
    again, until the process starts anew. Else the owner."""
    session = None
    if named is None:
        session = await office.presence.session_of_process(os.getpid(), owner_ended_too=True)
        if session is not None:
            await office.admission.admit(Caller(session.agent, session.id))
    name = named or (session.agent if session is not None else OWNER)
    if creates_sender:
        caller = Caller(agent=name)  # the send admits its sender itself: see `run`
    elif name == OWNER:
        caller = await office.presence.ensure_agent(name)
    else:
        caller = await office.presence.existing_agent(name)
    return caller if session is None else replace(caller, session_id=session.id)


async def remote_run(url: str, speaker: Speaker, settings: Settings, action: Remote[T]) -> T:
    from agentpost.client import AsyncClient

    if speaker.as_ is not None:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            "--as names an agent of the local post office; with --url your key says who you are",
        )
    async with AsyncClient(url, key_for(url, speaker.key, settings)) as client:
        return await action(client)
