"""Git-style globs: the same answers as git's gitignore rules (with `pathspec`, which compiles them
to regular expressions, as the reference), in time linear in the path whatever the pattern."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from agentpost.domain.wildmatch import Glob


def reference(pattern: str, path: str) -> bool:
    """What git's gitignore rules say, anchored at the root (a leading `/`)."""
    return GitIgnoreSpecPattern("/" + pattern).match_file(path) is not None


segment = st.one_of(
    st.just("**"),
    st.text(alphabet="ab*?", min_size=1, max_size=4),
)
patterns = st.lists(segment, min_size=1, max_size=4).map("/".join)
names = st.lists(st.text(alphabet="ab", min_size=1, max_size=4), min_size=1, max_size=5).map(
    "/".join
)


@settings(max_examples=2000)
@given(patterns, names)
@example("**/a", "a")
@example("a/**/b", "a/b")
@example("a/**/b", "a/x/y/b/c")
@example("a/**", "a")
@example("*", "ab/b")
@example("**/**/a", "b/a")
@example("a/**/**/b", "a/b/b")
def test_globs_match_as_gits_gitignore_rules_do(pattern: str, path: str) -> None:
    assert Glob.compile(pattern).match(path) == reference(pattern, path)


@pytest.mark.parametrize(
    ("pattern", "path", "matched"),
    [
        ("src/[ab].py", "src/a.py", True),
        ("src/[ab].py", "src/c.py", False),
        ("src/[!ab].py", "src/c.py", True),
        ("src/[^ab].py", "src/a.py", False),
        ("[a-c]x", "bx", True),
        ("[a-c]x", "dx", False),
        ("[]a]", "]", True),
        ("a[!b]c", "a/c", False),  # a bracket never matches `/`, as in git
        ("a[", "a[", True),  # unclosed: a plain `[`
        ("[z-a]", "m", False),  # a reversed range matches nothing
        ("#notes", "#notes", True),
        ("!x", "!x", True),
    ],
)
def test_bracket_expressions_and_plain_characters(pattern: str, path: str, matched: bool) -> None:
    assert Glob.compile(pattern).match(path) is matched


@settings(max_examples=500)
@given(patterns, names, st.integers(min_value=0, max_value=25))
def test_a_scan_reads_at_most_its_limit_and_answers_as_match_or_not_at_all(
    pattern: str, path: str, limit: int
) -> None:
    glob = Glob.compile(pattern)
    found, read = glob.scan(path, limit)
    assert read <= limit
    assert found in (None, glob.match(path))
    if limit >= len(path):
        assert found is not None


@pytest.mark.parametrize(
    ("pattern", "path", "matched"),
    [
        ("**/a/" * 200 + "b", "a/" * 200 + "b", True),
        ("**/a/" * 200 + "b", "a/" * 199 + "b", False),
        ("a/**/" * 200 + "b", "a/" * 200 + "b", True),
        ("a/**/" * 200 + "b", "a/" * 199 + "x/b", False),
        ("**/a/" * 100 + "b", "x/a/" * 100 + "b", True),
        ("**/a/" * 100 + "b", "x/a/" * 100 + "y/b", False),
    ],
)
def test_patterns_of_many_double_stars_match_as_git_does(
    pattern: str, path: str, matched: bool
) -> None:
    """Each `**` is an optional group of states; they used to be skipped one at a time, for
    every character, which made such patterns 25 times slower than any other of their size.
    (The reference takes exponential time on these: the answers are git's, worked by hand.)"""
    assert Glob.compile(pattern).match(path) is matched


def test_a_pathological_pattern_takes_linear_time() -> None:
    """`*a*a*…*b` against a long name: exponential for a backtracking regular expression."""
    glob = Glob.compile("*a" * 100 + "b")
    started = time.perf_counter()
    assert not glob.match("a" * 1024)
    assert not glob.match("/".join(["a" * 100] * 10))
    assert time.perf_counter() - started < 0.5
