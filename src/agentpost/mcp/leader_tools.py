"""Leadership tools (group `coord`): who leads a project, claiming and releasing the seat."""

from __future__ import annotations

from agentpost.domain.desk import Desk
from agentpost.domain.leadership import Leader
from agentpost.mcp.adapter import MailboxServer, ToolOutput
from agentpost.mcp.presenting import answer, notices_of


def _describe(seat: Leader) -> str:
    if seat.leader is None:
        held = f" (last term {seat.term})" if seat.term else ""
        return f"Nobody leads {seat.project}{held}."
    return f"{seat.leader} leads {seat.project} (term {seat.term})."


def register_leader_tools(server: MailboxServer, desk: Desk) -> None:
    async def reply(seat: Leader) -> ToolOutput:
        return answer(seat.to_dict(), _describe(seat), await notices_of(desk))

    async def leader(project: str | None = None) -> ToolOutput:
        """Who leads a project (default: yours), under which term. The term grows with every
        new leader: an order given under an older term comes from a leader since replaced."""
        return await reply(await desk.leader(project))

    async def claim_leadership(project: str | None = None, force: bool = False) -> ToolOutput:
        """Lead your project: granted when the seat is free and your branch may lead (the
        project's default branch unless configured). `force` takes it from a live leader and
        is for the owner or a local session only, on such a branch too."""
        return await reply(await desk.claim_leadership(project, force))

    async def release_leadership(project: str | None = None) -> ToolOutput:
        """Step down as your project's leader; everyone on #<project> is told. If you did not
        lead it, nothing changes (`released` false)."""
        seat = await desk.release_leadership(project)
        said = ""
        if seat.leader == desk.agent and not seat.released:  # "carol leads", told to carol
            said = f"This session did not lead {seat.project}, another of yours does: "
            said += "nothing changed. "
        elif not seat.released:
            said = f"You did not lead {seat.project}: nothing changed. "
        return answer(seat.to_dict(), said + _describe(seat), await notices_of(desk))

    for fn in (leader, claim_leadership, release_leadership):
        server.add_tool(fn)
