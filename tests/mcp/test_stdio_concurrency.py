"""Eight `agentpost mcp` processes writing to one database file at once, in both revisions:
nothing lost, nothing doubled, no error (the send rate is raised by configuration for this)."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from stdio_agents import Agent, Agents, ids

PROCESSES = 8
PER_PROCESS = 50
IN_FLIGHT = 10
"""Calls each client keeps open at once, so each server also commits concurrent sends."""


@pytest.mark.anyio
async def test_eight_processes_sending_at_once_store_every_message_exactly_once(
    agents: Agents,
) -> None:
    names = [f"agent-{n}" for n in range(PROCESSES)]
    crowd = await agents.start_many(*names, env={"AGENTPOST_SEND_RATE_PER_MINUTE": "1000"})
    # Each sends to the next one round the ring, so every process is writer and recipient.
    recipient = {agent.name: names[(n + 1) % PROCESSES] for n, agent in enumerate(crowd)}
    sent: dict[str, list[str]] = {name: [] for name in names}

    async def send_all(agent: Agent) -> None:
        limiter = anyio.Semaphore(IN_FLIGHT)

        async def one(n: int) -> None:
            async with limiter:
                answer = await agent.call(
                    "send", to=recipient[agent.name], body=f"{agent.name} #{n}", data={"n": n}
                )
            sent[agent.name].append(answer["id"])

        async with anyio.create_task_group() as group:
            for n in range(PER_PROCESS):
                group.start_soon(one, n)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for agent in crowd:
                group.start_soon(send_all, agent)

    every_id = [mid for mids in sent.values() for mid in mids]
    assert len(every_id) == len(set(every_id)) == PROCESSES * PER_PROCESS
    for n, agent in enumerate(crowd):
        sender = names[n - 1]
        inbox = await agent.call("inbox", limit=500)
        assert Counter(ids(inbox["messages"])) == Counter(sent[sender])
        assert {m["from"] for m in inbox["messages"]} == {sender}
        assert sorted(m["data"]["n"] for m in inbox["messages"]) == list(range(PER_PROCESS))
        assert inbox["unread"] == 0
        mine = (await agent.call("sent", limit=500))["messages"]
        assert Counter(ids(mine)) == Counter(sent[agent.name])
    for agent in crowd:
        assert "locked" not in agent.stderr()  # "database is locked" never reaches anyone
