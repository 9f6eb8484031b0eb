"""Refusals as HTTP answers: `{"error": {"code", "message", "details"?}}` with the status
DESIGN.md gives each stable code, and `Retry-After` where waiting helps."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match

from agentpost.domain.errors import AgentpostError, ErrorCode, invalid
from agentpost.http.routing import restore_line_feeds

STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNKNOWN_RECIPIENT: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.GONE: 410,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.INBOX_FULL: 429,
    ErrorCode.LOCKED_OUT: 429,
    ErrorCode.UNAVAILABLE: 503,
}

# Statuses Starlette raises itself (no route, wrong method), in our codes.
_FROM_STATUS: dict[int, ErrorCode] = {
    400: ErrorCode.INVALID_ARGUMENT,
    401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.NOT_FOUND,
    409: ErrorCode.CONFLICT,
    413: ErrorCode.TOO_LARGE,
    429: ErrorCode.RATE_LIMITED,
    503: ErrorCode.UNAVAILABLE,
}


def error_response(err: AgentpostError) -> JSONResponse:
    body: dict[str, Any] = err.to_dict()
    headers: dict[str, str] = {}
    if err.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(err.retry_after_s)))
    if err.code is ErrorCode.UNAUTHENTICATED:
        headers["WWW-Authenticate"] = 'Bearer realm="agentpost"'
    return JSONResponse({"error": body}, status_code=STATUS[err.code], headers=headers)


def _problem(error: Any) -> tuple[str, str]:
    """Where and why only: the rejected values are the caller's data.

    A body that is no JSON object is told in words a person with curl can act on: FastAPI puts
    a decoding error's character position where a field goes, and reads a body sent without
    `Content-Type: application/json` (curl's `-d` alone sends a form) as no object at all."""
    where = tuple(error["loc"])
    if error["type"] == "json_invalid":
        why = error.get("ctx", {}).get("error", "cannot be decoded")
        return "body", f"not JSON: {why} (at character {where[-1]})"
    if error["type"] == "model_attributes_type" and where == ("body",):
        return "body", "should be a JSON object, sent with Content-Type: application/json"
    return ".".join(str(part) for part in where if part != "body") or "body", error["msg"]


def _validation_problems(exc: RequestValidationError) -> AgentpostError:
    problems = [_problem(e) for e in exc.errors()]
    return AgentpostError(
        ErrorCode.INVALID_ARGUMENT,
        "; ".join(f"{field}: {msg}" for field, msg in problems) or "invalid request",
        details={"fields": [{"field": field, "problem": msg} for field, msg in problems]},
    )


def _methods_taken(request: Request) -> str | None:
    """Every method the request's path takes: Starlette names only the first route's, and a
    path's methods are often routes of their own (`GET /v1/me` beside `PATCH /v1/me`)."""
    methods: set[str] = set()
    for route in _routes(request.app.router.routes):
        match, _ = route.matches(request.scope)
        if match is Match.PARTIAL:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods)) or None


def _routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI keeps included routers
        yield from _routes(included.routes) if included is not None else (route,)


def _control_character(path: str) -> str | None:
    """The first control character of a path that no route took: why it is bad input, where
    the router would say only "Not Found"."""
    return next((c for c in path if unicodedata.category(c) == "Cc"), None)


def install_error_handlers(app: FastAPI) -> None:
    async def refused(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AgentpostError)
        return error_response(exc)

    async def invalid_request(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(_validation_problems(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        restore_line_feeds(request.scope)
        if exc.status_code == 404 and (control := _control_character(request.scope["path"])):
            return error_response(
                invalid(
                    f"the path {request.scope['path']!r} holds a control character "
                    f"(U+{ord(control):04X}) where no route takes one"
                )
            )
        code = _FROM_STATUS.get(exc.status_code, ErrorCode.INVALID_ARGUMENT)
        message = exc.detail if isinstance(exc.detail, str) else code.value
        allowed = _methods_taken(request) if exc.status_code == 405 else None
        if allowed:
            message = f"{request.url.path} takes {allowed}, not {request.method}"
        response = error_response(AgentpostError(code, message))
        if exc.status_code == 405:  # keep the method's truth, and what to use instead
            response.status_code = 405
            if allowed:
                response.headers["Allow"] = allowed
        return response

    app.add_exception_handler(AgentpostError, refused)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
