"""Size and shape rules: refusals carry stable codes and say what the limit is."""

from __future__ import annotations

import math

import pytest

from agentpost.domain import limits as rules
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import Limits

SMALL = Limits(max_subject_chars=10, max_body_bytes=8, max_data_bytes=12, max_wait_s=5)


def refusal(fn: object, *args: object) -> AgentpostError:
    with pytest.raises(AgentpostError) as caught:
        fn(*args)  # type: ignore[operator]
    return caught.value


def test_default_limits_are_the_design_table() -> None:
    assert Limits() == Limits(
        max_subject_chars=200,
        max_body_bytes=32768,
        max_data_bytes=65536,
        max_wait_s=300,
        max_unacked=1000,
        send_rate_per_minute=60,
    )


def test_a_body_at_the_limit_passes_and_one_byte_more_is_too_large() -> None:
    assert rules.check_body("x" * 8, SMALL) == "x" * 8
    error = refusal(rules.check_body, "x" * 9, SMALL)
    assert error.code is ErrorCode.TOO_LARGE
    assert error.message == "body is 9 bytes, over the limit of 8 bytes"
    assert error.details == {"limit": 8, "size": 9}


def test_the_body_limit_counts_utf8_bytes_not_characters() -> None:
    error = refusal(rules.check_body, "é" * 5, SMALL)  # 5 chars, 10 bytes
    assert error.code is ErrorCode.TOO_LARGE
    assert error.details["size"] == 10


def test_a_subject_over_its_limit_is_too_large_in_characters() -> None:
    assert rules.check_subject("é" * 10, SMALL) == "é" * 10
    error = refusal(rules.check_subject, "s" * 11, SMALL)
    assert error.code is ErrorCode.TOO_LARGE
    assert "11 characters, over the limit of 10 characters" in error.message


@pytest.mark.parametrize("subject", ["two\nline", "cr\rline", "ls\u2028line", "nel\x85line"])
def test_a_subject_must_be_one_line(subject: str) -> None:
    assert refusal(rules.check_subject, subject, SMALL).code is ErrorCode.INVALID_ARGUMENT


def test_data_is_stored_as_compact_json_and_none_stays_none() -> None:
    assert rules.encode_data({"a": [1, 2]}, SMALL) == '{"a":[1,2]}'
    assert rules.encode_data(None, SMALL) is None


def test_data_over_its_limit_is_too_large() -> None:
    error = refusal(rules.encode_data, {"key": "0123456789"}, SMALL)
    assert error.code is ErrorCode.TOO_LARGE
    assert error.details == {"limit": 12, "size": len('{"key":"0123456789"}')}


@pytest.mark.parametrize("data", [{1, 2}, math.nan, {"x": object()}])
def test_data_that_is_not_json_is_an_invalid_argument(data: object) -> None:
    error = refusal(rules.encode_data, data, SMALL)
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert error.message.startswith("data must be JSON")


def nested(depth: int, inner: object = 1) -> object:
    """`inner` inside `depth` levels of lists and objects, alternating."""
    value = inner
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_data_may_nest_as_deep_as_the_limit() -> None:
    assert rules.encode_data(nested(rules.MAX_DATA_DEPTH), Limits()) is not None
    assert rules.encode_data(nested(rules.MAX_DATA_DEPTH - 1, []), Limits()) is not None


@pytest.mark.parametrize(
    ("depth", "inner"),
    [(rules.MAX_DATA_DEPTH + 1, 1), (rules.MAX_DATA_DEPTH, []), (rules.MAX_DATA_DEPTH, {})],
)
def test_data_nested_one_level_deeper_is_an_invalid_argument(depth: int, inner: object) -> None:
    error = refusal(rules.encode_data, nested(depth, inner), Limits())
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert error.message == f"data nests deeper than {rules.MAX_DATA_DEPTH} levels"


def test_data_nested_far_beyond_pythons_recursion_limit_is_refused_not_crashed() -> None:
    error = refusal(rules.encode_data, nested(100_000), Limits())
    assert error.code is ErrorCode.INVALID_ARGUMENT


HALF_PAIR = "\ud800"
UNDECODABLE_BYTE = "\udcff"  # what Python makes of a byte that is not UTF-8 on a command line


@pytest.mark.parametrize("bad", [HALF_PAIR, UNDECODABLE_BYTE])
def test_text_holding_half_a_surrogate_pair_is_an_invalid_argument(bad: str) -> None:
    for check in (
        lambda: rules.check_body(f"hi {bad}", Limits()),
        lambda: rules.check_subject(bad, Limits()),
        lambda: rules.check_text(bad, "query"),
        lambda: rules.encode_data({"note": bad}, Limits()),
        lambda: rules.encode_data({bad: 1}, Limits()),
    ):
        error = refusal(check)
        assert error.code is ErrorCode.INVALID_ARGUMENT
        assert "unpaired surrogate" in error.message


def test_a_whole_surrogate_pair_is_ordinary_text() -> None:
    assert rules.check_body("\U0001f600", Limits()) == "\U0001f600"
    assert rules.encode_data({"face": "\U0001f600"}, Limits()) == '{"face":"\U0001f600"}'


@pytest.mark.parametrize("limit", [0, -1, rules.MAX_LIMIT + 1, True, 2.0, "5"])
def test_a_page_size_outside_1_to_max_is_an_invalid_argument(limit: object) -> None:
    assert refusal(rules.check_limit, limit).code is ErrorCode.INVALID_ARGUMENT


def test_page_sizes_at_both_ends_pass() -> None:
    assert rules.check_limit(1) == 1
    assert rules.check_limit(rules.MAX_LIMIT) == rules.MAX_LIMIT


def test_a_wait_is_clamped_to_the_ceiling_never_refused() -> None:
    assert rules.check_timeout(0, SMALL) == 0.0
    assert rules.check_timeout(3, SMALL) == 3.0
    assert rules.check_timeout(10_000, SMALL) == 5.0


@pytest.mark.parametrize("timeout", [-1, True, "10", None])
def test_a_negative_or_non_numeric_wait_is_an_invalid_argument(timeout: object) -> None:
    assert refusal(rules.check_timeout, timeout, SMALL).code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("ttl", [0, -5, False, "60"])
def test_a_ttl_must_be_a_positive_number(ttl: object) -> None:
    assert refusal(rules.check_ttl, ttl).code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("ttl", [rules.MAX_MAIL_TTL_S + 1, 1e300, float("inf"), float("nan")])
def test_a_ttl_past_a_year_is_refused_naming_the_bound(ttl: float) -> None:
    """`1e300` was stored as the message's expiry, a time no clock reaches."""
    err = refusal(rules.check_ttl, ttl)
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert err.message == "ttl_s is a number of seconds above 0 and at most 31536000"
    assert rules.check_ttl(rules.MAX_MAIL_TTL_S) == 365 * 86_400


def test_no_ttl_means_none_and_a_ttl_becomes_seconds() -> None:
    assert rules.check_ttl(None) is None
    assert rules.check_ttl(30) == 30.0


def test_a_refusal_reads_code_first_and_serialises_its_details() -> None:
    error = refusal(rules.check_body, "x" * 9, SMALL)
    assert str(error).startswith("too_large: ")
    assert error.to_dict() == {
        "code": "too_large",
        "message": error.message,
        "details": {"limit": 8, "size": 9},
    }


@pytest.mark.parametrize(
    ("text", "decimal"),
    [
        ("0", True),
        ("1234", True),
        ("", False),
        ("²", False),
        ("1¹", False),
        ("٣", False),
        ("-1", False),
        (" 1", False),
    ],
)
def test_a_decimal_is_ascii_digits_only(text: str, decimal: bool) -> None:
    """`int` refuses the other digits `str.isdigit` takes, which a Latin-1 header may hold."""
    assert rules.is_decimal(text) is decimal


@pytest.mark.parametrize("text", ["", "one line", "tab\tis fine", "é ü"])
def test_one_line_is_text_without_a_break_of_any_kind(text: str) -> None:
    assert rules.is_one_line(text)


@pytest.mark.parametrize(
    "text", ["a\nb", "a\rb", "a\r\n", "a\u2028b", "a\u2029", "a\x85b", "a\x0bb"]
)
def test_any_line_break_makes_two_lines(text: str) -> None:
    assert not rules.is_one_line(text)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("short", "short"),
        ("x" * rules.QUOTED_CHARS, "x" * rules.QUOTED_CHARS),
        ("x" * (rules.QUOTED_CHARS + 1), "x" * rules.QUOTED_CHARS + "…"),
        ("é" * 100_000, "é" * rules.QUOTED_CHARS + "…"),
        (3, "3"),
        (["y" * 1000], "['" + "y" * (rules.QUOTED_CHARS - 2) + "…"),
    ],
)
def test_a_refusal_quotes_at_most_a_short_prefix_of_a_value(value: object, shown: str) -> None:
    assert rules.quoted(value) == shown


def test_an_id_longer_than_any_made_is_refused_without_being_handed_back() -> None:
    with pytest.raises(AgentpostError) as caught:
        rules.check_id("m_" + "x" * 100_000, "reply_to")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message == "reply_to must be a message id, at most 64 characters"
    assert rules.check_id("m_" + "x" * (rules.MAX_ID_CHARS - 2), "reply_to")
