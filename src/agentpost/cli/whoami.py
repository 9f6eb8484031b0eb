"""`agentpost whoami`: who the mailbox commands run here act as, before one of them speaks.

Locally that is `--as`, else AGENTPOST_AGENT, else the agent whose `agentpost mcp` session the
command runs under (a command an agent's Claude Code runs), else the owner; remotely, the key's
agent (agentpost.cli.speaking). The answer is the agent's own record (`GET /v1/me`): its name,
its trust, and the session it speaks in, if any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentpost.cli.speaking import AsOption, JsonOption, KeyOption, Speaker, UrlOption, run
from agentpost.domain.names import OWNER

if TYPE_CHECKING:  # the services are imported when a command runs: --help is quick
    from agentpost.domain.accounts import Myself
    from agentpost.domain.models import Caller
    from agentpost.services import PostOffice


async def _myself(office: PostOffice, caller: Caller) -> Myself:
    from agentpost.domain.accounts import Myself

    return Myself.of(await office.directory.me(caller), caller.session_id)


def whoami(
    as_: AsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Who your commands act as here: the agent, its trust, and the session it speaks in."""
    from agentpost.cli.render import console, emit_json

    me = run(Speaker(as_, as_json, url, key), _myself, lambda client: client.me())
    if as_json:
        emit_json(me.to_dict())
        return
    where = f"in session {me.session_id}" if me.session_id else "in no session"
    person = " (the person at the command line)" if me.name == OWNER else ""
    console.print(f"{me.name}{person}, trust {me.trust.value}, {where}", soft_wrap=True)
