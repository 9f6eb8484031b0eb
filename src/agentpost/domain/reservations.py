"""File reservations: what a reserved path may be, when two of them overlap, who conflicts.

A reservation names a path or a git-style glob (wildmatch: `*`, `?`, `[…]`, `**`) relative to
the project root, anchored there (`*.py` is the top folder's Python files, `**/*.py` every one),
and a plain path covers everything under it when it is a folder. Two patterns overlap when either
matches the other as a path, or a tracked file matches both; without the list of tracked files
(over the network) only the first rule is asked. How a glob matches: domain.wildmatch.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentpost.domain.errors import invalid
from agentpost.domain.limits import (
    check_cap,
    check_seconds,
    check_text,
    is_one_line,
    quoted,
    too_large,
)
from agentpost.domain.models import Trust, trust_read
from agentpost.domain.wildmatch import Glob

MAX_PATH_CHARS = 1024
MAX_PATHS = 100
"""Paths per call: a reservation is a claim on what an agent is about to edit, not on a tree."""
MAX_LIVE = 2 * MAX_PATHS
"""Live reservations per agent, in every project: another agent's every reserve is checked
against each of them, so one agent holding thousands would slow every claim of the project."""
MAX_REASON_CHARS = 1000
MAX_TTL_S = 7 * 24 * 3600.0
DEFAULT_TTL_S = 3600.0

_GLOB = re.compile(r"[*?\[]")
_DRIVE = re.compile(r"^[A-Za-z]:")


# -- patterns -------------------------------------------------------------------------------------


def spelled(path: str) -> str:
    """A path in the one Unicode spelling claims are compared in (NFC): macOS writes `é` as
    `e` and a combining accent, most systems as one code point, and to a user both name one
    file. Case is kept: git and Linux tell `README.md` and `readme.md` apart."""
    return unicodedata.normalize("NFC", path)


def normalise_path(path: str) -> str:
    """The one spelling of a reserved path: `./src//a/` and `src/a` are the same claim, and so
    are its NFC and NFD forms (`spelled`).

    Refused (`invalid_argument`): empty, absolute, escaping the root with `..` (or undoing a
    glob with it, which would narrow the claim), backslashes (git paths use `/`), control
    characters (C1 too) or line breaks (`\u2028` too: a path is shown on one line of another
    agent's listing), or over `MAX_PATH_CHARS`.
    """
    if not isinstance(path, str):
        raise invalid("a reserved path is a string", path=quoted(path))
    text = spelled(path.strip())
    if not text:
        raise invalid("a reserved path may not be empty")
    if len(text) > MAX_PATH_CHARS:
        raise invalid(f"a reserved path is at most {MAX_PATH_CHARS} characters", path=quoted(text))
    if not is_one_line(text) or any(unicodedata.category(c) == "Cc" for c in text):
        raise invalid(
            "a reserved path may not contain control characters or line breaks", path=text
        )
    if "\\" in text:
        raise invalid("a reserved path uses `/` between folders, never `\\`", path=text)
    if text.startswith(("/", "~/")) or text == "~" or _DRIVE.match(text):
        raise invalid(
            "a reserved path is relative to the project root (`src/app.py`), not absolute",
            path=text,
        )
    parts: list[str] = []
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise invalid("a reserved path may not leave the project root with `..`", path=text)
            if is_glob(parts[-1]):  # `src/**/..` is src and every folder in it, not `src`
                raise invalid("`..` may not follow a glob: name the folder it means", path=text)
            parts.pop()
            continue
        parts.append(part)
    if not parts:
        raise invalid("a reserved path must name something below the project root", path=text)
    return "/".join(parts)


def check_paths(paths: Sequence[str] | str) -> list[str]:
    """The normalised paths of one call, duplicates dropped, in the order given."""
    if isinstance(paths, str):
        paths = [paths]
    if not paths:
        raise invalid("name at least one path")
    if len(paths) > MAX_PATHS:
        raise invalid(f"at most {MAX_PATHS} paths per call", count=len(paths))
    return list(dict.fromkeys(normalise_path(p) for p in paths))


def check_ttl(ttl_s: float) -> float:
    return check_seconds(ttl_s, "ttl_s", at_most=MAX_TTL_S)


def check_reason(reason: str | None) -> str:
    if reason is None:
        return ""
    check_text(reason, "reason")
    if len(reason) > MAX_REASON_CHARS:
        raise too_large("a reason", len(reason), MAX_REASON_CHARS, "characters")
    return reason


def check_ids(ids: Sequence[str]) -> list[str]:
    """Reservation ids of one call, duplicates dropped."""
    if isinstance(ids, str) or len(ids) > MAX_PATHS:
        raise invalid(f"ids is a list of at most {MAX_PATHS} reservation ids")
    if not all(isinstance(i, str) for i in ids):
        raise invalid("reservation ids are strings")
    return list(dict.fromkeys(ids))


def check_room(holding: int, adding: int) -> None:
    """Refuse (`conflict`, `details.limit`) a call that would leave the agent holding more
    than `MAX_LIVE` live reservations: `holding` now, `adding` new ones (renewals are none)."""
    check_cap(
        holding,
        MAX_LIVE,
        f"an agent holds at most {MAX_LIVE} live reservations; you hold {holding} and asked "
        f"for {adding} more: release some first",
        adding=adding,
    )


def check_claims_taken_along(holding: int, name: str) -> None:
    """Refuse (`conflict`, `details.limit`) a rename that would leave `name` holding more than
    `MAX_LIVE` live reservations: the session's own, taken along, and those `name` still held
    unreleased, which come alive again with a session of it."""
    check_cap(
        holding,
        MAX_LIVE,
        f"{name!r} would hold {holding} live reservations with the ones this session "
        f"takes along, over the {MAX_LIVE} an agent may hold: release some first",
        adding=0,
    )


def is_glob(path: str) -> bool:
    return _GLOB.search(path) is not None


_COMPILED: dict[str, Glob] = {}
_MAX_COMPILED = 4096


def _compiled(pattern: str) -> Glob:
    found = _COMPILED.get(pattern)
    if found is None:
        if len(_COMPILED) >= _MAX_COMPILED:
            _COMPILED.clear()
        found = _COMPILED[pattern] = Glob.compile(pattern)
    return found


def matches(pattern: str, path: str) -> bool:
    """`path` (a file or folder, relative to the root) is covered by `pattern`."""
    return pattern == path or _compiled(pattern).match(path)


OVERLAP_BUDGET = 4_000_000
"""Characters the overlap checks of one call may read, about a microsecond each. Two globs of
1,024 characters can each keep the other's automaton alive to its last character, so 100 of
them against another agent's 100 read 20 million (half a minute on a worker thread, one of a
small pool every request shares); a budget bounds that to a few seconds."""


@dataclass(slots=True)
class Budget:
    """What is left of the characters a call's overlap checks may read (`OVERLAP_BUDGET`)."""

    left: int


def _covers(pattern: str, path: str, budget: Budget) -> bool | None:
    """`matches`, within the budget (what it reads is taken from it); None when that ran out
    before the answer."""
    if pattern == path:
        return True
    found, read = _compiled(pattern).scan(path, max(budget.left, 0))
    budget.left -= read + 1
    return found


Tracked = Callable[[str], Sequence[str]]
"""The tracked files a pattern matches (looked up once per pattern and call)."""


def no_tracked_files(pattern: str) -> Sequence[str]:
    return ()


def tracked_matcher(files: Iterable[str]) -> Tracked:
    """Tracked files as `overlaps` asks for them: those each pattern matches, each found once.

    Only the files that begin with a pattern's text before its first wildcard are matched
    against it (found by bisection in the sorted list), as no other can match: in a repository
    of 50,000 files, 200 claims of folders and files are otherwise seconds each call."""
    listed = sorted(spelled(f) for f in files)
    found: dict[str, tuple[str, ...]] = {}

    def matching(pattern: str) -> Sequence[str]:
        if pattern not in found:
            prefix = _GLOB.split(pattern, maxsplit=1)[0]
            candidates = []
            for file in listed[bisect_left(listed, prefix) :]:
                if not file.startswith(prefix):
                    break
                candidates.append(file)
            found[pattern] = tuple(f for f in candidates if matches(pattern, f))
        return found[pattern]

    return matching


def overlaps(
    a: str, b: str, tracked: Tracked = no_tracked_files, budget: Budget | None = None
) -> bool:
    """Two normalised patterns claim something in common: either matches the other as a path,
    or a tracked file matches both. Symmetric; every pattern overlaps itself.

    With a `budget`, a pair it runs out on counts as overlapping: a conflict the caller can
    read (and retry with shorter patterns) is safe for an advisory claim, where a pair granted
    unchecked would not be. Plain paths are compared without it: that is one `startswith`."""
    if a == b:
        return True
    if not (is_glob(a) or is_glob(b)):
        # Two plain paths share a file only when one is under the other.
        return b.startswith(a + "/") or a.startswith(b + "/")
    if budget is None:
        if matches(a, b) or matches(b, a):
            return True
    else:
        for pattern, path in ((a, b), (b, a)):
            if _covers(pattern, path, budget) is not False:
                return True
    few, other = sorted((a, b), key=lambda p: len(tracked(p)))
    return any(matches(other, f) for f in tracked(few))


# -- records --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reservation:
    """A live claim of `agent` on `path` in `project`, until `expires_at`."""

    id: str
    project: str
    agent: str
    path: str
    exclusive: bool
    reason: str
    created_at: float
    expires_at: float
    worktree: str | None = None
    """Where the holder works: the commit guard of that worktree lets its commits through."""
    trust: Trust = Trust.VERIFIED
    """The holder's: whether its reason is a colleague's words or a stranger's."""
    ttl_s: float | None = None
    """The ttl it was last given (reserved or renewed with): a renewal without one keeps it.
    None for a reservation made before it was recorded."""

    def own_ttl(self, now: float) -> float:
        """The ttl a renewal without one gives: the reservation's own, else never less than it
        has left (nor than the default)."""
        return self.ttl_s or max(DEFAULT_TTL_S, self.expires_at - now)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "agent": self.agent,
            "path": self.path,
            "exclusive": self.exclusive,
            "reason": self.reason,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "worktree": self.worktree,
            "trust": self.trust.value,
            "ttl_s": self.ttl_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reservation:
        return cls(
            id=data["id"],
            project=data["project"],
            agent=data["agent"],
            path=data["path"],
            exclusive=bool(data["exclusive"]),
            reason=data.get("reason") or "",
            created_at=data["created_at"],
            expires_at=data["expires_at"],
            worktree=data.get("worktree"),
            trust=trust_read(data),
            ttl_s=data.get("ttl_s"),
        )


@dataclass(frozen=True, slots=True)
class Conflict:
    """`path` was not granted: `holder` holds `held`, which overlaps it, until `expires_at`;
    `trust` is the holder's, as a listing of the reservation shows it."""

    path: str
    holder: str
    exclusive: bool
    expires_at: float
    held: str
    trust: Trust

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "holder": self.holder,
            "trust": self.trust.value,
            "exclusive": self.exclusive,
            "expires_at": self.expires_at,
            "held": self.held,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Conflict:
        return cls(
            path=data["path"],
            holder=data["holder"],
            exclusive=bool(data["exclusive"]),
            expires_at=data["expires_at"],
            held=data.get("held") or data["path"],
            trust=trust_read(data),
        )


@dataclass(frozen=True, slots=True)
class ReserveResult:
    """Per path: granted, or listed with what it conflicts with; and how long the claims hold
    besides their TTL, which the caller cannot see from where it stands: while a session of its
    agent is around. A command that reserves over HTTP speaks for its key's own session, which
    goes offline soon after the command ends; unless another session of the agent is online,
    its claims lapse then."""

    granted: list[Reservation] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    other_sessions: list[str] | None = None
    """The agent's sessions online besides the one the call spoke for: while any of them
    stays online, the claims outlive the caller's. None: not told (an older service)."""
    lapse_unheard_at: float | None = None
    """When the claims lapse, before their TTL, if no session of the agent is heard from
    again (`offline_after_s` after the last of them went offline). None: not told."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "granted": [r.to_dict() for r in self.granted],
            "conflicts": [c.to_dict() for c in self.conflicts],
            "other_sessions": self.other_sessions,
            "lapse_unheard_at": self.lapse_unheard_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReserveResult:
        others = data.get("other_sessions")
        return cls(
            granted=[Reservation.from_dict(r) for r in data["granted"]],
            conflicts=[Conflict.from_dict(c) for c in data["conflicts"]],
            other_sessions=None if others is None else [str(s) for s in others],
            lapse_unheard_at=data.get("lapse_unheard_at"),
        )

    def lapses_with_caller(self) -> bool:
        """Whether a claim was granted that lapses before its TTL unless the caller's own
        session (or another of the agent's) is heard from again: no other session of the agent
        is online to keep it."""
        lapse = self.lapse_unheard_at
        return (
            self.other_sessions == []
            and lapse is not None
            and any(r.expires_at > lapse for r in self.granted)
        )


class Listed(list[Reservation]):
    """Live reservations, oldest first, and the project they are of: the caller's own when it
    named none, which a listing then names (an empty one included)."""

    def __init__(self, project: str | None, found: Iterable[Reservation] = ()) -> None:
        super().__init__(found)
        self.project = project
        """None: not told (an older service)."""


@dataclass(frozen=True, slots=True)
class ReservationsChanged:
    """What a renewal or a release did: the caller's reservations it changed, and the ids or
    paths that named none of the caller's live ones (another agent's among them)."""

    reservations: list[Reservation] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reservations": [r.to_dict() for r in self.reservations],
            "not_found": list(self.not_found),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReservationsChanged:
        return cls(
            reservations=[Reservation.from_dict(r) for r in data["reservations"]],
            not_found=[str(x) for x in data["not_found"]],
        )


# -- rules ----------------------------------------------------------------------------------------


def conflicts_with(
    agent: str,
    path: str,
    exclusive: bool,
    held: Iterable[Reservation],
    tracked: Tracked = no_tracked_files,
    known: Mapping[str, bool] | None = None,
    budget: Budget | None = None,
) -> list[Reservation]:
    """The live reservations that keep `agent` from reserving `path`: another agent's that
    overlap it, when either side is exclusive. Shared ones coexist; one's own never conflict.
    `known`: whether `path` overlaps a reservation, by its id, where that was worked out
    already (`overlapping`); the others are checked within `budget` (see `overlaps`)."""

    def overlapping_it(r: Reservation) -> bool:
        found = None if known is None else known.get(r.id)
        return overlaps(path, r.path, tracked, budget) if found is None else found

    return [
        r for r in held if r.agent != agent and (exclusive or r.exclusive) and overlapping_it(r)
    ]


def overlapping(
    agent: str,
    paths: Iterable[str],
    held: Iterable[Reservation],
    tracked: Tracked,
    budget: Budget | None = None,
) -> dict[str, dict[str, bool]]:
    """For each of `paths`, whether it overlaps each other agent's reservation of `held`, by
    the reservation's id: what `conflicts_with` is then told it `known`. The shortest pairs
    are checked first, so that what runs out of `budget` is the longest patterns' checks."""
    others = [r for r in held if r.agent != agent]
    found: dict[str, dict[str, bool]] = {p: {} for p in paths}
    pairs = sorted(
        ((p, r) for p in found for r in others), key=lambda x: len(x[0]) + len(x[1].path)
    )
    for path, r in pairs:
        found[path][r.id] = overlaps(path, r.path, tracked, budget)
    return found


def held_against(
    paths: Iterable[str],
    held: Iterable[Reservation],
    *,
    agent: str | None,
    worktree: str | None,
) -> list[tuple[str, Reservation]]:
    """What the commit guard refuses: each staged path another agent holds exclusively. Yours
    are those of `agent`; only when the committer's agent is unknown (None) are they those
    reserved from `worktree`, whoever's name they carry: two agents may share one worktree."""
    if agent is not None:
        others = [r for r in held if r.exclusive and r.agent != agent]
    else:
        others = [r for r in held if r.exclusive and (worktree is None or r.worktree != worktree)]
    return [(p, r) for p in paths for r in others if matches(r.path, spelled(p))]
