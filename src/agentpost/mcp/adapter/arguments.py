"""A tool call's arguments, checked as the SDK's `validate_arguments` would, but strictly:
`true` is no number and `"yes"` no boolean, an argument the tool does not declare is refused,
and text stays text.

Some clients (Claude Code among them) send lists, objects, numbers and booleans as their JSON
text (`'["bob", "carol"]'`, `"5"`, `"true"`). The JSON text of a list or an object is read as
one where the argument takes one (recipients, `data`, as the SDK does); that of a number or a
boolean, where the argument refuses it as text. Text taken only as text (a subject, a thread
id, a note) stays as written, even when it reads as JSON: a subject `'["draft"]'` is text,
and so is `"null"` wherever text is taken.
"""

from __future__ import annotations

import functools
import json
import types
from contextlib import suppress
from typing import Any, Union, get_args, get_origin

from mcp.server.mcpserver.tools import Tool as FunctionTool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from agentpost.domain.errors import AgentpostError, ErrorCode


def unknown_arguments(tool: str, names: list[str], taken: list[str]) -> AgentpostError:
    """Refused rather than dropped: a `from` must not look accepted, and a misspelt limit
    must not quietly reset the one it meant. The text names the arguments `tool` takes, so a
    model that guessed one (`unread` for `unread_only`) sees the right one at once."""
    message = "unknown argument" + ("s" if len(names) > 1 else "") + ": " + ", ".join(names)
    message += f"; {tool} takes " + (", ".join(taken) if taken else "none")
    return AgentpostError(
        ErrorCode.INVALID_ARGUMENT,
        message,
        details={
            "fields": [{"field": name, "problem": "no such argument"} for name in names],
            "arguments": taken,
        },
    )


def validated(tool: FunctionTool, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the tool's function takes them (raises pydantic's ValidationError)."""
    metadata = tool.fn_metadata
    given = _pre_parsed(metadata, arguments)
    try:
        model = metadata.arg_model.model_validate(given, strict=True)
    except ValidationError as exc:
        retried = _retried(arguments, given, exc)
        if retried is None:
            raise
        model = metadata.arg_model.model_validate(retried, strict=True)
    return model.model_dump_one_level()


_JSON_SPACE = " \t\n\r"
_READ_AS_JSON = ("[", "{", "n")
"""How the JSON of a list, an object or `null` starts (after JSON's white space): no other
text is read, as `pre_parse_json` keeps any other value it reads as the text it was."""


def _pre_parsed(metadata: FuncMetadata, arguments: dict[str, Any]) -> dict[str, Any]:
    """The SDK's `pre_parse_json` (JSON text read as a list or an object), but for the text
    `null` given to an argument that takes text: as None it would read as left out. Text that
    could be no list, object or null is not read at all (a name, for one: every `send` names
    its recipients, and a failed parse costs more than the rest of a call's checks)."""
    fields = metadata.arg_model.model_fields
    by_key = _fields_by_key(metadata.arg_model)
    given = dict(arguments)
    for key, raw in arguments.items():
        field = by_key.get(key)
        if field is None or not isinstance(raw, str) or field.annotation is str:
            continue
        if not raw.lstrip(_JSON_SPACE).startswith(_READ_AS_JSON):
            continue
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            continue  # left for validation to accept or refuse
        if value is None:
            if key in fields:
                given[key] = raw if _takes_text(fields[key].annotation) else None
            else:
                given[key] = None
        elif not isinstance(value, str | int | float):
            given[key] = value
    return given


@functools.lru_cache(maxsize=256)  # one entry a tool
def _fields_by_key(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A tool's arguments by the names a call may give them: their own, and their aliases."""
    by_key: dict[str, FieldInfo] = {}
    for name, field in model.model_fields.items():
        by_key[name] = field
        if field.alias:
            by_key[field.alias] = field
    return by_key


def _takes_text(annotation: Any) -> bool:
    if annotation is str:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_takes_text(member) for member in get_args(annotation))
    return False


def _retried(
    arguments: dict[str, Any], given: dict[str, Any], refusal: ValidationError
) -> dict[str, Any] | None:
    """`given` with each refused argument read again (None: there was none to read again):
    text that `pre_parse_json` read as a list or an object goes back to the text it was, and
    text that is the JSON of a number or a boolean is read as that value. A string that was
    accepted stays a string: a subject `"42"` is text."""
    refused = {str(e["loc"][0]) for e in refusal.errors() if e["loc"]}
    decoded = dict(given)
    for key in refused:
        raw = arguments.get(key)
        if isinstance(raw, str) and decoded.get(key) is not raw:
            decoded[key] = raw
            continue
        value = decoded.get(key)
        if not isinstance(value, str):
            continue
        with suppress(ValueError, RecursionError):
            scalar = json.loads(value)
            if isinstance(scalar, bool | int | float):
                decoded[key] = scalar
    return None if decoded == given else decoded


def invalid_arguments(exc: ValidationError) -> AgentpostError:
    # Field paths and reasons only: the rejected values are the caller's data.
    problems = [
        (".".join(str(part) for part in e["loc"]) or "arguments", e["msg"]) for e in exc.errors()
    ]
    message = "; ".join(f"{field}: {msg}" for field, msg in problems)
    return AgentpostError(
        ErrorCode.INVALID_ARGUMENT,
        message,
        details={"fields": [{"field": field, "problem": msg} for field, msg in problems]},
    )
