"""The one list of stable error codes, and the exception that carries them.

Every face maps a code to its own protocol (an HTTP status, an MCP tool error whose text starts
with the code, a CLI exit status); no code carries an HTTP status of its own.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    INVALID_ARGUMENT = "invalid_argument"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    UNKNOWN_RECIPIENT = "unknown_recipient"
    CONFLICT = "conflict"
    GONE = "gone"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    INBOX_FULL = "inbox_full"
    LOCKED_OUT = "locked_out"
    UNAVAILABLE = "unavailable"


class AgentpostError(Exception):
    """A refusal a caller can act on: a stable `code`, a sentence for people, optional details.

    Raised before anything is written, or inside a transaction that is then rolled back, so a
    refused call never changes anything.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
        self.details = details or {}
        self.retry_after_s = retry_after_s

    def to_dict(self) -> dict[str, Any]:
        """The refusal as every face shows it: `retry_after_s` only where waiting helps."""
        body: dict[str, Any] = {"code": self.code.value, "message": self.message}
        if self.details:
            body["details"] = self.details
        if self.retry_after_s is not None:
            body["retry_after_s"] = self.retry_after_s
        return body


def invalid(message: str, **details: Any) -> AgentpostError:
    return AgentpostError(ErrorCode.INVALID_ARGUMENT, message, details=details or None)


def not_found(message: str, **details: Any) -> AgentpostError:
    return AgentpostError(ErrorCode.NOT_FOUND, message, details=details or None)


def forbidden(message: str, **details: Any) -> AgentpostError:
    return AgentpostError(ErrorCode.FORBIDDEN, message, details=details or None)


def key_turned_off(agent: str, *, revoked: bool) -> AgentpostError:
    """A key that was one, no longer good: its `details.reason` (`key_revoked`,
    `agent_disabled`) tells a client to stop retrying, whether the request was refused at the
    door or a wait it held open was ended."""
    if revoked:
        message, reason = "this key was revoked; ask the owner for a new one", "key_revoked"
    else:
        message, reason = f"agent {agent!r} is disabled", "agent_disabled"
    return AgentpostError(ErrorCode.UNAUTHENTICATED, message, details={"reason": reason})
