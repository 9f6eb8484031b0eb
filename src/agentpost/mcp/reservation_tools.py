"""File reservations (group `coord`): reserve, renew, release and list advisory claims on paths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentpost.domain.desk import Desk
from agentpost.domain.reservations import Reservation, ReservationsChanged
from agentpost.mcp.adapter import MailboxServer, ToolOutput
from agentpost.mcp.presenting import answer, by, moment, notices_of, quoted, token


def until(expires_at: float) -> str:
    return "until " + moment(expires_at)


def _line(r: Reservation) -> str:
    kind = "exclusive" if r.exclusive else "shared"
    why = f" — {quoted(r.reason)}" if r.reason else ""
    return f"- {token(r.path)} [{kind}] {by(r.agent, r.trust)} {until(r.expires_at)} ({r.id}){why}"


def _listing(title: str, found: Sequence[Reservation]) -> str:
    return "\n".join([title, *(_line(r) for r in found)])


def _listed(paths: list[str] | str | None) -> list[str] | None:
    return [paths] if isinstance(paths, str) else paths


def register_reservation_tools(server: MailboxServer, desk: Desk) -> None:
    async def reply(structured: dict[str, Any], summary: str) -> ToolOutput:
        return answer(structured, summary, await notices_of(desk))

    def changed(verb: str, done: ReservationsChanged) -> str:
        text = _listing(f"{verb} {len(done.reservations)}.", done.reservations)
        if done.not_found:
            text += f"\nNot yours or not live: {', '.join(done.not_found)}"
        return text

    async def reserve(
        paths: list[str] | str,
        exclusive: bool = True,
        ttl_s: float = 3600,
        reason: str | None = None,
    ) -> ToolOutput:
        """Claim files before you edit them, so other agents in your project stay clear.

        `paths`: paths or git-style globs relative to the project root (`src/api/**`,
        `docs/*.md`; a folder covers what is in it). Exclusive by default; shared claims
        coexist. Each path is granted, or listed in `conflicts` with the agent holding an
        overlapping claim and until when. Advisory: release them when done; they also lapse at
        `ttl_s`, or `offline_after_s` (45 s unless configured) after your last session went
        offline.
        """
        result = await desk.reserve(
            _listed(paths) or [], exclusive=exclusive, ttl_s=ttl_s, reason=reason
        )
        lines = [_listing(f"Granted {len(result.granted)}.", result.granted)]
        if result.conflicts:
            lines.append(f"Conflicts {len(result.conflicts)}:")
            lines.extend(
                f"- {token(c.path)}: {by(c.holder, c.trust)} holds {token(c.held)} "
                f"{'exclusively' if c.exclusive else 'shared'} {until(c.expires_at)}"
                for c in result.conflicts
            )
        return await reply(result.to_dict(), "\n".join(lines))

    async def renew_reservations(
        ids: list[str] | None = None, ttl_s: float | None = None
    ) -> ToolOutput:
        """Extend your reservations to `ttl_s` from now (omitted: each one's own ttl, the last
        it was given): those of `ids`, else all of yours in your project. An expired one cannot
        be renewed: reserve it again."""
        done = await desk.renew_reservations(ids, ttl_s=ttl_s)
        return await reply(done.to_dict(), changed("Renewed", done))

    async def release_reservations(
        paths: list[str] | str | None = None, ids: list[str] | None = None
    ) -> ToolOutput:
        """Give up your reservations when you are done: by path (as reserved) or id; with
        neither, all of yours in your project."""
        done = await desk.release_reservations(paths=_listed(paths), ids=ids)
        return await reply(done.to_dict(), changed("Released", done))

    async def reservations(project: str | None = None, path: str | None = None) -> ToolOutput:
        """Who holds which files: the live reservations of your project (or `project`); with
        `path`, only those that overlap it."""
        found = await desk.reservations(project, path)
        return await reply(
            {"reservations": [r.to_dict() for r in found]},
            _listing(f"{len(found)} reservation{'' if len(found) == 1 else 's'}.", found),
        )

    for fn in (reserve, renew_reservations, release_reservations, reservations):
        server.add_tool(fn)
