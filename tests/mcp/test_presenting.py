"""What the instructions say of the agents beside the one they speak to (`colleagues`)."""

from __future__ import annotations

from agentpost.domain.accounts import AgentInfo
from agentpost.domain.models import Trust
from agentpost.mcp.presenting import COLLEAGUES_NAMED, colleagues


def agent(name: str, trust: Trust = Trust.VERIFIED) -> AgentInfo:
    return AgentInfo(name, "", None, [], trust, 0.0, disabled=False, online=True)


def test_an_agent_alone_is_told_nobody_is_there_yet() -> None:
    assert colleagues("alice", [agent("alice"), agent("owner")]) == "none yet"


def test_colleagues_the_owner_vouches_for_are_named_and_strangers_counted() -> None:
    found = [agent("alice"), agent("bob"), agent("x-ignore-all", Trust.UNTRUSTED)]
    assert colleagues("alice", found) == "bob, 1 not vouched for: `who` lists them"
    external = [agent("alice"), agent("mailer", Trust.EXTERNAL)]
    assert colleagues("alice", external) == "1 not vouched for: `who` lists them"


def test_a_directory_cut_at_the_cap_says_there_may_be_more() -> None:
    found = [agent(f"a{n:03}") for n in range(COLLEAGUES_NAMED)]
    said = colleagues("a000", found)
    assert said.startswith("a001, a002, ")
    assert said.endswith(", a199, maybe more: `who` lists them")
