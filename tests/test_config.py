"""The settings model: DESIGN.md's defaults, a TOML file, and the environment over it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentpost.config import MAX_LOCKOUT_FAILURES, TOOL_GROUPS, Settings, load_settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import Limits
from agentpost.mcp.http import GROUPS


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.toml"
    monkeypatch.setenv("AGENTPOST_CONFIG", str(path))
    return path


def test_defaults_are_the_limits_table_of_the_design() -> None:
    settings = Settings()
    assert settings.max_subject_chars == 200
    assert settings.max_body_bytes == 32768
    assert settings.max_data_bytes == 65536
    assert settings.default_ttl_s is None
    assert settings.max_wait_s == 300
    assert settings.send_rate_per_minute == 60
    assert settings.max_unacked == 1000
    assert settings.max_channels_per_agent == 100
    assert settings.max_open_tasks_per_agent == 200
    assert settings.retention_days == 30
    assert settings.audit_retention_days == 365
    assert settings.heartbeat_s == 15
    assert settings.offline_after_s == 45
    assert settings.agents is None
    assert settings.limits == Limits()


def test_the_default_store_is_a_file_in_the_home_folder(isolated_home: Path) -> None:
    assert Settings().resolved_database_url == f"sqlite:///{isolated_home / 'agentpost.db'}"
    url = "postgresql://postgres@127.0.0.1:5432/x"
    assert Settings(database_url=url).resolved_database_url == url


def test_the_toml_file_at_agentpost_config_sets_keys(config_file: Path) -> None:
    config_file.write_text('max_body_bytes = 100\nagents = ["alice", "bob"]\ndefault_ttl_s = 60\n')
    settings = Settings()
    assert settings.max_body_bytes == 100
    assert settings.agents == ["alice", "bob"]
    assert settings.default_ttl_s == 60
    assert settings.limits.max_body_bytes == 100


def test_the_environment_wins_over_the_toml_file(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file.write_text("max_body_bytes = 100\nsend_rate_per_minute = 5\n")
    monkeypatch.setenv("AGENTPOST_MAX_BODY_BYTES", "200")
    monkeypatch.setenv("AGENTPOST_AGENTS", '["carol"]')
    settings = Settings()
    assert settings.max_body_bytes == 200
    assert settings.send_rate_per_minute == 5
    assert settings.agents == ["carol"]


def test_a_missing_config_file_means_defaults(config_file: Path) -> None:
    assert not config_file.exists()
    assert Settings().max_body_bytes == 32768


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MAX_BODY_BYTES", "0"),
        ("MAX_BODY_BYTES", "lots"),
        ("SEND_RATE_PER_MINUTE", "-1"),
        ("DEFAULT_TTL_S", "0"),
        ("OFFLINE_AFTER_S", "0"),
        ("RETENTION_DAYS", "-3"),
        ("MAX_UNACKED", "0"),
        ("DEFAULT_TTL_S", "inf"),  # "never" is an unset TTL, not an infinite one
        ("MAX_WAIT_S", "nan"),
        ("LOCKOUT_S", "inf"),
        # Each failure has a row of its own, all read at the next one: a million of them made
        # every wrong key `unavailable` (more parameters than the database takes in one query).
        ("LOCKOUT_FAILURES", str(MAX_LOCKOUT_FAILURES + 1)),
        ("DEFAULT_TTL_S", "1e300"),  # past a year, as a message's own ttl_s may not be
        ("HOME", ""),  # would be whichever folder the command runs in
        ("DATABASE_URL", "sqlite:///"),
        ("DATABASE_URL", "sqlite:///:memory:"),  # processes share the post office
        ("DATABASE_URL", "sqlite:////tmp/x.db?mode=ro"),
        ("AGENT", "Bad Name"),
        ("TOOL_GROUPS", '["core", "nope"]'),  # else serve starts, and refuses every /mcp
        ("TRUSTED_PROXIES", '["proxy.internal"]'),  # else no proxy would be believed
        ("TRUSTED_PROXIES", '["10.0.0.1/8"]'),  # host bits set: no network
        ("TRUSTED_PROXIES", '["*"]'),  # every client could name its own address
    ],
)
def test_invalid_values_in_the_environment_are_refused(
    key: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"AGENTPOST_{key}", value)
    with pytest.raises(ValidationError, match=key.lower()):
        Settings()


@pytest.mark.parametrize(
    ("heartbeat_s", "offline_after_s"), [("15", "10"), ("15", "15"), ("60", None)]
)
def test_offline_after_no_longer_than_a_heartbeat_is_refused(
    monkeypatch: pytest.MonkeyPatch, heartbeat_s: str, offline_after_s: str | None
) -> None:
    """Else every live session shows offline between its heartbeats, and the leader's seat
    passes to and fro between standing sessions, each move posted on #<project>."""
    monkeypatch.setenv("AGENTPOST_HEARTBEAT_S", heartbeat_s)
    if offline_after_s is not None:
        monkeypatch.setenv("AGENTPOST_OFFLINE_AFTER_S", offline_after_s)
    with pytest.raises(AgentpostError, match=r"offline_after_s .* longer than heartbeat_s"):
        load_settings()
    monkeypatch.setenv("AGENTPOST_OFFLINE_AFTER_S", str(float(heartbeat_s) + 1))
    assert load_settings().offline_after_s == float(heartbeat_s) + 1


def test_a_heartbeat_past_the_default_offline_time_says_that_time_is_the_default(
    monkeypatch: pytest.MonkeyPatch, config_file: Path
) -> None:
    """The refusal named the config file as where offline_after_s came from, a file that held
    no such key (or did not exist), when it was the default against the heartbeat set."""
    monkeypatch.setenv("AGENTPOST_HEARTBEAT_S", "100")
    with pytest.raises(AgentpostError) as refused:
        load_settings()
    assert refused.value.message.startswith(
        "configuration: offline_after_s (the default): 45 s must be longer than heartbeat_s (100 s)"
    )
    config_file.write_text("offline_after_s = 50\n")
    with pytest.raises(AgentpostError, match=rf"offline_after_s \({re.escape(str(config_file))}\)"):
        load_settings()


def test_invalid_values_in_the_file_are_refused(config_file: Path) -> None:
    config_file.write_text("max_wait_s = -5\n")
    with pytest.raises(ValidationError, match="max_wait_s"):
        Settings()


def test_a_config_file_that_is_not_utf8_or_not_a_file_is_an_invalid_argument_naming_it(
    config_file: Path,
) -> None:
    config_file.write_bytes(b'agent = "\xff"\n')
    with pytest.raises(AgentpostError, match="not UTF-8") as caught:
        load_settings()
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert str(config_file) in caught.value.message
    config_file.unlink()
    config_file.mkdir()
    with pytest.raises(AgentpostError, match="is not a file") as caught:
        load_settings()
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_a_home_with_a_tilde_is_under_the_users_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AGENTPOST_HOME", "~/posts")
    assert Settings().home == tmp_path / "posts"


@pytest.mark.parametrize("home", ["posts", "./posts", "nested/posts"])
def test_a_relative_home_in_the_file_is_the_files_own_folders(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, home: str
) -> None:
    """Every process reading one file shares one post office, wherever it was started."""
    monkeypatch.delenv("AGENTPOST_HOME")
    config_file.write_text(f'home = "{home}"\n')
    elsewhere = tmp_path / "a-repository"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert Settings().home.resolve() == (tmp_path / home).resolve()


def test_an_absolute_or_tilde_home_in_the_file_stays_itself(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AGENTPOST_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    config_file.write_text('home = "~/posts"\n')
    assert Settings().home == tmp_path / "user" / "posts"
    config_file.write_text(f'home = "{tmp_path / "abs"}"\n')
    assert Settings().home == tmp_path / "abs"


@pytest.mark.parametrize("path", ["posts/agentpost.db", "./agentpost.db"])
def test_a_relative_sqlite_database_in_the_file_is_the_files_own_folders(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str
) -> None:
    """Taken from the working folder, agents started in two worktrees with one config file
    each had a post office of their own, and none saw the others' mail."""
    config_file.write_text(f'database_url = "sqlite:///{path}"\n')
    elsewhere = tmp_path / "a-repository"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    url = Settings().resolved_database_url
    assert url.startswith("sqlite:///")
    assert Path(url.removeprefix("sqlite:///")).resolve() == (tmp_path / path).resolve()


def test_an_absolute_or_tilde_sqlite_database_in_the_file_stays_itself(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for url in (f"sqlite:///{tmp_path / 'abs.db'}", "sqlite:///~/posts.db"):
        config_file.write_text(f'database_url = "{url}"\n')
        assert Settings().database_url == url


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite:///", "sqlite:///a.db?mode=ro"])
def test_a_database_no_process_could_share_is_refused_in_the_file_too(
    config_file: Path, url: str
) -> None:
    config_file.write_text(f'database_url = "{url}"\n')
    with pytest.raises(AgentpostError, match="database_url") as caught:
        load_settings()
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_an_unknown_key_in_the_file_is_refused_not_ignored(config_file: Path) -> None:
    config_file.write_text("max_body_byte = 100\n")  # a typo must not pass silently
    with pytest.raises(ValidationError, match="max_body_byte"):
        Settings()


@pytest.mark.parametrize("roster", [["alice", "Bob"], ["ok", "has space"], ["x\n"]])
def test_the_roster_must_hold_valid_agent_names(roster: list[str]) -> None:
    with pytest.raises(ValidationError, match="must match"):
        Settings(agents=roster)


def test_a_valid_roster_is_kept_in_order() -> None:
    assert Settings(agents=["zed", "alice"]).agents == ["zed", "alice"]


def test_the_tool_groups_a_setting_may_name_are_the_groups_mcp_serves() -> None:
    assert tuple(GROUPS) == TOOL_GROUPS


def test_trusted_proxies_are_addresses_or_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTPOST_TRUSTED_PROXIES", '["10.0.0.0/8", "127.0.0.1", "::1"]')
    assert Settings().trusted_proxies == ["10.0.0.0/8", "127.0.0.1", "::1"]


@pytest.mark.parametrize("value", ["proxy.internal", "a, b", "[unclosed"])
def test_a_list_setting_that_is_not_json_says_which_variable_and_how_to_write_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTPOST_ALLOWED_HOSTS", value)
    with pytest.raises(AgentpostError) as refused:
        load_settings()
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert refused.value.message == (
        'configuration: allowed_hosts (AGENTPOST_ALLOWED_HOSTS): should be a JSON list: ["a", "b"]'
    )


def test_an_admin_key_no_key_could_be_is_refused_naming_the_setting_not_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Else `serve` stopped with a bare 'an admin key must be …', not saying which key."""
    monkeypatch.setenv("AGENTPOST_ADMIN_KEY", "too short")
    with pytest.raises(AgentpostError) as caught:
        load_settings()
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert "admin_key (AGENTPOST_ADMIN_KEY): an admin key must be 16 to 512" in caught.value.message
    assert "too short" not in caught.value.message
    monkeypatch.setenv("AGENTPOST_ADMIN_KEY", "")  # empty: unset, as before
    assert load_settings().admin_key == ""


def test_an_empty_agent_setting_is_unset_and_the_next_place_names_the_agent(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`AGENTPOST_AGENT=` was refused as no agent name, where `agentpost hook claude` read it
    as unset (settings_file.said): one setting read two ways."""
    monkeypatch.setenv("AGENTPOST_AGENT", "")
    assert load_settings().agent is None
    config_file.write_text('agent = "alice"\n')
    assert load_settings().agent == "alice"
    config_file.write_text('agent = ""\n')
    assert load_settings().agent is None
    monkeypatch.setenv("AGENTPOST_AGENT", "bob")
    assert load_settings().agent == "bob"


@pytest.mark.parametrize(
    ("asked", "given"),
    [
        ("http://127.0.0.1:8470", True),
        ("http://127.0.0.1:8470/", True),
        ("HTTP://127.0.0.1:8470", True),
        ("http://Post.Example:8470", False),
        ("http://127.0.0.1:8471", False),
        ("https://127.0.0.1:8470", False),
        ("http://127.0.0.1:99999", False),
    ],
)
def test_the_configured_key_goes_to_its_own_service_however_its_url_is_spelt(
    asked: str, given: bool
) -> None:
    """`--url HTTP://…` for the service AGENTPOST_URL names was sent no key at all."""
    key = "ap_" + "k" * 43
    settings = Settings(url="http://127.0.0.1:8470", key=key)
    assert (settings.key_for(asked) == key) is given
    named = Settings(url="http://post.example", key=key)
    assert named.key_for("HTTP://POST.EXAMPLE:80/") == key
