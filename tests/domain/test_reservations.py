"""Reserved paths: what may be reserved, how it is spelled, when two claims overlap, and who
conflicts with whom."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import QUOTED_CHARS
from agentpost.domain.models import Trust
from agentpost.domain.reservations import (
    DEFAULT_TTL_S,
    MAX_PATH_CHARS,
    MAX_PATHS,
    MAX_TTL_S,
    OVERLAP_BUDGET,
    Budget,
    Conflict,
    Reservation,
    ReservationsChanged,
    ReserveResult,
    check_paths,
    check_reason,
    check_ttl,
    conflicts_with,
    held_against,
    matches,
    normalise_path,
    overlapping,
    overlaps,
    tracked_matcher,
)

TRACKED = tracked_matcher(
    ["README.md", "docs/guide.md", "src/a/b.py", "src/a/c.txt", "src/main.py", "tests/test_a.py"]
)


def held(
    agent: str, path: str, *, exclusive: bool = True, worktree: str | None = None
) -> Reservation:
    return Reservation(
        id=f"r_{agent}_{path}",
        project="shop",
        agent=agent,
        path=path,
        exclusive=exclusive,
        reason="",
        created_at=1.0,
        expires_at=2.0,
        worktree=worktree,
    )


# -- spelling -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_path", "spelled"),
    [
        ("src/a.py", "src/a.py"),
        ("./src/a.py", "src/a.py"),
        ("src//a.py", "src/a.py"),
        ("src/", "src"),
        ("  src/*.py ", "src/*.py"),
        ("src/a/../b.py", "src/b.py"),
        ("src/./**", "src/**"),
        ("#notes", "#notes"),
    ],
)
def test_paths_are_spelled_one_way(given_path: str, spelled: str) -> None:
    assert normalise_path(given_path) == spelled


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        ".",
        "./",
        "/etc/passwd",
        "/work/main/src/a.py",
        "~/x",
        "C:/src/a.py",
        "..",
        "../other/a.py",
        "src/../../a.py",
        "src/**/../a.py",  # not `src/a.py`: `**` may be no folder, and `src/..` is the root
        "*/../a.py",
        "src\\a.py",
        "src/a\n.py",
        "src/\x00a",
        "src/a\u2028- docs/** [exclusive] owner",  # a line of its own in a listing
        "src/a\x85b",  # NEL: C1, and a line break too
        "src/a\x9b2Jb",  # CSI: C1
        "x" * (MAX_PATH_CHARS + 1),
    ],
)
def test_absolute_escaping_empty_or_odd_paths_are_invalid(bad: str) -> None:
    with pytest.raises(AgentpostError) as caught:
        normalise_path(bad)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_an_over_long_path_is_refused_quoting_only_a_prefix_of_it() -> None:
    with pytest.raises(AgentpostError) as caught:
        normalise_path("x" * 100_000)
    assert caught.value.details == {"path": "x" * QUOTED_CHARS + "…"}


def test_a_call_names_at_least_one_and_at_most_max_paths() -> None:
    for bad in ([], [f"f{i}" for i in range(MAX_PATHS + 1)]):
        with pytest.raises(AgentpostError) as caught:
            check_paths(bad)
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert len(check_paths([f"f{i}" for i in range(MAX_PATHS)])) == MAX_PATHS


def test_duplicates_in_one_call_count_once_in_the_order_given() -> None:
    assert check_paths(["b", "./a", "a", "b/"]) == ["b", "a"]
    assert check_paths("src/a.py") == ["src/a.py"]


@pytest.mark.parametrize("ttl", [0, -1, float("inf"), float("nan"), MAX_TTL_S + 1, True, "60"])
def test_a_ttl_is_positive_finite_and_bounded(ttl: object) -> None:
    with pytest.raises(AgentpostError) as caught:
        check_ttl(ttl)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_a_reason_is_short_text() -> None:
    assert check_reason(None) == ""
    assert check_reason("fixing the parser") == "fixing the parser"
    assert check_reason("x" * 1000) == "x" * 1000
    for bad, code in (("x" * 1001, ErrorCode.TOO_LARGE), ("a\x00b", ErrorCode.INVALID_ARGUMENT)):
        with pytest.raises(AgentpostError) as refused:
            check_reason(bad)
        assert refused.value.code is code


# -- matching -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "covered"),
    [
        ("src/a/b.py", "src/a/b.py", True),
        ("src", "src/a/b.py", True),  # a folder covers what is in it
        ("src/a", "src/ab.py", False),
        ("src/**", "src/a/b.py", True),
        ("src/*.py", "src/main.py", True),
        ("src/*.py", "src/a/b.py", False),
        ("*.md", "README.md", True),
        ("*.md", "docs/guide.md", False),  # anchored at the project root
        ("**/*.md", "docs/guide.md", True),
        ("docs/*", "src/a.py", False),
        ("src/[ab].py", "src/a.py", True),
        ("#notes", "#notes", True),
        ("!x", "!x", True),
    ],
)
def test_patterns_match_paths_from_the_project_root(pattern: str, path: str, covered: bool) -> None:
    assert matches(pattern, path) is covered


# -- overlap --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("src/**", "src/a/b.py"),  # the issue's own case
        ("src/a/b.py", "src/a/b.py"),
        ("src", "src/a/b.py"),
        ("src/*", "src/main.py"),
        ("docs/*", "docs/*.md"),
        ("src/[ab].py", "src/[ab].py"),  # identical patterns, even one that does not match itself
        ("**", "anything/at/all"),
    ],
)
def test_overlapping_patterns_overlap_by_their_text_alone(a: str, b: str) -> None:
    assert overlaps(a, b)
    assert overlaps(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("docs/*", "src/*"),  # the issue's own case
        ("src/a.py", "src/b.py"),
        ("src/a", "src/ab"),
        ("*.md", "src/*.py"),
        ("src/a/b.py", "src/a/c.py"),
    ],
)
def test_disjoint_patterns_do_not_overlap(a: str, b: str) -> None:
    assert not overlaps(a, b, TRACKED)
    assert not overlaps(b, a, TRACKED)


def test_two_globs_overlap_through_a_tracked_file_that_matches_both() -> None:
    # Neither matches the other as a path; `src/a/b.py` is matched by both.
    assert not overlaps("**/*.py", "src/a/**")
    assert overlaps("**/*.py", "src/a/**", TRACKED)
    assert overlaps("src/a/**", "**/*.py", TRACKED)


def test_globs_that_share_no_tracked_file_do_not_overlap() -> None:
    assert not overlaps("**/*.txt", "tests/**", TRACKED)


def test_a_folder_and_a_glob_overlap_through_a_tracked_file_in_the_folder() -> None:
    assert not overlaps("src/a", "*/a/b.py")
    assert overlaps("src/a", "*/a/b.py", TRACKED)


segment = st.text(alphabet="abcxyz._-*?", min_size=1, max_size=5).filter(
    lambda s: s not in (".", "..")
)
patterns = st.lists(segment, min_size=1, max_size=4).map("/".join)
plain = st.lists(
    st.text(alphabet="abcxyz._-", min_size=1, max_size=5).filter(lambda s: s not in (".", "..")),
    min_size=1,
    max_size=4,
).map("/".join)


files = st.lists(
    st.lists(st.text(alphabet="abc.-", min_size=1, max_size=3), min_size=1, max_size=4).map(
        "/".join
    ),
    max_size=30,
)


@given(st.one_of(patterns, plain, st.just("**")), files)
def test_the_tracked_files_of_a_pattern_are_every_file_it_matches(
    pattern: str, tracked: list[str]
) -> None:
    """Only files beginning with the pattern's text before its first wildcard are tried."""
    found = tracked_matcher(tracked)(pattern)
    assert sorted(found) == sorted(f for f in tracked if matches(pattern, f))


def test_only_the_files_under_a_patterns_literal_start_are_matched_against_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a repository of 50,000 files, 200 claims of folders and files were matched each
    against every file: 20 s of a reserve call. Here every match is counted."""
    from agentpost.domain import reservations as rules

    tried: list[str] = []
    real = rules.matches

    def counted(pattern: str, path: str) -> bool:
        tried.append(path)
        return real(pattern, path)

    monkeypatch.setattr(rules, "matches", counted)
    tracked = tracked_matcher(
        [f"{d}/f{n}.py" for d in ("docs", "src/a", "src/b") for n in range(5)]
    )
    assert tracked("src/a/*.py") == tuple(f"src/a/f{n}.py" for n in range(5))
    assert tried == [f"src/a/f{n}.py" for n in range(5)]
    assert tracked("src/b") == tuple(f"src/b/f{n}.py" for n in range(5))
    assert tracked("docs/f1?py") == ("docs/f1.py",)
    assert len(tracked("**/f1.py")) == 3


@given(patterns, patterns)
def test_overlap_is_symmetric(a: str, b: str) -> None:
    assert overlaps(a, b) == overlaps(b, a)
    assert overlaps(a, b, TRACKED) == overlaps(b, a, TRACKED)


@given(patterns)
def test_every_pattern_overlaps_itself(a: str) -> None:
    assert overlaps(a, a)


@given(plain)
def test_a_path_is_covered_by_itself_and_by_every_folder_above_it(path: str) -> None:
    assert matches(path, path)
    parts = path.split("/")
    for depth in range(1, len(parts)):
        assert overlaps("/".join(parts[:depth]), path)


# -- the budget of overlap checks -----------------------------------------------------------------

LONG_A = "*?" * 500 + "a"
"""Against LONG_B's text, and LONG_B against its, the automaton lives to the last character:
1,001 characters read each way to learn that they do not overlap."""
LONG_B = "*?" * 500 + "b"


def test_a_pair_the_budget_runs_out_on_counts_as_overlapping() -> None:
    assert not overlaps(LONG_A, LONG_B)
    budget = Budget(1000)
    assert overlaps(LONG_A, LONG_B, budget=budget)
    assert overlaps(LONG_B, LONG_A, budget=Budget(1000))
    assert budget.left <= 0


def test_a_pair_decided_within_the_budget_gets_its_exact_answer() -> None:
    budget = Budget(OVERLAP_BUDGET)
    assert not overlaps(LONG_A, LONG_B, budget=budget)
    assert OVERLAP_BUDGET - budget.left == 2 * (len(LONG_B) + 1)


@given(patterns, patterns)
def test_a_budget_that_lasts_changes_no_answer(a: str, b: str) -> None:
    assert overlaps(a, b, TRACKED, Budget(OVERLAP_BUDGET)) == overlaps(a, b, TRACKED)


@given(plain, plain)
def test_plain_paths_overlap_when_one_is_under_the_other_at_no_cost(a: str, b: str) -> None:
    budget = Budget(0)
    assert overlaps(a, b, budget=budget) == (matches(a, b) or matches(b, a))
    assert budget.left == 0


def test_the_shortest_pairs_are_checked_first_and_only_the_longest_run_out() -> None:
    theirs = [held("alice", LONG_B), held("alice", "docs/*")]
    found = overlapping("bob", [LONG_A, "src/*"], theirs, TRACKED, Budget(100))
    assert found == {
        LONG_A: {f"r_alice_{LONG_B}": True, "r_alice_docs/*": False},
        "src/*": {f"r_alice_{LONG_B}": False, "r_alice_docs/*": False},
    }


def test_conflicts_are_checked_within_the_budget_given() -> None:
    theirs = [held("alice", LONG_B)]
    assert conflicts_with("bob", LONG_A, True, theirs) == []
    assert conflicts_with("bob", LONG_A, True, theirs, budget=Budget(1000)) == theirs


# -- who conflicts --------------------------------------------------------------------------------


def test_shared_reservations_coexist() -> None:
    assert (
        conflicts_with("alice", "src/**", False, [held("bob", "src/a.py", exclusive=False)]) == []
    )


def test_an_exclusive_request_conflicts_with_anothers_shared_reservation() -> None:
    theirs = held("bob", "src/a.py", exclusive=False)
    assert conflicts_with("alice", "src/**", True, [theirs]) == [theirs]


def test_a_shared_request_conflicts_with_anothers_exclusive_reservation() -> None:
    theirs = held("bob", "src/a.py")
    assert conflicts_with("alice", "src/a.py", False, [theirs]) == [theirs]


def test_an_agents_own_reservations_never_conflict_with_it() -> None:
    assert conflicts_with("alice", "src/**", True, [held("alice", "src/a.py")]) == []


def test_reservations_that_do_not_overlap_do_not_conflict() -> None:
    assert conflicts_with("alice", "docs/*", True, [held("bob", "src/*")], TRACKED) == []


# -- the commit guard -----------------------------------------------------------------------------


def test_the_guard_holds_staged_paths_to_other_agents_exclusive_reservations() -> None:
    reservations = [
        held("bob", "src/**"),
        held("carol", "docs/*", exclusive=False),
        held("me", "README.md", worktree="/w/elsewhere"),
    ]
    staged = ["src/a/b.py", "docs/guide.md", "README.md", "other.txt"]
    refused = held_against(staged, reservations, agent="me", worktree="/w/here")
    assert [(path, r.agent) for path, r in refused] == [("src/a/b.py", "bob")]


def test_a_known_agent_is_held_to_another_agents_reservation_from_its_own_worktree() -> None:
    reservations = [held("alice", "tests/**", worktree="/w/here")]
    refused = held_against(["tests/test_a.py"], reservations, agent="me", worktree="/w/here")
    assert [(path, r.agent) for path, r in refused] == [("tests/test_a.py", "alice")]


def test_without_a_name_only_the_worktree_says_what_is_yours() -> None:
    reservations = [
        held("me", "README.md", worktree="/w/elsewhere"),
        held("someone", "tests/**", worktree="/w/here"),
    ]
    staged = ["README.md", "tests/test_a.py"]
    refused = held_against(staged, reservations, agent=None, worktree="/w/here")
    assert [(path, r.agent) for path, r in refused] == [("README.md", "me")]


# -- Unicode spellings -----------------------------------------------------------------------------

NFC = "caf\u00e9.py"  # é as one code point, as most systems write it
NFD = "cafe\u0301.py"  # e and a combining accent, as macOS writes file names


def test_a_path_spelled_in_nfd_is_the_same_claim_as_in_nfc() -> None:
    assert normalise_path(NFD) == NFC
    assert check_paths([NFC, f"./{NFD}"]) == [NFC]


def test_the_spelling_of_a_tracked_or_staged_file_does_not_hide_it_from_a_claim() -> None:
    tracked = tracked_matcher([f"src/{NFD}", "src/other.py"])
    assert overlaps(normalise_path("src/*.py"), normalise_path("src/caf*"), tracked)
    refused = held_against([f"src/{NFD}"], [held("bob", f"src/{NFC}")], agent="me", worktree=None)
    assert [(path, r.agent) for path, r in refused] == [(f"src/{NFD}", "bob")]


def test_case_tells_paths_apart_as_git_and_linux_do() -> None:
    assert check_paths(["README.md", "readme.md"]) == ["README.md", "readme.md"]
    assert not overlaps("README.md", "readme.md")


# -- the records as JSON --------------------------------------------------------------------------


def test_answers_read_back_from_their_json() -> None:
    mine = held("alice", "src/**", worktree="/w")
    result = ReserveResult(
        [mine], [Conflict("docs/*", "bob", True, 9.0, "docs/**", Trust.UNTRUSTED)]
    )
    assert ReserveResult.from_dict(result.to_dict()) == result
    changed = ReservationsChanged([mine], ["r_gone"])
    assert ReservationsChanged.from_dict(changed.to_dict()) == changed


def test_a_reservation_without_a_recorded_ttl_is_renewed_for_no_less_than_it_has_left() -> None:
    old = Reservation("r_1", "shop", "alice", "a", True, "", 0.0, 1000.0 + 2 * 3600)
    assert old.own_ttl(now=1000.0) == 2 * 3600
    assert old.own_ttl(now=1000.0 + 2 * 3600 - 60) == DEFAULT_TTL_S
    assert replace(old, ttl_s=60.0).own_ttl(now=1000.0) == 60.0
