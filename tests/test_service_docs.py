"""docs/SERVICE.md is checked against the service: its REST table must list exactly the
operations of the OpenAPI, and its tool-group table exactly the groups `/mcp` offers. The
README's error table, which SERVICE.md sends REST users to, must give each code its status, the
Clients section must name every command that takes `--url`, the admin table must write each
admin command with the options it takes, and the `/ready` example must be this release's answer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer

from agentpost.cli.main import app
from agentpost.config import Settings
from agentpost.domain.errors import ErrorCode
from agentpost.http.app import build_rest_app
from agentpost.http.errors import STATUS
from agentpost.mcp.http import GROUPS
from agentpost.services import PostOffice
from agentpost.services.post_office import Readiness
from agentpost.store.migrate import SCHEMA_HEAD
from test_docs import code, section, table, written_options, wrong_options

ROOT = Path(__file__).resolve().parents[1]
SERVICE_DOC = ROOT / "docs" / "SERVICE.md"
README = ROOT / "README.md"


@pytest.mark.anyio
async def test_the_rest_table_lists_exactly_the_operations_of_the_openapi() -> None:
    office = await PostOffice.open(Settings())
    try:
        spec = build_rest_app(office).openapi()
    finally:
        await office.aclose()
    served = {(method.upper(), path) for path, item in spec["paths"].items() for method in item}
    rows = table(section(SERVICE_DOC, "REST"))
    documented = {(code(row["method"]), code(row["path"])) for row in rows}
    assert documented == served


def test_the_tool_group_table_lists_exactly_the_groups() -> None:
    rows = table(section(SERVICE_DOC, "MCP over HTTP"))
    documented = {
        code(row["group"]): tuple(
            t.strip().strip("`") for t in row["tools"].split(",") if t.strip()
        )
        for row in rows
    }
    assert documented == GROUPS


def test_the_readme_error_table_gives_each_code_its_http_status() -> None:
    rows = table(section(README, "Errors"))
    documented = {code(row["code"]): int(row["HTTP"]) for row in rows}
    assert documented == {c.value: STATUS[c] for c in ErrorCode}


def test_the_clients_section_names_every_command_that_takes_url() -> None:
    line = re.search(
        r"\*\*Command line\*\*:(.*?)take the same", section(SERVICE_DOC, "Clients"), re.S
    )
    assert line, "docs/SERVICE.md's Clients section has no Command line entry"
    documented = set(re.findall(r"`([a-z][a-z-]*)`", line.group(1)))
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    taking_url = {
        name
        for name, command in commands.items()
        if any("--url" in param.opts for param in command.params)
    }
    assert documented == taking_url - {"mcp"}  # `agentpost mcp --url` has its own entry


def test_the_admin_command_table_lists_exactly_the_admin_commands() -> None:
    rows = table(section(SERVICE_DOC, "Administration from the command line"))
    documented = {
        name for row in rows for name in re.findall(r"agentpost admin ([a-z-]+)", row["command"])
    }
    group = typer.main.get_command(app).commands["admin"]  # type: ignore[attr-defined]
    assert documented == set(group.commands)


def test_the_admin_command_table_writes_each_commands_options_as_it_takes_them() -> None:
    rows = table(section(SERVICE_DOC, "Administration from the command line"))
    assert len(written_options(rows)) == len(
        typer.main.get_command(app).commands["admin"].commands  # type: ignore[attr-defined]
    )
    assert wrong_options(rows) == {}


def test_the_ready_example_is_what_a_replica_of_this_release_answers() -> None:
    """A migration that left the example behind would show an operator a schema no replica of
    theirs reports, and a field renamed one it never sends."""
    example = re.search(r"`(\{\"status\": \"ready\".*?\})`", SERVICE_DOC.read_text())
    assert example, "docs/SERVICE.md shows no /ready answer"
    answer = Readiness(database="postgresql", schema=SCHEMA_HEAD, hears_other_processes=True)
    assert json.loads(example.group(1)) == answer.to_dict()
