"""Which post office Claude Code's or Codex's settings name for a worktree, read from real files:
the many small cases beside the commit guard's end-to-end tests (tests/cli/test_guard.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentpost.cli.agent_servers import MissingHere, claude_json, office_settings
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
    (and this test's Claude Code and Codex settings folders)."""
    clients = {name: os.environ[name] for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME")}
    return office_settings(folder, {**clients, **environ}, settings or Settings())


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


# -- Codex's settings -----------------------------------------------------------------------------


def codex_user() -> Path:
    return Path(os.environ["CODEX_HOME"]) / "config.toml"  # this test's (tests/conftest.py)


def codex_project(folder: Path) -> Path:
    return folder / ".codex" / "config.toml"


def codex(file: Path, table: str) -> None:
    """Write `[mcp_servers.agentpost]` with `table` (its lines of TOML) into Codex's `file`,
    beside a server of another name."""
    file.parent.mkdir(parents=True, exist_ok=True)
    other = '[mcp_servers.docs]\nurl = "http://127.0.0.1:7/mcp"\n'
    file.write_text(f'model = "o4-mini"\n\n{other}\n[mcp_servers.agentpost]\n{table}\n')


def served_at(port: int) -> str:
    args = f'["mcp", "--url", "http://127.0.0.1:{port}", "--key", "{KEY}"]'
    return f'command = "agentpost"\nargs = {args}'


def test_a_codex_command_is_read_with_its_env(folder: Path) -> None:
    env = f'AGENTPOST_URL = "{URL}"\nAGENTPOST_KEY = "{KEY}"\nAGENTPOST_PROJECT = "apollo"'
    codex(
        codex_user(), f'command = "agentpost"\nargs = ["mcp"]\n\n[mcp_servers.agentpost.env]\n{env}'
    )
    found = office(folder)
    assert (found.url, found.key, found.project) == (URL, KEY, "apollo")


def test_codex_passes_on_its_values_as_written(folder: Path) -> None:
    """Codex fills in no `${VAR}`: the server is handed the text itself, and so is the guard."""
    env = f'{{ AGENTPOST_URL = "{URL}", AGENTPOST_KEY = "${{AP_KEY}}" }}'
    codex(codex_user(), f'command = "agentpost"\nenv = {env}')
    assert office(folder, AP_KEY=KEY).key == "${AP_KEY}"


def test_a_codex_entry_as_install_codex_writes_it_keeps_the_local_post_office(folder: Path) -> None:
    codex(codex_user(), 'command = "agentpost"\nargs = ["mcp"]')
    assert office(folder).url is None


def test_a_codex_url_takes_its_key_from_the_variable_bearer_token_env_var_names(
    folder: Path,
) -> None:
    codex(codex_user(), f'url = "{URL}/mcp"\nbearer_token_env_var = "AP_KEY"')
    found = office(folder, AP_KEY=KEY)
    assert (found.url, found.key) == (URL, KEY)


def test_a_codex_url_takes_its_key_from_an_authorization_env_http_header(folder: Path) -> None:
    codex(codex_user(), f'url = "{URL}/mcp"\nenv_http_headers = {{ authorization = "AP_AUTH" }}')
    assert office(folder, AP_AUTH=f"Bearer {KEY}").key == KEY


def test_a_codex_url_takes_its_key_from_a_literal_authorization_http_header(folder: Path) -> None:
    codex(codex_user(), f'url = "{URL}/mcp"\nhttp_headers = {{ Authorization = "Bearer {KEY}" }}')
    assert office(folder).key == KEY


def test_codex_sends_the_bearer_variable_over_the_env_header_over_the_literal_header(
    folder: Path,
) -> None:
    one, two, three = ("ap_" + c * 43 for c in "xyz")
    headers = f'http_headers = {{ Authorization = "Bearer {three}" }}'
    from_env = 'env_http_headers = { Authorization = "AP_AUTH" }'
    codex(
        codex_user(), f'url = "{URL}/mcp"\n{headers}\n{from_env}\nbearer_token_env_var = "AP_KEY"'
    )
    assert office(folder, AP_KEY=one, AP_AUTH=f"Bearer {two}").key == one
    codex(codex_user(), f'url = "{URL}/mcp"\n{headers}\n{from_env}')
    assert office(folder, AP_AUTH=f"Bearer {two}").key == two
    codex(codex_user(), f'url = "{URL}/mcp"\n{headers}')
    assert office(folder).key == three


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ('bearer_token_env_var = "AP_KEY"', "bearer_token_env_var"),
        ('env_http_headers = { Authorization = "AP_KEY" }', "env_http_headers"),
    ],
)
@pytest.mark.parametrize("value", [None, " "], ids=["unset", "blank"])
def test_a_variable_codex_takes_the_key_from_is_missing_here_by_its_name(
    folder: Path, table: str, field: str, value: str | None
) -> None:
    codex(codex_user(), f'url = "{URL}/mcp"\n{table}')
    with pytest.raises(MissingHere) as raised:
        office(folder, Settings(url=URL, key=KEY), **({} if value is None else {"AP_KEY": value}))
    said = f"in {codex_user()} takes its key from the variable 'AP_KEY' (its {field}), which is"
    assert said in raised.value.message
    assert KEY not in raised.value.message


def test_a_codex_url_without_a_key_is_missing_its_key(folder: Path) -> None:
    codex(codex_user(), f'url = "{URL}/mcp"\nenv_http_headers = {{ X-Trace = "UNSET" }}')
    with pytest.raises(MissingHere) as raised:
        office(folder)
    assert f"is the post office at {URL}, and no key for it is set here" in raised.value.message


def test_the_projects_codex_file_outranks_the_users(folder: Path) -> None:
    codex(codex_user(), served_at(2))
    assert office(folder).url == "http://127.0.0.1:2"
    codex(codex_project(folder), served_at(1))
    assert office(folder).url == "http://127.0.0.1:1"


def test_a_codex_server_switched_off_names_no_post_office(folder: Path) -> None:
    """As Codex lays the project's table over the user's, the user's is off too."""
    codex(codex_user(), served_at(2))
    codex(codex_project(folder), f"{served_at(1)}\nenabled = false")
    assert office(folder).url is None
    assert office(folder, Settings(url=URL, key=KEY)).url == URL  # the committer's, as without
    codex(codex_project(folder), f"{served_at(1)}\nenabled = true")
    assert office(folder).url == "http://127.0.0.1:1"


def test_any_claude_code_scope_outranks_codex(folder: Path) -> None:
    codex(codex_project(folder), served_at(2))
    user_file({"mcpServers": {"agentpost": stdio("--url=http://127.0.0.1:1", f"--key={KEY}")}})
    assert office(folder).url == "http://127.0.0.1:1"
    mcp_json(folder, stdio())  # Claude Code's agents use the local post office: so does the guard
    assert office(folder).url is None
    codex_project(folder).write_text("[mcp_servers.agentpost")  # then never read
    assert office(folder).url is None


@pytest.mark.parametrize("where", ["project", "user"])
def test_a_codex_file_that_is_not_toml_is_refused_by_name(folder: Path, where: str) -> None:
    file = codex_project(folder) if where == "project" else codex_user()
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text('[mcp_servers.agentpost]\nurl = "never closed\n')
    with pytest.raises(AgentpostError) as raised:
        office(folder)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert not isinstance(raised.value, MissingHere)
    assert f"{file} is not TOML" in raised.value.message


def test_a_codex_file_that_cannot_be_read_is_refused_by_name(folder: Path) -> None:
    codex_project(folder).mkdir(parents=True)  # a folder where the file would be
    with pytest.raises(AgentpostError) as raised:
        office(folder)
    assert f"cannot read {codex_project(folder)}: " in raised.value.message


def test_the_users_codex_file_is_not_read_where_the_projects_decides(folder: Path) -> None:
    codex_user().parent.mkdir(parents=True)
    codex_user().write_text("[")
    codex(codex_project(folder), served_at(1))
    assert office(folder).url == "http://127.0.0.1:1"
