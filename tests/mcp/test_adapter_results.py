"""A tool's answer in its wire form: exactly what the SDK would make of a `CallToolResult`.

The adapter hands the SDK a dict (see `agentpost.mcp.adapter.server._ToolResult`); should the SDK's
wire form of a `CallToolResult` ever change, these cases say so before any client does.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest

from agentpost.mcp.adapter.server import _tool_result


@pytest.mark.parametrize(
    ("text", "structured", "error"),
    [
        ("Sent m_1 to bob.", {"id": "m_1", "to": ["bob"], "subject": None, "unread": 0}, False),
        ("inbox_full: …", {"error": {"code": "inbox_full", "details": {"full": ["bob"]}}}, True),
        ("Error executing tool send", None, True),
        ("nested", {"messages": [{"data": {"a": [1, 2.5, True, None]}}]}, False),
    ],
)
def test_a_tool_answer_is_what_the_sdk_makes_of_the_same_call_tool_result(
    text: str, structured: dict[str, Any] | None, error: bool
) -> None:
    expected = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=error,
    ).model_dump(by_alias=True, mode="json", exclude_none=True)
    assert _tool_result(text, structured, error=error) == expected
