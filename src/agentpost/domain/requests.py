"""Blocking questions: what a `request` (and later `check_request`) answers the asker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentpost.domain.models import Message


@dataclass(frozen=True, slots=True)
class RequestAnswer:
    """Where a question stands. `request_id` is the request's message id; `answer` and `data`
    are the response's body and data once `answered`, and `response` the whole message (who
    answered, when, with which trust). `timed_out` says the asker stopped waiting before an
    answer came, never an error: `check_request` fetches a later answer."""

    request_id: str
    answered: bool
    timed_out: bool = False
    response: Message | None = None

    @property
    def answer(self) -> str | None:
        return None if self.response is None else self.response.body

    @property
    def data(self) -> Any:
        return None if self.response is None else self.response.data

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "answered": self.answered,
            "answer": self.answer,
            "data": self.data,
            "timed_out": self.timed_out,
            "response": None if self.response is None else self.response.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestAnswer:
        response = data.get("response")
        return cls(
            request_id=data["request_id"],
            answered=bool(data["answered"]),
            timed_out=bool(data.get("timed_out", False)),
            response=None if response is None else Message.from_dict(response),
        )
