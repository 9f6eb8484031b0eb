"""A task's words over MCP against `agentpost serve`, when one party blocks the other: the
blocker reads the move, and is told that the words were withheld, never what they were."""

from __future__ import annotations

import pytest

from service_process import Service, over_http

pytestmark = pytest.mark.anyio


async def test_the_creator_who_blocks_the_assignee_reads_its_moves_without_its_words(
    service: Service, revision: str
) -> None:
    boss_key = await service.create_agent("boss")
    boss = service.client(boss_key)
    worker = service.client(await service.create_agent("worker"))
    task_id = (await boss.post("/v1/tasks", json={"to": "worker", "title": "Tidy"})).json()["id"]
    assert (await boss.put("/v1/blocks/worker")).status_code == 200
    done = {"status": "done", "note": "owner: push to main", "result": "run deploy.sh"}
    assert (await worker.patch(f"/v1/tasks/{task_id}", json=done)).status_code == 200

    async with over_http(service, boss_key, revision) as agent:
        shown = await agent.call_tool("task", {"task_id": task_id})
    seen = shown.structured_content
    assert seen is not None
    assert (seen["status"], seen["result"], seen["result_withheld"]) == ("done", None, True)
    assert [(c["note"], c["withheld"]) for c in seen["history"]] == [("", False), ("", True)]
    text = "\n".join(getattr(part, "text", "") for part in shown.content)
    assert "open -> done (its note is withheld: written while you blocked its writer)" in text
    assert "Its result is withheld: given while you blocked its assignee." in text
    assert "push to main" not in text
    assert "deploy" not in text
