"""Channels: `#general` (everyone), `#<project>` (its agents, plus joiners), and joined ones."""

from __future__ import annotations

from agentpost.config import Settings
from agentpost.domain.errors import forbidden, not_found
from agentpost.domain.limits import check_cap, check_id, check_limit
from agentpost.domain.models import Caller, ChannelInfo, Message
from agentpost.domain.names import GENERAL, check_channel
from agentpost.services.accounts import limits_in_effect
from agentpost.store import agents as agent_rows
from agentpost.store import channels as channel_rows
from agentpost.store import mail, reading
from agentpost.store.database import Connection, Store


def member_channels(conn: Connection, agent: str) -> list[str]:
    """Every channel whose history `agent` may read."""
    row = agent_rows.get_agent(conn, agent)
    names = [GENERAL]
    if row is not None and row.project:
        names.append(row.project)
    names.extend(channel_rows.joined_channels(conn, agent))
    return list(dict.fromkeys(names))


def members(conn: Connection, channel: str) -> list[str]:
    """Who a broadcast to `channel` reaches right now (the sender is removed by the caller)."""
    if channel == GENERAL:
        return agent_rows.enabled_agent_names(conn)
    names = agent_rows.project_agent_names(conn, channel)
    names.extend(channel_rows.explicit_members(conn, channel))
    return sorted(set(names))


def is_member(conn: Connection, channel: str, agent: str) -> bool:
    return channel in member_channels(conn, agent)


def require_member(conn: Connection, channel: str, agent: str, to_do: str) -> None:
    """Only a member reads or posts: a channel nobody is in is not there (`not_found`), one
    the agent is not in is `forbidden` (`to_do`: what it must join to do)."""
    if is_member(conn, channel, agent):
        return
    if not members(conn, channel):
        raise not_found(f"no channel #{channel}", channel=f"#{channel}")
    raise forbidden(f"join #{channel} {to_do}", channel=f"#{channel}")


def check_room(conn: Connection, agent: str, project: str | None, cap: int) -> None:
    """Refuse a join that would take `agent` past `cap` channels joined: each join of a new
    name makes a channel, so joins alone must not be able to fill the store."""
    count = channel_rows.joined_count(conn, agent, project)
    check_cap(
        count,
        cap,
        f"{agent} may have joined at most {cap} channels and has joined {count}; leave one first",
    )


class Channels:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    async def overview(self, caller: Caller) -> list[ChannelInfo]:
        def tx(conn: Connection) -> list[ChannelInfo]:
            mine = set(member_channels(conn, caller.agent))
            out = [ChannelInfo(GENERAL, len(agent_rows.enabled_agent_names(conn)), True, True)]
            explicit = channel_rows.explicit_channels(conn)
            for project in agent_rows.projects(conn):
                if project != GENERAL:
                    out.append(
                        ChannelInfo(project, len(members(conn, project)), project in mine, True)
                    )
            implicit = {info.name for info in out}
            for name in sorted(explicit):
                if name not in implicit:
                    out.append(ChannelInfo(name, explicit[name], name in mine, False))
            return out

        return await self.store.read(tx)

    async def join(self, caller: Caller, channel: str) -> ChannelInfo:
        """Join a channel. `#general` and its own project's channel an agent belongs to
        already: joining them records nothing, so it leaves its project's channel with the
        project."""
        name = check_channel(channel)

        def tx(conn: Connection) -> ChannelInfo:
            row = agent_rows.get_agent(conn, caller.agent)
            own_project = row is not None and row.project == name
            if (
                name != GENERAL
                and not own_project
                and not channel_rows.has_joined(conn, name, caller.agent)
            ):
                project = None if row is None else row.project
                limits = limits_in_effect(conn, self.settings, [caller.agent])[caller.agent]
                cap = limits.max_channels_per_agent or self.settings.max_channels_per_agent
                check_room(conn, caller.agent, project, cap)
                channel_rows.join(conn, self.store.dialect, name, caller.agent, self.store.clock())
            implicit = name == GENERAL or name in agent_rows.projects(conn)
            return ChannelInfo(name, len(members(conn, name)), True, implicit)

        return await self.store.write(tx)

    async def leave(self, caller: Caller, channel: str) -> dict[str, object]:
        name = check_channel(channel)

        def tx(conn: Connection) -> dict[str, object]:
            if name == GENERAL:
                raise forbidden("every agent belongs to #general")
            row = agent_rows.get_agent(conn, caller.agent)
            if row is not None and row.project == name:
                raise forbidden(f"#{name} is your project's channel; you belong to it")
            if not channel_rows.leave(conn, name, caller.agent):
                raise not_found(f"you are not a member of #{name}", channel=f"#{name}")
            return {"left": f"#{name}"}

        return await self.store.write(tx)

    async def history(
        self, caller: Caller, channel: str, limit: int = 20, before: str | None = None
    ) -> list[Message]:
        name = check_channel(channel)
        check_limit(limit)
        if before is not None:
            check_id(before, "before")

        def tx(conn: Connection) -> list[Message]:
            require_member(conn, name, caller.agent, "to read its history")
            before_seq = None
            if before is not None:
                anchor = mail.message_row(conn, before)
                if anchor is None or anchor.channel != name:
                    raise not_found(f"no message {before!r} in #{name}")
                before_seq = anchor.seq
            now = self.store.clock()
            rows = reading.channel_rows(conn, caller.agent, name, limit, before_seq, now)
            return [mail.message_from_row(r, r.delivery_state) for r in rows]

        return await self.store.read(tx)
