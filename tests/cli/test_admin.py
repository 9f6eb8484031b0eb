"""`agentpost admin`: the owner administers the post office from the command line.

Locally (no `--url`) each command acts as the owner with admin rights on the test's own SQLite
home; with `--url/--key` it acts on a real `agentpost serve` as the key's agent, which must be an
admin's. Every act and every observation goes through the installed script, as the owner would
use it; a key made locally is tried against a service serving the same home.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from command_line import Remote, agentpost, agentpost_json, database, refused
from service_process import Service


def create_agent(name: str, *args: str) -> str:
    """A new agent through `admin create-agent`; its key, read as a script reads it."""
    done = agentpost("admin", "create-agent", name, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def issue_key(name: str, *args: str) -> str:
    done = agentpost("admin", "issue-key", name, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def usage_of(name: str) -> dict[str, object]:
    (usage,) = agentpost_json("admin", "usage", name)["usage"]
    return usage


# -- on the local post office -------------------------------------------------------------------


@pytest.mark.anyio
async def test_create_agent_prints_the_key_alone_and_that_key_speaks_for_the_agent(
    service: Service,
) -> None:
    done = agentpost("admin", "create-agent", "bob", "--description", "backend")
    assert done.returncode == 0, done.stderr
    key = done.stdout.removesuffix("\n")
    assert key.startswith("ap_")
    assert len(key.split()) == 1
    assert "created agent bob" in done.stderr
    assert key not in done.stderr

    sent = await Remote(service, key).json("send", "owner", "reporting for duty")
    [mail] = agentpost_json("inbox")["messages"]
    assert (mail["id"], mail["from"], mail["trust"]) == (sent["id"], "bob", "verified")
    listed = {a["name"]: a for a in agentpost_json("admin", "agents")["agents"]}
    assert (listed["bob"]["trust"], listed["bob"]["description"]) == ("verified", "backend")


def test_create_agent_with_json_shows_the_agent_and_its_key_and_keys_lists_it() -> None:
    made = agentpost_json("admin", "create-agent", "bob", "--project", "api")
    assert (made["agent"]["name"], made["agent"]["project"]) == ("bob", "api")
    assert made["key"]["key"].startswith("ap_")
    [listed] = agentpost_json("admin", "keys", "bob")["keys"]
    assert (listed["id"], listed["agent"], listed["revoked_at"]) == (made["key"]["id"], "bob", None)
    assert made["key"]["key"] not in json.dumps(listed)


@pytest.mark.anyio
async def test_a_disabled_agents_key_is_refused_until_it_is_enabled(service: Service) -> None:
    bob = Remote(service, create_agent("bob"))
    assert agentpost_json("admin", "disable", "bob")["disabled"] is True
    shut = await bob.run("inbox", "--json")
    assert shut.returncode == 3, shut.stderr.decode()
    assert json.loads(shut.stdout)["error"]["code"] == "unauthenticated"

    assert agentpost_json("admin", "enable", "bob")["disabled"] is False
    assert (await bob.json("inbox"))["messages"] == []


@pytest.mark.anyio
async def test_a_revoked_key_is_refused_and_the_agents_other_key_goes_on(
    service: Service,
) -> None:
    first = agentpost_json("admin", "create-agent", "bob")["key"]
    second = Remote(service, issue_key("bob", "--label", "laptop"))
    assert agentpost_json("admin", "revoke-key", first["id"])["revoked_at"] is not None

    gone = await Remote(service, first["key"]).run("inbox", "--json")
    assert json.loads(gone.stdout)["error"]["code"] == "unauthenticated"
    assert (await second.json("inbox"))["messages"] == []
    labels = {
        k["label"]: k["revoked_at"] is None for k in agentpost_json("admin", "keys", "bob")["keys"]
    }
    assert labels == {"first key": False, "laptop": True}


def test_keys_shows_each_key_id_whole_in_a_narrow_terminal_so_revoke_key_can_take_it() -> None:
    name = "bob-the-long-named-reviewer-of-the-backend-team"
    create_agent(name)
    shown = agentpost("admin", "keys", name, COLUMNS="80")  # a terminal 80 columns wide
    assert shown.returncode == 0, shown.stderr
    [key_id] = [word for word in shown.stdout.split() if word.startswith("k_")]
    assert "…" not in shown.stdout
    assert agentpost_json("admin", "revoke-key", key_id)["revoked_at"] is not None

    listed = agentpost("admin", "agents", COLUMNS="80")
    assert "…" not in listed.stdout
    cells = [line.split("│")[1].strip() for line in listed.stdout.splitlines() if "│" in line]
    assert name in "".join(cells)  # folded onto the next lines, not cut short


def test_the_audit_log_shows_each_act_of_the_owner() -> None:
    create_agent("bob")
    agentpost_json("admin", "disable", "bob")
    agentpost_json("admin", "disable", "bob")  # already disabled: nothing to audit
    entries = agentpost_json("admin", "audit")["entries"]
    assert [(e["actor"], e["action"], e["target"]) for e in entries] == [
        ("owner", "agent.disabled", "bob"),
        ("owner", "agent.created", "bob"),
    ]
    only = agentpost_json("admin", "audit", "--action", "agent.created", "--limit", "5")
    assert [e["action"] for e in only["entries"]] == ["agent.created"]
    shown = agentpost("admin", "audit")
    assert "owner agent.disabled bob" in shown.stdout


def test_set_limits_keeps_the_limits_left_out() -> None:
    create_agent("bob")
    agentpost_json("admin", "set-limits", "bob", "--send-rate", "5")
    set_ = agentpost_json("admin", "set-limits", "bob", "--max-unacked", "7")
    assert (set_["send_rate_per_minute"], set_["max_unacked"]) == (5, 7)
    usage = usage_of("bob")
    assert (usage["send_rate_per_minute"], usage["max_unacked"]) == (5, 7)
    assert usage["own_limits"] == ["send_rate_per_minute", "max_unacked"]


def test_usage_names_every_count_and_limit_in_full_with_a_star_on_its_own() -> None:
    create_agent("bob-the-long-named-reviewer")
    agentpost_json("admin", "set-limits", "bob-the-long-named-reviewer", "--max-unacked", "7")
    shown = agentpost("admin", "usage", "bob-the-long-named-reviewer")
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())  # a narrow terminal wraps the line
    assert said == (
        "bob-the-long-named-reviewer: sent 0 (0 in 24 h), received 0, unread 0, unacked 0; "
        "send-rate 60, max-unacked 7*, max-channels 100, max-open-tasks 200"
    )


def test_a_limit_left_out_goes_on_following_its_setting() -> None:
    """Kept as the setting, not as the number the setting gave: a later change reaches it."""
    create_agent("bob")
    agentpost_json("admin", "set-limits", "bob", "--send-rate", "5")
    assert usage_of("bob")["max_unacked"] == 1000
    raised = agentpost_json("admin", "usage", "bob", AGENTPOST_MAX_UNACKED="50")["usage"][0]
    assert (raised["send_rate_per_minute"], raised["max_unacked"]) == (5, 50)


def test_default_puts_a_limit_back_to_its_setting() -> None:
    create_agent("bob")
    agentpost_json("admin", "set-limits", "bob", "--send-rate", "5", "--max-channels", "3")
    back = agentpost_json("admin", "set-limits", "bob", "--default", "send-rate")
    assert (back["send_rate_per_minute"], back["max_channels_per_agent"]) == (60, 3)
    assert usage_of("bob")["own_limits"] == ["max_channels_per_agent"]
    shown = agentpost("admin", "set-limits", "bob")
    said = " ".join(shown.stdout.split())  # a narrow terminal wraps the line
    assert said == (
        "bob: send-rate 60 (the setting), max-unacked 1000 (the setting), max-channels 3,"
        " max-open-tasks 200 (the setting)"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--send-rate", "5", "--default", "send-rate"],
        ["--default", "speed"],
        ["--max-unacked", "0"],
    ],
    ids=["set-and-default", "unknown-limit", "zero"],
)
def test_limits_asked_wrongly_are_an_invalid_argument_and_change_nothing(
    isolated_home: Path, args: list[str]
) -> None:
    create_agent("bob")
    before = database(isolated_home)
    refused(agentpost("admin", "set-limits", "bob", *args), "invalid_argument")
    assert database(isolated_home) == before


def test_a_blocked_senders_mail_is_dropped_until_unblocked() -> None:
    create_agent("alice")
    create_agent("bob")
    assert agentpost_json("admin", "block", "bob", "alice")["blocked"] is True
    agentpost_json("send", "bob", "while blocked", "--as", "alice")
    agentpost_json("admin", "unblock", "bob", "alice")
    agentpost_json("send", "bob", "after", "--as", "alice")
    found = agentpost_json("inbox", "--as", "bob")["messages"]
    assert [m["body"] for m in found] == ["after"]


def test_unvouch_makes_the_agent_untrusted_and_vouch_verified_again() -> None:
    create_agent("bob")
    assert agentpost_json("admin", "unvouch", "bob")["trust"] == "untrusted"
    assert agentpost("admin", "vouch", "bob").stdout.strip() == "bob: verified, enabled"
    refused(agentpost("admin", "unvouch", "owner"), "forbidden")


def test_an_act_on_an_agent_nobody_made_is_not_found_and_changes_nothing(
    isolated_home: Path,
) -> None:
    create_agent("bob")
    before = database(isolated_home)
    for act in (["disable", "nobody"], ["usage", "nobody"], ["issue-key", "nobody"]):
        refused(agentpost("admin", *act), "not_found")
    assert database(isolated_home) == before


# -- on a remote service ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_admin_key_administers_the_remote_service(service: Service) -> None:
    owner = Remote(service, service.admin_key)
    done = await owner.run("admin", "create-agent", "alice")
    assert done.returncode == 0, done.stderr.decode()
    alice = Remote(service, done.stdout.decode().strip())
    sent = await alice.json("send", "owner", "hello")
    assert [(m["id"], m["from"]) for m in (await owner.json("inbox"))["messages"]] == [
        (sent["id"], "alice")
    ]

    await owner.json("admin", "set-limits", "alice", "--send-rate", "5")
    kept = await owner.json(
        "admin", "set-limits", "alice", "--max-channels", "2", "--max-open-tasks", "9"
    )
    assert (
        kept["send_rate_per_minute"],
        kept["max_channels_per_agent"],
        kept["max_open_tasks_per_agent"],
    ) == (5, 2, 9)
    assert (await owner.json("admin", "disable", "alice"))["disabled"] is True
    audited = await owner.json("admin", "audit", "--actor", "owner")
    assert [e["action"] for e in audited["entries"]][:2] == ["agent.disabled", "limits.set"]


@pytest.mark.anyio
async def test_the_environment_names_the_service_and_the_admin_key(
    service: Service, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "no-local-post-office"
    env = {
        "AGENTPOST_URL": service.url,
        "AGENTPOST_KEY": service.admin_key,
        "AGENTPOST_HOME": str(elsewhere),
    }
    owner = Remote(service, service.admin_key)
    made = await owner.json("admin", "create-agent", "bob", env=env)
    names = [a["name"] for a in (await owner.json("admin", "agents", env=env))["agents"]]
    assert made["agent"]["name"] in names
    assert not elsewhere.exists(), "a remote admin command opened a local post office"


@pytest.mark.anyio
async def test_an_agents_key_is_refused_admin_acts_with_the_stable_code(service: Service) -> None:
    mallory = Remote(service, await service.create_agent("mallory"))
    done = await mallory.run("admin", "create-agent", "eve", "--json")
    assert done.returncode == 3, done.stderr.decode()
    assert json.loads(done.stdout)["error"]["code"] == "forbidden"
    worded = await mallory.run("admin", "agents")
    assert worded.stderr.decode().startswith("error: forbidden: this needs an admin key")
    owner = Remote(service, service.admin_key)
    names = [a["name"] for a in (await owner.json("admin", "agents"))["agents"]]
    assert "eve" not in names
