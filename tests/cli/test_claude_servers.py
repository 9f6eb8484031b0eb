"""Which post office Claude Code's settings name for a worktree, read from real files: the many
small cases beside the commit guard's end-to-end tests (tests/cli/test_guard.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentpost.cli.claude_servers import MissingHere, claude_json, office_settings
from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode

URL = "http://127.0.0.1:8470"
KEY = "ap_" + "a" * 43


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    made = tmp_path / "shop"
    made.mkdir()
    return made


def mcp_json(folder: Path, entry: object) -> None:
    (folder / ".mcp.json").write_text(json.dumps({"mcpServers": {"agentpost": entry}}))


def user_file(content: object) -> None:
    path = claude_json(os.environ)  # this test's, in its own folder (tests/conftest.py)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def office(folder: Path, settings: Settings | None = None, **environ: str) -> Settings:
    """What the guard reads for `folder`, the committer's environment being `environ` alone
    (and this test's Claude Code settings folder)."""
    claude = {"CLAUDE_CONFIG_DIR": os.environ["CLAUDE_CONFIG_DIR"]}
    return office_settings(folder, {**claude, **environ}, settings or Settings())


def stdio(*args: str, **env: str) -> dict[str, object]:
    return {"command": "agentpost", "args": ["mcp", *args], "env": env}


# -- which entry ----------------------------------------------------------------------------------


def test_no_entry_leaves_the_committers_settings(folder: Path) -> None:
    assert office(folder).url is None
    mcp_json(folder, stdio())  # what `agentpost install claude` writes: the local post office
    assert office(folder).url is None


def test_only_the_server_named_agentpost_counts(folder: Path) -> None:
    servers = {"postoffice": {"type": "http", "url": f"{URL}/mcp"}, "agentpost": stdio()}
    (folder / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    assert office(folder).url is None


def test_the_local_scope_outranks_the_project_which_outranks_the_user_scope(
    folder: Path, tmp_path: Path
) -> None:
    def at(port: int) -> dict[str, object]:
        return stdio(f"--url=http://127.0.0.1:{port}", f"--key={KEY}")

    user_file({"mcpServers": {"agentpost": at(3)}})
    assert office(folder).url == "http://127.0.0.1:3"
    mcp_json(folder, at(2))
    assert office(folder).url == "http://127.0.0.1:2"
    other = str(tmp_path / "elsewhere")
    user_file(
        {
            "mcpServers": {"agentpost": at(3)},
            "projects": {other: {"mcpServers": {"agentpost": at(9)}}},
        }
    )
    assert office(folder).url == "http://127.0.0.1:2"  # another folder's local scope
    user_file({"projects": {str(folder): {"mcpServers": {"agentpost": at(1)}}}})
    assert office(folder).url == "http://127.0.0.1:1"


@pytest.mark.parametrize(
    "content",
    [{"mcpServers": ["agentpost"]}, {"mcpServers": {"agentpost": "agentpost mcp"}}, ["x"]],
    ids=["servers-a-list", "entry-a-string", "not-an-object"],
)
def test_settings_of_another_shape_name_no_server(folder: Path, content: object) -> None:
    (folder / ".mcp.json").write_text(json.dumps(content))
    assert office(folder).url is None


def test_a_file_that_is_not_json_is_refused_by_name(folder: Path) -> None:
    (folder / ".mcp.json").write_text('{"mcpServers": ')
    with pytest.raises(AgentpostError) as raised:
        office(folder)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert not isinstance(raised.value, MissingHere)
    assert f"{folder / '.mcp.json'} is not JSON" in raised.value.message


def test_a_broken_mcp_json_is_not_read_where_the_local_scope_outranks_it(folder: Path) -> None:
    (folder / ".mcp.json").write_text("{")
    user_file({"projects": {str(folder): {"mcpServers": {"agentpost": stdio("--url", URL)}}}})
    assert office(folder, Settings(url=URL, key=KEY)).url == URL


# -- a command's entry ----------------------------------------------------------------------------


def test_the_url_and_key_of_the_command_line_win_the_last_given(folder: Path) -> None:
    mcp_json(folder, stdio("--url", "http://127.0.0.1:1", "--url=" + URL, "--key", KEY))
    found = office(folder)
    assert (found.url, found.key) == (URL, KEY)


def test_the_entrys_env_is_read_with_the_committers_variables_filled_in(folder: Path) -> None:
    mcp_json(folder, stdio(AGENTPOST_URL="${AP_URL:-" + URL + "}", AGENTPOST_KEY="${AP_KEY}"))
    found = office(folder, AP_KEY=KEY)
    assert (found.url, found.key) == (URL, KEY)
    assert office(folder, AP_KEY=KEY, AP_URL="http://127.0.0.1:2").url == "http://127.0.0.1:2"


def test_its_project_is_the_project_checked(folder: Path) -> None:
    mcp_json(folder, stdio(AGENTPOST_URL=URL, AGENTPOST_KEY=KEY, AGENTPOST_PROJECT="apollo"))
    assert office(folder).project == "apollo"


def test_an_entry_naming_no_service_inherits_the_committers(folder: Path) -> None:
    mcp_json(folder, stdio(AGENTPOST_PROJECT="apollo"))
    found = office(folder, Settings(url=URL, key=KEY))
    assert (found.url, found.key, found.project) == (URL, KEY, "apollo")


def test_a_local_entry_needs_none_of_the_variables_it_names_for_a_service(folder: Path) -> None:
    mcp_json(folder, stdio(AGENTPOST_KEY="${UNSET}", AGENTPOST_PROJECT="${UNSET}"))
    assert office(folder).url is None


def test_an_entry_blanking_the_url_keeps_the_local_post_office(folder: Path) -> None:
    mcp_json(folder, stdio(AGENTPOST_URL=""))
    assert office(folder, Settings(url=URL, key=KEY)).url is None


def test_the_committers_key_for_another_service_is_not_handed_to_this_one(folder: Path) -> None:
    mcp_json(folder, stdio("--url", URL))
    with pytest.raises(MissingHere) as raised:
        office(folder, Settings(url="http://127.0.0.1:2", key=KEY))
    assert raised.value.code is ErrorCode.UNAUTHENTICATED
    assert KEY not in raised.value.message
    assert office(folder, Settings(url=URL, key=KEY)).key == KEY  # the same service's: taken


@pytest.mark.parametrize("said", ["${AP_KEY}", "${AP_KEY:-}"])
def test_a_key_variable_unset_or_empty_is_missing_here(folder: Path, said: str) -> None:
    mcp_json(folder, stdio(AGENTPOST_URL=URL, AGENTPOST_KEY=said))
    with pytest.raises(MissingHere):
        office(folder, AP_KEY="")


def test_an_unset_variable_is_named(folder: Path) -> None:
    mcp_json(folder, stdio("--url", "${AP_URL}"))
    with pytest.raises(MissingHere) as raised:
        office(folder)
    assert "takes its URL from ${AP_URL}, which is not set here" in raised.value.message


# -- an HTTP entry --------------------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [f"Bearer {KEY}", f"bearer  {KEY} "])
def test_an_http_entry_is_its_service_and_its_bearer_token(
    folder: Path, authorization: str
) -> None:
    entry = {"type": "http", "url": f"{URL}/mcp/", "headers": {"Authorization": authorization}}
    mcp_json(folder, entry)
    found = office(folder)
    assert (found.url, found.key) == (URL, KEY)


def test_an_http_entry_without_a_bearer_token_is_missing_its_key(folder: Path) -> None:
    mcp_json(folder, {"type": "http", "url": f"{URL}/mcp", "headers": {"Authorization": KEY}})
    with pytest.raises(MissingHere) as raised:
        office(folder)
    assert f"is the post office at {URL}, and no key for it is set here" in raised.value.message
    assert KEY not in raised.value.message


def test_an_http_entry_elsewhere_than_a_services_mcp_is_refused(folder: Path) -> None:
    mcp_json(folder, {"type": "http", "url": "https://mcp.example.com/sse"})
    with pytest.raises(AgentpostError) as raised:
        office(folder)
    assert not isinstance(raised.value, MissingHere)
    assert "not at a service's /mcp" in raised.value.message


def test_a_password_written_into_the_url_is_not_shown(folder: Path) -> None:
    mcp_json(folder, {"type": "http", "url": "http://me:hunter2@127.0.0.1:8470/mcp"})
    with pytest.raises(MissingHere) as raised:
        office(folder)
    assert "hunter2" not in raised.value.message
    assert "http://me:***@127.0.0.1:8470" in raised.value.message


# -- no entry, a URL of the committer's ------------------------------------------------------------


def test_the_committers_url_without_a_key_is_missing_here(folder: Path) -> None:
    with pytest.raises(MissingHere) as raised:
        office(folder, Settings(url=URL))
    assert f"AGENTPOST_URL names the post office at {URL}" in raised.value.message
