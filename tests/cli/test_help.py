"""`agentpost … --help` shows each command's description as its source writes it.

Typer reads help text as Rich markup, so a `[table]` in a docstring would vanish from the help
a user reads unless escaped; every command and group is checked, nested ones too.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agentpost.cli.main import app


def commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """Every command's path and the first paragraph of its help, as written in the source."""
    found = []
    if group.help:
        first = group.help.split("\n\n", 1)[0]
        found.append((path, " ".join(first.replace("\\[", "[").split())))
    for name, command in getattr(group, "commands", {}).items():  # a group's, nested ones too
        found.extend(commands(command, (*path, name)))
    return found


def shown(text: str) -> str:
    """Help as read: ANSI codes, Rich's box edges and line wrapping taken out."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return " ".join(text.replace("│", " ").split())


COMMANDS = commands(typer.main.get_command(app))


@pytest.mark.parametrize(
    ("path", "description"), COMMANDS, ids=[" ".join(path) or "agentpost" for path, _ in COMMANDS]
)
def test_a_commands_help_shows_its_description_as_written(
    path: tuple[str, ...], description: str
) -> None:
    done = CliRunner().invoke(
        app, [*path, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    )
    assert done.exit_code == 0, done.output
    assert description in shown(done.output)


GROUPS = [p for p, _ in COMMANDS if any(q[:-1] == p for q, _ in COMMANDS)]


@pytest.mark.parametrize("group", GROUPS, ids=[" ".join(p) or "agentpost" for p in GROUPS])
def test_each_commands_summary_fits_on_its_row_of_the_command_list(group: tuple[str, ...]) -> None:
    """A line break in a docstring's first paragraph would break the row mid-sentence."""
    done = CliRunner().invoke(
        app, [*group, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    )
    rows = [" ".join(line.replace("│", " ").split()) for line in done.output.splitlines()]
    for path, description in COMMANDS:
        if len(path) == len(group) + 1 and path[: len(group)] == group:
            assert f"{path[-1]} {description}" in rows, done.output
