"""Identifiers sort by creation time, so a listing by id is a listing by age."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agentpost.domain.ids import is_message_id, message_id, session_id, sortable_id

ID = re.compile(r"^[a-z]+_[0-9a-hjkmnp-tv-z]{26}$")


def test_ids_carry_their_prefix_and_a_fixed_length_body() -> None:
    assert ID.match(message_id(1.0))
    assert ID.match(session_id(1.0))
    assert message_id(1.0).startswith("m_")
    assert session_id(1.0).startswith("s_")


@given(
    st.floats(min_value=0, max_value=2**40 / 1000, allow_nan=False),
    st.floats(min_value=0.002, max_value=1e6, allow_nan=False),
)
def test_a_later_id_sorts_after_an_earlier_one(earlier: float, gap: float) -> None:
    # Ids count whole milliseconds of float seconds: two times a full millisecond apart can
    # still truncate to the same one after rounding, so the property is stated for 2 ms.
    assert message_id(earlier) < message_id(earlier + gap)


def test_ids_made_in_the_same_millisecond_are_distinct_and_in_the_order_made() -> None:
    ids = [sortable_id("r", now=1_800_000_000.0) for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert len({i[:12] for i in ids}) == 1  # same time part, different random part
    assert ids == sorted(ids)


def test_without_a_time_an_id_takes_the_current_one() -> None:
    before = message_id(0.0)
    assert message_id() > before


def test_the_shape_of_a_message_id_is_told_from_free_text() -> None:
    assert is_message_id(message_id())
    assert not is_message_id(session_id())
    assert not is_message_id("m_release")
    assert not is_message_id(message_id() + "x")
    assert not is_message_id(message_id().upper())
