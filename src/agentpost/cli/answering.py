"""`agentpost respond`: the person at the command line answers a request sent to them.

An agent that asks the owner (`request`) waits, blocked, for the answer; a reply sent with
`send --reply-to` is a message, not that answer, so it would wait until it timed out.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agentpost.cli.speaking import (
    AsOption,
    JsonOption,
    KeyOption,
    Speaker,
    UrlOption,
    parse_data,
    run,
)


def respond(
    request_id: Annotated[str, typer.Argument(help="The request's id (its message's).")],
    answer: Annotated[str, typer.Argument(help="The answer's text.")],
    data: Annotated[str | None, typer.Option(help="Structured data as JSON.")] = None,
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Answer a request sent to you, once: its asker, waiting, gets the answer at once."""
    from agentpost.cli.render import console, emit_json

    answered = run(
        Speaker(as_, as_json, url, key),
        lambda o, c: o.requests.respond(c, request_id, answer, parse_data(data, "--data")),
        lambda client: client.respond(request_id, answer, data=parse_data(data, "--data")),
    )
    if as_json:
        emit_json(answered.to_dict())
    else:
        console.print(f"answered {request_id} for {', '.join(answered.to)}: {answered.id}")
