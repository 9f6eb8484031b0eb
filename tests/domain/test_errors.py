"""Errors: one list of stable codes, each refusal names its code first."""

from __future__ import annotations

from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid, not_found


def test_the_codes_are_the_design_table() -> None:
    assert {code.value for code in ErrorCode} == {
        "invalid_argument",
        "unauthenticated",
        "forbidden",
        "not_found",
        "unknown_recipient",
        "conflict",
        "gone",
        "too_large",
        "rate_limited",
        "inbox_full",
        "locked_out",
        "unavailable",
    }


def test_the_shortcuts_carry_their_codes_and_details() -> None:
    assert invalid("bad", field="x").code is ErrorCode.INVALID_ARGUMENT
    assert not_found("none").code is ErrorCode.NOT_FOUND
    assert forbidden("no").code is ErrorCode.FORBIDDEN
    assert invalid("bad", field="x").details == {"field": "x"}
    assert not_found("none").to_dict() == {"code": "not_found", "message": "none"}


def test_a_refusal_can_say_when_to_try_again() -> None:
    error = AgentpostError(ErrorCode.RATE_LIMITED, "slow down", retry_after_s=12.5)
    assert str(error) == "rate_limited: slow down"
    assert error.retry_after_s == 12.5
    assert error.to_dict() == {
        "code": "rate_limited",
        "message": "slow down",
        "retry_after_s": 12.5,
    }
