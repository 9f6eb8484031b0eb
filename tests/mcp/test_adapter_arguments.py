"""`agentpost.mcp.adapter.arguments`: text read as JSON only where the SDK's own reading
would keep what it read, so that skipping the rest changes no call's arguments."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from mcp.server.mcpserver.tools import Tool

from agentpost.mcp.adapter.arguments import _pre_parsed, _takes_text


async def send(
    to: str | list[str],
    body: str,
    subject: str | None = None,
    data: dict[str, Any] | list[Any] | None = None,
    priority: Literal["normal", "urgent"] = "normal",
    ttl_s: float | None = None,
    must_read: bool = False,
) -> None:
    """A tool's signature, as `send`'s: text, lists, objects, numbers and booleans."""


TEXTS = [
    "bob",
    "",
    " ",
    '["bob", "carol"]',
    ' \n\t["bob"]',
    '{"step": 2}',
    "  {}",
    "null",
    " null",
    "nonsense",
    "nul",
    "[",
    "[1, 2",
    "5",
    "-5",
    "1e400",
    "true",
    "false",
    '"quoted"',
    "NaN",
    "Infinity",
    "[" * 100_000,
    "\u00a0[1]",  # no JSON white space: json.loads refuses it
]


def _as_the_sdk_reads(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """What `_pre_parsed` gave before it skipped any text: the SDK's `pre_parse_json`, with
    `null` kept as text where the argument takes text."""
    given = tool.fn_metadata.pre_parse_json(arguments)
    fields = tool.fn_metadata.arg_model.model_fields
    for key, value in given.items():
        raw = arguments[key]
        if value is None and isinstance(raw, str) and key in fields:
            given[key] = raw if _takes_text(fields[key].annotation) else None
    return given


@pytest.mark.parametrize("text", TEXTS)
def test_text_is_read_as_the_sdk_reads_it_for_every_kind_of_argument(text: str) -> None:
    tool = Tool.from_function(send, structured_output=False)
    for name in ("to", "body", "subject", "data", "priority", "ttl_s", "must_read", "unknown"):
        arguments = {name: text}
        assert _pre_parsed(tool.fn_metadata, arguments) == _as_the_sdk_reads(tool, arguments)
