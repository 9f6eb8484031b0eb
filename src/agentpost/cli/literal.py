"""Outside text as a terminal shows it: as written, but for the characters that would drive
the terminal instead of being shown (escape sequences, carriage returns, bidirectional
overrides). Without Rich, so that the commit guard, which must start fast, shows text the same
way as every other command."""

from __future__ import annotations

import json
from typing import Any

_HIDDEN = {
    code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
}
_HIDDEN |= {
    code: f"\\u{code:04x}"
    for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


_JSON_HIDDEN = {code: f"\\u{code:04x}" for code in _HIDDEN if code >= 0x7F}
"""What JSON leaves raw of `_HIDDEN` (it escapes only the C0 controls), as JSON escapes."""


def json_text(value: Any, *, indent: int | None = None) -> str:
    """`value` as JSON for a terminal: Unicode as written, but for the characters `visible`
    writes out, which are `\\u` escapes here (the same JSON value: they occur only in strings)."""
    return json.dumps(value, ensure_ascii=False, indent=indent).translate(_JSON_HIDDEN)


def visible(text: str) -> str:
    """`text` with its control characters written out (`\\x1b`), line breaks and tabs kept:
    a body must not move the cursor, clear the screen, retitle the terminal or reorder what
    follows it (bidirectional overrides)."""
    return text.translate(_HIDDEN)
