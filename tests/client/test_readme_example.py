"""The README's Python client example, run as written against a real `agentpost serve`: only
its URL and key are the test's, and its endless event loop is stopped once it has printed."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from service_process import Service

pytestmark = pytest.mark.anyio

README = Path(__file__).resolve().parents[2] / "README.md"
WAKE_S = 30


def readme_example() -> str:
    found = re.search(
        r"```python\n(from agentpost import AsyncClient\n.*?)```", README.read_text(), re.DOTALL
    )
    assert found, "the README has no Python example of AsyncClient"
    return found.group(1)


async def test_the_readmes_client_example_runs_as_written(service: Service) -> None:
    alice_key = await service.create_agent("alice")
    bob = await service.agent("bob")
    waiting = (await bob.post("/v1/messages", json={"to": "alice", "body": "fixed yet?"})).json()

    source = readme_example().replace("http://127.0.0.1:8470", service.url)
    source = source.replace('"ap_…"', repr(alice_key))
    printed: list[tuple[Any, ...]] = []
    namespace: dict[str, Any] = {"print": lambda *args: printed.append(args)}
    exec("async def example():\n" + textwrap.indent(source, "    "), namespace)

    async def send_until_an_event_is_printed() -> None:
        """The stream starts when it opens, so mail sent before then is no event of it."""
        while not printed:
            await bob.post("/v1/messages", json={"to": "alice", "body": "and now?"})
            await anyio.sleep(0.3)

    with anyio.fail_after(WAKE_S):
        async with anyio.create_task_group() as group:
            group.start_soon(namespace["example"])
            await send_until_an_event_is_printed()
            group.cancel_scope.cancel()

    kind, message_id = printed[0]
    assert kind == "message.created"
    assert message_id.startswith("m_")
    sent = (await bob.get("/v1/sent")).json()["messages"]
    first = next(message for message in sent if message["id"] == waiting["id"])
    assert [r["state"] for r in first["receipts"]] == ["acked"]  # waited for, then acked
    inbox = (await bob.get("/v1/inbox")).json()["messages"]
    assert [(m["subject"], m["body"]) for m in inbox] == [("parser", "the parser is fixed")]
