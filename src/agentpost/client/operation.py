"""One REST operation, written once, callable from the async and the sync client alike.

Each operation is a small builder: the caller's arguments in, a `Request` out (query, body,
headers, and how to read the answer into a domain type). `Operation` wraps a builder with the
route's method and path, and is a descriptor: on an `AsyncClient` it is a coroutine method, on a
`Client` a blocking one, both with the builder's own signature and docstring (so type checkers
and `help()` see `send(to, body, *, subject=…)`). Without it every one of the ~45 operations
would be written twice, once per client, and the two would drift. The method and path are data,
so a test can hold every operation against the service's OpenAPI.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

from agentpost.domain.errors import invalid
from agentpost.domain.limits import check_limit

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Request(Generic[T]):
    """What one call sends besides its method and path, and how its JSON answer is read."""

    parse: Callable[[Any], T]
    path_args: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    wait_s: float = 0
    """How long the server may hold this request open by design (a long-poll), on top of the
    client's own timeout."""
    for_session: bool = True
    """Whether it speaks for the client's session (`Agentpost-Session`). Minting a session
    speaks for none: naming one the service has ended would only have it refused."""
    hands_over: bool = False
    """Whether it hands mail over, marking it read (`inbox` but for a peek, `wait`): a GET the
    network failed that may not go again, as its lost answer held mail the next would not."""

    def __post_init__(self) -> None:
        # A page's size is refused here as the service refuses it, in the words a local
        # session's tools use: a remote-backed one answers alike (not with REST's field names).
        limit = self.params.get("limit")
        if limit is not None:
            check_limit(limit)

    def url(self, path: str) -> str:
        return path.format(**{k: _segment(k, v) for k, v in self.path_args.items()})

    def query(self) -> dict[str, Any]:
        """The query parameters that are set: None means "the server's default"."""
        return {k: v for k, v in self.params.items() if v is not None}


def _segment(name: str, value: str) -> str:
    """One path segment that the service reads back as `value`: '/' and the like quoted, and
    the dots of a '.' or '..', which httpx would resolve away as a step up the path. An empty
    one names nothing, and would reach another route: refused here."""
    if not value:
        raise invalid(f"{name} must not be empty", **{name: value})
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if value.strip(".") == "" else quoted


def fields(**values: Any) -> dict[str, Any]:
    """A JSON body of the fields that are set (None: the server's default, or "unchanged")."""
    return {k: v for k, v in values.items() if v is not None}


def retry_headers(idempotency_key: str | None) -> dict[str, str]:
    """The `Idempotency-Key` header of a request that makes something (a message, a task, a
    question): the caller's key, else a fresh one, so that the client may send it again when
    the network lost the answer, and the service still makes it once."""
    if idempotency_key is None:
        idempotency_key = f"auto-{secrets.token_urlsafe(18)}"
    return {"Idempotency-Key": idempotency_key}


def listed(values: str | Sequence[str]) -> list[str]:
    """One value or several, as a list: a string is a sequence of strings too, and `list`
    would send each of its characters."""
    return [values] if isinstance(values, str) else list(values)


def nothing(_: Any) -> None:
    """For operations whose answer only confirms what the caller already knows."""


class AsyncBase:
    """What an `Operation` needs of an async client: perform one request."""

    async def _perform(self, method: str, path: str, request: Request[T]) -> T:
        raise NotImplementedError


class SyncBase:
    """What an `Operation` needs of a blocking client: perform one request."""

    def _perform(self, method: str, path: str, request: Request[T]) -> T:
        raise NotImplementedError


class Operation(Generic[P, T]):
    """A REST operation (`method` `path`) as a method of both clients; see the module docstring."""

    def __init__(self, method: str, path: str, build: Callable[P, Request[T]]) -> None:
        self.method = method
        self.path = path
        self.build = build
        self.__doc__ = build.__doc__
        self.name = build.__name__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Operation[P, T]: ...

    @overload
    def __get__(self, client: AsyncBase, owner: type[Any]) -> Callable[P, Awaitable[T]]: ...

    @overload
    def __get__(self, client: SyncBase, owner: type[Any]) -> Callable[P, T]: ...

    def __get__(self, client: AsyncBase | SyncBase | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        build, method, path = self.build, self.method, self.path
        if isinstance(client, AsyncBase):
            async_client = client

            @functools.wraps(build)
            async def call_async(*args: P.args, **kwargs: P.kwargs) -> T:
                return await async_client._perform(method, path, build(*args, **kwargs))

            return call_async
        sync_client = client

        @functools.wraps(build)
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return sync_client._perform(method, path, build(*args, **kwargs))

        return call


def operations(cls: type[Any]) -> dict[str, Operation[Any, Any]]:
    """Every operation a client class offers, by name (its OpenAPI operation id)."""
    found: dict[str, Operation[Any, Any]] = {}
    for klass in reversed(cls.__mro__):
        found.update({k: v for k, v in vars(klass).items() if isinstance(v, Operation)})
    return found
