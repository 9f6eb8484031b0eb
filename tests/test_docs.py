"""The documentation is checked against the code: settings, MCP tools, CLI commands, errors.

docs/CONFIG.md must list exactly the settings model's keys, with their variables and defaults,
and its example must load. README.md's tool table must equal what a real `agentpost mcp`
offers (names and parameters), its command table what `agentpost --help` lists, each command
with the options it takes, and its error table the stable codes with the CLI's exit statuses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from agentpost.cli.main import EXIT_CODES, app
from agentpost.config import Settings
from agentpost.domain.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONFIG_DOC = ROOT / "docs" / "CONFIG.md"
AGENTPOST = Path(sys.executable).with_name("agentpost")
"""The installed console script, as a user's MCP client starts it."""
WAIT_S = 30

DESCRIBED_DEFAULTS = {"instructions": "built in"}
"""Defaults too long for the table: the documentation describes them instead."""


# -- reading markdown -------------------------------------------------------------------------


def section(path: Path, heading: str) -> str:
    """The text under `## heading`, up to the next heading of the same or a higher level."""
    lines = path.read_text().splitlines()
    marker = re.compile(r"^(#+) (.*)$")
    for start, line in enumerate(lines):
        found = marker.match(line)
        if found and found.group(2).strip() == heading:
            level = len(found.group(1))
            body = []
            for rest in lines[start + 1 :]:
                deeper = marker.match(rest)
                if deeper and len(deeper.group(1)) <= level:
                    break
                body.append(rest)
            return "\n".join(body)
    raise AssertionError(f"{path.name} has no heading {heading!r}")


def table(text: str) -> list[dict[str, str]]:
    """The first markdown table in `text`, one dict per row keyed by the header's cells."""
    rows = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    assert len(rows) >= 2, "no table here"
    split = [[cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip("|"))] for row in rows]
    header, _rule, *body = split
    return [dict(zip(header, cells, strict=True)) for cells in body]


def code(cell: str) -> str:
    """The first `code span` of a cell."""
    found = re.search(r"`([^`]+)`", cell)
    assert found, f"no `code` in {cell!r}"
    return found.group(1)


def unquote(cell: str) -> str:
    return cell.replace("`", "").strip()


# -- docs/CONFIG.md ---------------------------------------------------------------------------


def config_rows() -> dict[str, dict[str, str]]:
    return {code(row["key"]): row for row in table(section(CONFIG_DOC, "Keys"))}


def shown(value: Any) -> str:
    """A default as the documentation writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)  # `:g` writes a million as 1e+06
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Path):
        return str(value).replace(str(Path.home()), "~", 1)
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


def test_config_doc_lists_every_setting_and_nothing_else() -> None:
    assert set(config_rows()) == set(Settings.model_fields)


def test_config_doc_names_each_keys_environment_variable() -> None:
    wrong = {
        key: row["environment variable"]
        for key, row in config_rows().items()
        if unquote(row["environment variable"]) != f"AGENTPOST_{key.upper()}"
    }
    assert not wrong


def test_config_doc_shows_each_keys_default() -> None:
    documented = {key: unquote(row["default"]) for key, row in config_rows().items()}
    actual = {
        key: DESCRIBED_DEFAULTS.get(key)
        or shown(field.get_default(call_default_factory=True, validated_data={}))
        for key, field in Settings.model_fields.items()
    }
    assert documented == actual


def test_config_doc_says_what_each_key_does() -> None:
    assert [key for key, row in config_rows().items() if not row["what it does"]] == []


KEPT_BY_EACH_PROCESS = {"max_open_waits", "max_mcp_connections"}
"""Limits counted in a process's memory, not in the store: several `serve` replicas on one
database each allow this many."""


def test_config_doc_says_which_limits_each_replica_counts_on_its_own() -> None:
    rows = config_rows()
    assert [
        key
        for key in KEPT_BY_EACH_PROCESS
        if "each replica counts its own" not in rows[key]["what it does"]
    ] == []


def test_config_docs_example_file_loads_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = re.search(r"```toml\n(.*?)```", CONFIG_DOC.read_text(), re.DOTALL)
    assert example, "docs/CONFIG.md has no ```toml example"
    path = tmp_path / "config.toml"
    path.write_text(example.group(1))
    monkeypatch.setenv("AGENTPOST_CONFIG", str(path))
    values = tomllib.loads(example.group(1))
    for key in values:
        monkeypatch.delenv(f"AGENTPOST_{key.upper()}", raising=False)
    settings = Settings()
    assert values
    assert {key: getattr(settings, key) for key in values} == values


# -- README: MCP tools ------------------------------------------------------------------------


def documented_tools() -> dict[str, list[str]]:
    """Tool name → its documented parameters, as written: `x` required, `x?`, `x=default`."""
    tools = {}
    for row in table(section(README, "Tools")):
        signature = re.fullmatch(r"(\w+)\((.*)\)", code(row["tool"]))
        assert signature, f"not a signature: {row['tool']}"
        name, params = signature.groups()
        tools[name] = [p.strip() for p in params.split(",") if p.strip()]
    return tools


def parameter(written: str) -> tuple[str, dict[str, Any]]:
    """`x` → required; `x?` → optional, default null; `x=v` → optional, default v (JSON)."""
    if written.endswith("?"):
        return written[:-1], {"required": False, "default": None}
    if "=" in written:
        name, default = written.split("=", 1)
        return name, {"required": False, "default": json.loads(default)}
    return written, {"required": True}


def schema_parameter(schema: dict[str, Any], name: str) -> dict[str, Any]:
    if name in schema.get("required", []):
        return {"required": True}
    return {"required": False, "default": schema["properties"][name].get("default")}


@pytest.fixture
def server_env(isolated_home: Path) -> dict[str, str]:
    """The test's own post office (conftest's isolated home), as the server's environment."""
    return {key: value for key, value in os.environ.items() if key.startswith("AGENTPOST_")}


@pytest.fixture
async def offered_tools(server_env: dict[str, str], tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Tool name → input schema, from a real `agentpost mcp` over the SDK's stdio client."""
    assert AGENTPOST.exists(), f"the console script is not installed at {AGENTPOST}"
    params = StdioServerParameters(
        command=str(AGENTPOST), args=["mcp"], env=server_env, cwd=str(tmp_path)
    )
    async with Client(params, read_timeout_seconds=WAIT_S) as client:
        listed = await client.list_tools()
    assert listed.next_cursor is None
    return {tool.name: tool.input_schema for tool in listed.tools}


@pytest.mark.anyio
async def test_readme_tool_table_equals_the_tools_the_server_offers(
    offered_tools: dict[str, dict[str, Any]],
) -> None:
    tools = documented_tools()
    assert set(tools) == set(offered_tools)
    documented = {name: dict(parameter(p) for p in params) for name, params in tools.items()}
    offered = {
        name: {p: schema_parameter(schema, p) for p in schema.get("properties", {})}
        for name, schema in offered_tools.items()
    }
    assert documented == offered, "parameters: bare = required, `x?` = null default, `x=v`"


def test_parameters_are_read_as_the_table_writes_them() -> None:
    assert parameter("to") == ("to", {"required": True})
    assert parameter("subject?") == ("subject", {"required": False, "default": None})
    assert parameter('priority="normal"') == ("priority", {"required": False, "default": "normal"})
    assert parameter("peek=false") == ("peek", {"required": False, "default": False})


# -- README: command line ---------------------------------------------------------------------


def help_commands() -> list[str]:
    """The commands `agentpost --help` lists (Rich's panel, or Click's plain list)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [str(AGENTPOST), "--help"], capture_output=True, text=True, env=env, timeout=WAIT_S
    )
    assert done.returncode == 0, done.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    after = text.split("Commands", 1)[1]
    return re.findall(r"^(?:│ | {2})([a-z][a-z0-9-]*)\s", after, re.MULTILINE)


def test_readme_documents_every_cli_command() -> None:
    documented = [code(row["command"]).split()[1] for row in table(section(README, "Command line"))]
    listed = help_commands()
    assert listed, "found no commands in `agentpost --help`"
    assert set(documented) == set(listed)


SHARED_OPTIONS = {"--as", "--json", "--url", "--key", "--help"}
"""Options the prose around a command table describes once, for every command that takes them."""


def written_options(rows: list[dict[str, str]]) -> dict[str, set[str]]:
    """`agentpost A B …` of each row's command cell → the options it writes (`--x`); a span
    naming a group with a placeholder (`agentpost admin COMMAND`) names no command."""
    root = typer.main.get_command(app)
    written: dict[str, set[str]] = {}
    for row in rows:
        for span in re.findall(r"`(agentpost [^`]+)`", row["command"]):
            command, path = root, []
            for word in span.split()[1:]:
                found = getattr(command, "commands", {}).get(word)
                if found is None:
                    break
                command, path = found, [*path, word]
            if path and not hasattr(command, "commands"):
                written.setdefault(" ".join(path), set()).update(re.findall(r"--[a-z-]+", span))
    return written


def command_options(path: str) -> set[str]:
    """The options `agentpost PATH` takes, each flag's `--no-` off switch left out (a table
    writes the switch a person types; `--exclusive/--shared` both, as either is typed)."""
    command = typer.main.get_command(app)
    for word in path.split():
        command = command.commands[word]  # type: ignore[attr-defined]
    return {
        option
        for param in command.params
        if param.param_type_name == "option"
        for option in [*param.opts, *param.secondary_opts]
        if not option.startswith("--no-")
    }


def wrong_options(rows: list[dict[str, str]]) -> dict[str, dict[str, list[str]]]:
    """Per command, the options a table writes that it does not take, and those it takes that
    the table leaves out (beyond SHARED_OPTIONS)."""
    wrong = {}
    for path, written in written_options(rows).items():
        taken = command_options(path)
        unreal, unsaid = written - taken, taken - SHARED_OPTIONS - written
        if unreal or unsaid:
            wrong[path] = {"not taken": sorted(unreal), "not written": sorted(unsaid)}
    return wrong


def test_readme_writes_each_commands_options_as_it_takes_them() -> None:
    rows = table(section(README, "Command line"))
    assert len(written_options(rows)) > 30
    assert wrong_options(rows) == {}


# -- README: errors ---------------------------------------------------------------------------


def test_readme_documents_every_error_code_with_its_exit_status() -> None:
    documented = {
        code(row["code"]): int(row["CLI exit"]) for row in table(section(README, "Errors"))
    }
    assert documented == {c.value: EXIT_CODES[c] for c in ErrorCode}
