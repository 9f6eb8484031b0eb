"""Git-style globs (gitignore's wildmatch, anchored at the root), matched in linear time.

A pattern is read as git reads a gitignore line that starts with `/`: `*` and `?` never cross a
`/`, `[…]` is one character of a set (`[!…]` or `[^…]` of its complement, never `/`), a whole
segment `**` is any number of folders (`**/x`, `a/**/b`) or everything inside (`a/**`), and a
pattern that matches a folder matches everything in it.

Why not a regular expression (what `pathspec` compiles to): Python's backtracking engine takes
exponential time on `*a*a*a*a*b` against a long name, and reserved paths come from any agent.
Here a pattern is a small automaton run over the path one character at a time, all its states
at once as the bits of an integer: time linear in the path, whatever the pattern.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

_CONSUME, _LOOP = 0, 1


@dataclass(frozen=True, slots=True)
class _Token:
    """One state of the automaton: it consumes a character (to the next state) or loops on it
    (staying, and free to move on without one)."""

    kind: int
    accepts: Callable[[str], bool]


def _not_slash(ch: str) -> bool:
    return ch != "/"


def _any(ch: str) -> bool:
    return True


def _literal(c: str) -> Callable[[str], bool]:
    return lambda ch: ch == c


def _char_class(text: str, start: int) -> tuple[Callable[[str], bool], int] | None:
    """The bracket expression at `text[start] == "["`, and where it ends; None if unclosed."""
    i = start + 1
    negated = i < len(text) and text[i] in "!^"
    i += negated
    singles: set[str] = set()
    ranges: list[tuple[str, str]] = []
    first = True
    while i < len(text) and (first or text[i] != "]"):
        first = False
        if i + 2 < len(text) and text[i + 1] == "-" and text[i + 2] != "]":
            ranges.append((text[i], text[i + 2]))  # a reversed range matches nothing
            i += 3
        else:
            singles.add(text[i])
            i += 1
    if i >= len(text):
        return None

    def accepts(ch: str) -> bool:
        inside = ch in singles or any(low <= ch <= high for low, high in ranges)
        return ch != "/" and inside != negated

    return accepts, i + 1


def _segment(text: str, tokens: list[_Token]) -> None:
    if text == "*":  # a whole segment: at least one character
        tokens += [_Token(_CONSUME, _not_slash), _Token(_LOOP, _not_slash)]
        return
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "*":
            if not (tokens and tokens[-1].kind == _LOOP):
                tokens.append(_Token(_LOOP, _not_slash))
            i += 1
        elif ch == "?":
            tokens.append(_Token(_CONSUME, _not_slash))
            i += 1
        elif ch == "[" and (found := _char_class(text, i)) is not None:
            accepts, i = found
            tokens.append(_Token(_CONSUME, accepts))
        else:
            tokens.append(_Token(_CONSUME, _literal(ch)))
            i += 1


@dataclass
class Glob:
    """One compiled pattern; `match(path)` says whether it covers `path`."""

    tokens: list[_Token]
    skips: list[tuple[int, int]]
    """Optional groups: from the state before one to the state after it, with no character."""
    everything: bool = False
    _loops: int = 0
    _skips: list[tuple[int, int]] = field(default_factory=list)
    """The optional groups as (width, the states they start from), so that all groups of one
    width are skipped by one shift, however many there are."""
    _masks: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._loops = sum(1 << i for i, t in enumerate(self.tokens) if t.kind == _LOOP)
        starts: dict[int, int] = {}
        for start, end in self.skips:
            starts[end - start] = starts.get(end - start, 0) | 1 << start
        self._skips = sorted(starts.items())

    @classmethod
    def compile(cls, pattern: str) -> Glob:
        segments: list[str] = []
        for segment in pattern.split("/"):
            if not (segment == "**" and segments and segments[-1] == "**"):
                segments.append(segment)
        if segments == ["**"]:
            return cls([], [], everything=True)
        tokens: list[_Token] = []
        skips: list[tuple[int, int]] = []
        for i, segment in enumerate(segments):
            last = i == len(segments) - 1
            if segment == "**" and i == 0:  # `**/x`: any folders first, or none
                start = len(tokens)
                tokens += [
                    _Token(_CONSUME, _any),
                    _Token(_LOOP, _any),
                    _Token(_CONSUME, _literal("/")),
                ]
                skips.append((start, len(tokens)))
                continue
            if segment == "**" and last:  # `a/**`: everything inside
                tokens += [_Token(_CONSUME, _literal("/")), _Token(_LOOP, _any)]
                continue
            if segment == "**":  # `a/**/b`: any folders between, or none
                start = len(tokens)
                tokens += [
                    _Token(_CONSUME, _literal("/")),
                    _Token(_CONSUME, _any),
                    _Token(_LOOP, _any),
                ]
                skips.append((start, len(tokens)))
                continue
            if i > 0 and not (i == 1 and segments[0] == "**"):  # that group ends with `/`
                tokens.append(_Token(_CONSUME, _literal("/")))
            _segment(segment, tokens)
        return cls(tokens, skips)

    def _closed(self, states: int) -> int:
        """Every state reachable without a character: past a loop, over an optional group."""
        while True:
            more = states | ((states & self._loops) << 1)
            for width, starts in self._skips:
                more |= (more & starts) << width
            if more == states:
                return states
            states = more

    def _masks_of(self, ch: str) -> tuple[int, int]:
        found = self._masks.get(ch)
        if found is None:
            consume = loop = 0
            for i, token in enumerate(self.tokens):
                if token.accepts(ch):
                    if token.kind == _CONSUME:
                        consume |= 1 << i
                    else:
                        loop |= 1 << i
            found = self._masks[ch] = (consume, loop)
        return found

    def match(self, path: str) -> bool:
        found, _read = self.scan(path, len(path))
        assert found is not None  # every character may be read
        return found

    def scan(self, path: str, limit: int) -> tuple[bool | None, int]:
        """Whether the pattern covers `path`, reading at most `limit` of its characters (None
        when that is not enough to tell), and how many it read."""
        if self.everything:
            return bool(path), 0
        accept = 1 << len(self.tokens)
        states = self._closed(1)
        for read, ch in enumerate(path):
            if ch == "/" and states & accept:
                return True, read  # the pattern names a folder the path is in
            if read >= limit:
                return None, read
            consume, loop = self._masks_of(ch)
            states = self._closed(((states & consume) << 1) | (states & loop))
            if not states:
                return False, read + 1
        return bool(states & accept), len(path)
