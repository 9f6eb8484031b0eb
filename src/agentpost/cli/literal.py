"""Outside text as a terminal shows it: as written, but for the characters that would drive
the terminal instead of being shown (escape sequences, carriage returns, bidirectional
overrides). Without Rich, so that the commit guard, which must start fast, shows text the same
way as every other command."""

from __future__ import annotations

_HIDDEN = {
    code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
}
_HIDDEN |= {
    code: f"\\u{code:04x}"
    for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


def visible(text: str) -> str:
    """`text` with its control characters written out (`\\x1b`), line breaks and tabs kept:
    a body must not move the cursor, clear the screen, retitle the terminal or reorder what
    follows it (bidirectional overrides)."""
    return text.translate(_HIDDEN)
