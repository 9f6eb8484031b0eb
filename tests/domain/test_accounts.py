"""Profile fields: each refusal names the field and its limit, whatever was sent."""

from __future__ import annotations

import json

import pytest

from agentpost.domain.accounts import MAX_CAPABILITY, check_capabilities
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import QUOTED_CHARS


def refused(values: object) -> AgentpostError:
    with pytest.raises(AgentpostError) as caught:
        check_capabilities(values)
    return caught.value


def test_an_over_long_capability_is_refused_naming_the_limit_and_quoting_only_a_prefix() -> None:
    err = refused(["python", "c" * 100_000])
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert f"a capability is at most {MAX_CAPABILITY} characters" in err.message
    assert "has 100000" in err.message
    assert err.details == {"capability": "c" * QUOTED_CHARS + "…", "limit": MAX_CAPABILITY}
    assert len(err.message) < 200
    assert len(json.dumps(err.to_dict())) < 400


def test_a_capability_at_the_limit_is_kept() -> None:
    assert check_capabilities(["c" * MAX_CAPABILITY]) == ["c" * MAX_CAPABILITY]


@pytest.mark.parametrize(
    "bad", ["", "   ", "a\tb", "line\nbreak" + "x" * 100_000, {"k": "v" * 9999}]
)
def test_a_malformed_capability_is_refused_quoting_only_a_prefix(bad: object) -> None:
    err = refused([bad])
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert "capability" in err.message
    assert len(err.details["capability"]) <= QUOTED_CHARS + 1
