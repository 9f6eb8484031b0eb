"""Names of agents and channels: one grammar, reserved words, readable slugs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import QUOTED_CHARS
from agentpost.domain.names import (
    NAME_PATTERN,
    RESERVED,
    check_channel,
    check_name,
    is_valid_name,
    slugify,
)


@pytest.mark.parametrize(
    "name", ["a", "0", "alice", "shop-main", "build.bot_2", "x" * 64, "9lives"]
)
def test_names_of_the_grammar_are_accepted_as_they_are(name: str) -> None:
    assert is_valid_name(name)
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "Alice", "-lead", ".hidden", "_x", "a b", "ä", "a/b", "x" * 65, "#general", "a\n"],
)
def test_names_outside_the_grammar_are_invalid_arguments(name: str) -> None:
    assert not is_valid_name(name)
    with pytest.raises(AgentpostError) as caught:
        check_name(name)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert NAME_PATTERN in caught.value.message


def test_an_over_long_name_is_refused_quoting_only_a_prefix_of_it() -> None:
    with pytest.raises(AgentpostError) as caught:
        check_name("x" * 100_000)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert NAME_PATTERN in caught.value.message
    assert len(caught.value.message) < 200
    assert caught.value.details == {"name": "x" * QUOTED_CHARS + "…"}


def test_a_name_that_is_not_text_is_an_invalid_argument() -> None:
    with pytest.raises(AgentpostError) as caught:
        check_name(42)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_owner_system_and_agentpost_are_reserved() -> None:
    assert frozenset({"owner", "system", "agentpost"}) == RESERVED


@pytest.mark.parametrize(("given_", "bare"), [("#general", "general"), ("ops", "ops")])
def test_a_channel_is_named_with_or_without_its_hash(given_: str, bare: str) -> None:
    assert check_channel(given_) == bare


@pytest.mark.parametrize("channel", ["#", "##ops", "#Ops", "# ops", ""])
def test_a_channel_outside_the_grammar_is_an_invalid_argument(channel: str) -> None:
    with pytest.raises(AgentpostError) as caught:
        check_channel(channel)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("My Project", "my-project"),
        ("shop-feature/Login_Form", "shop-feature-login_form"),
        ("--weird--", "weird"),
        ("a   b", "a-b"),
        ("Ünïcode Straße", "unicode-strasse"),
        ("Café Crème", "cafe-creme"),
        ("Smørrebrød", "smorrebrod"),  # letters with no accent to take off
        ("Łódź app", "lodz-app"),
        ("日本語", "wgv71a119e"),  # punycode: no Latin spelling to take
        ("中文", "fiq228c"),
        ("", "agent"),
        ("///", "agent"),
        ("v1.2", "v1.2"),
    ],
)
def test_slugify_makes_a_readable_name_from_free_text(text: str, slug: str) -> None:
    assert slugify(text) == slug


def test_a_long_slug_is_cut_to_a_name_that_ends_in_its_texts_hash() -> None:
    slug = slugify("a" * 63 + "-tail")
    assert len(slug) <= 64
    assert is_valid_name(slug)
    assert slug.startswith("a" * 57 + "-")
    assert slugify("a" * 63 + "-tail") == slug  # stable


def test_long_names_that_begin_alike_stay_apart() -> None:
    """Two branches with one long prefix are two agents, not one."""
    prefix = "shop-feature/rework-the-checkout-flow-for-the-new-payment-provider-"
    assert slugify(prefix + "step-1") != slugify(prefix + "step-2")
    assert slugify("a" * 64 + "日本") != slugify("a" * 64 + "中文")


@given(st.text(max_size=200))
def test_every_slug_is_a_valid_name(text: str) -> None:
    assert is_valid_name(slugify(text))


def test_folders_in_a_script_with_no_latin_spelling_keep_apart() -> None:
    names = ["日本語", "中文", "한국어", "русский", "ελληνικά", "עברית"]
    slugs = [slugify(name) for name in names]
    assert len(set(slugs)) == len(names)
    assert "agent" not in slugs
